"""A public name means one thing across hanet's packages: the renamed homonyms (the consumer's
``BrokerConnector``, the status document's ``DispatchErrorInfo``, ``hanet.boot.serve_on``)
keep their old names as deprecated aliases, and no new homonym appears."""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict

import hanet
import hanet.boot
import hanet.client
import hanet.protocol
import hanet.store

DEPRECATED_ALIASES = {
    ("hanet.client", "Connector"),  # hanet.client.BrokerConnector; hanet.boot.Connector stays
    ("hanet.protocol", "DispatchError"),  # DispatchErrorInfo; hanet.store.DispatchError stays
}

KNOWN_HOMONYMS = {
    # Different things under one name in two packages, not renamed yet (each package's own
    # reading of its name): a pull's answer on each side, the name server's and the broker's
    # topic bounds, DLedger's entry format next to the commit log's.
    "PullResult",
    "MAX_TOPICS",
    "BLANK_MAGIC",
    "INDEX_ENTRY_SIZE",
    "Message",
    "encode_blank",
}


def test_the_old_names_still_work() -> None:
    assert hanet.client.Connector is hanet.client.BrokerConnector
    assert hanet.protocol.DispatchError is hanet.protocol.DispatchErrorInfo
    assert hanet.boot.serve_listeners is hanet.boot.serve_on
    assert hanet.serve_on is hanet.boot.serve_on
    assert not issubclass(hanet.protocol.DispatchErrorInfo, BaseException)
    assert issubclass(hanet.store.DispatchError, hanet.HanetError)


def test_no_public_name_means_two_things() -> None:
    homes: defaultdict[str, dict[int, str]] = defaultdict(dict)
    packages = [hanet.__name__]
    packages += [info.name for info in pkgutil.iter_modules(hanet.__path__, "hanet.")]
    for name in packages:
        if name == "hanet.__main__":
            continue
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", ()):
            if (name, public) not in DEPRECATED_ALIASES:
                homes[public][id(getattr(module, public))] = name
    homonyms = {name: sorted(where.values()) for name, where in homes.items() if len(where) > 1}
    assert set(homonyms) <= KNOWN_HOMONYMS, homonyms
