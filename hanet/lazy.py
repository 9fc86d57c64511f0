"""The one way a hanet package loads what it re-exports on first use (PEP 562).

A package whose ``import`` must stay light (``hanet`` loads no networking code, ``hanet.spark``
no pyspark, ``hanet.dledger`` no trio) lists each lazily loaded name with the module it lives
in, imports the same names under ``TYPE_CHECKING`` for type checkers, and sets::

    __getattr__, __dir__ = lazy_exports(__name__, {"Name": ".module", ...})

A name is imported on first use and then kept in the package (no second lookup).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` (its ``__name__``, called from its
    ``__init__``): ``homes`` maps each lazily loaded name to its module, absolute or relative
    to ``package``."""
    namespace = sys.modules[package].__dict__
    where = dict(homes)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
