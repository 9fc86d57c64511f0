"""Every error hanet raises on purpose derives from :class:`hanet.errors.HanetError`, so a
caller can catch hanet's errors in one clause (and still catch the builtin kind each one also
is: ``ValueError``, ``ConnectionError``, ...)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import hanet
from hanet.errors import HanetError


def _modules() -> list[ModuleType]:
    modules = [hanet]
    for info in pkgutil.walk_packages(hanet.__path__, "hanet."):
        if info.name == "hanet.__main__":
            continue  # runs the command line
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as exc:
            # An optional dependency (pyspark, ...) absent: its modules are not checked.
            assert exc.name is not None and not exc.name.startswith("hanet"), exc
    return modules


def test_every_exception_class_derives_from_hanet_error() -> None:
    defined: list[type[BaseException]] = []
    for module in _modules():
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                defined.append(value)
    assert len(defined) > 40  # the walk found the package's modules
    strays = sorted(
        f"{cls.__module__}.{cls.__qualname__}" for cls in defined if not issubclass(cls, HanetError)
    )
    assert strays == []


def test_an_error_keeps_its_builtin_kind() -> None:
    from hanet.boot import TlsHandshakeError
    from hanet.namesrv import RegistrationError
    from hanet.protocol import RemotingHeaderError

    assert issubclass(TlsHandshakeError, ConnectionError)
    assert issubclass(RegistrationError, ValueError)
    assert issubclass(RemotingHeaderError, ValueError)
    error = TlsHandshakeError("no certificate")
    assert isinstance(error, HanetError) and str(error) == "no certificate"
