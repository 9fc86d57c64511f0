"""The packages that load their re-exports on first use (``hanet``, ``hanet.dledger``,
``hanet.spark``) do it one way: every name of ``__all__`` resolves, ``dir()`` lists it, an
unknown name is an AttributeError, and importing the package loads none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["hanet", "hanet.dledger"])
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        _ = module.nope


def test_importing_the_packages_loads_nothing_lazy() -> None:
    code = (
        "import sys, hanet, hanet.dledger, hanet.spark\n"
        "assert 'StreamChannel' in dir(hanet) and 'find_stores' in dir(hanet.spark)\n"
        "lazy = ('trio', 'hanet.channel', 'pyspark', 'hanet.dledger._filelog')\n"
        "loaded = [m for m in lazy if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
