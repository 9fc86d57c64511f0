"""RocketMQ's plain ACL on the broker port (``aclEnable=true``).

:class:`BrokerAcl` reads ``plain_acl.yml`` (``aclFile``; default
``<store>/config/plain_acl.yml``, next to the broker's other config files) when the broker is
made, so a missing or malformed file stops the start with the reason, installs an
:class:`~hanet.protocol.AclGuard` in front of the broker port's dispatch table, and reloads the
file within a second of a change (:meth:`BrokerAcl.watch`; a change that does not load is
logged at ERROR and the accounts last read stay in force).

As in RocketMQ 4.9.8 the broker's own requests (a slave copying its master's metadata,
registrations) go unsigned unless the process signs them (``hanet master|slave
--access-key/--secret-key``): list the brokers' addresses in ``globalWhiteRemoteAddresses`` or
give them an account.
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from hanet.ha import BrokerConfig
from hanet.protocol import AclGuard, PlainAclFile

__all__ = ["ACL_FILE", "ACL_POLL_INTERVAL", "BrokerAcl", "acl_file_path"]

log = logging.getLogger("hanet.broker")

ACL_FILE = Path("config") / "plain_acl.yml"
"""Where the ACL file is by default, under the store directory."""

ACL_POLL_INTERVAL = 1.0
"""Seconds between two looks at the file for a change."""


def acl_file_path(config: BrokerConfig) -> Path:
    """``config.acl_file``, else ``<store>/config/plain_acl.yml``."""
    return config.acl_file or config.store_path_root_dir / ACL_FILE


class BrokerAcl:
    """The ACL of a port: its file and the guard checking requests against it.

    Raises:
        AclConfigError: the file is missing or does not load.
    """

    def __init__(self, path: Path, *, port: str = "the broker port") -> None:
        self.file = PlainAclFile(path)
        self.guard = AclGuard(lambda: self.file.config, port=port)
        log.info("%s: ACL on, %d accounts from %s", port, len(self.file.config.accounts), path)

    async def watch(self, interval: float = ACL_POLL_INTERVAL) -> None:
        """Reload the file when it changes, until cancelled."""
        while True:
            await trio.sleep(interval)
            self.file.poll()
