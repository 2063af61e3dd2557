"""The lifecycle package's public names stay what they are, whatever modules are imported.

Importing a submodule binds it as an attribute of its package: a module named like one of the
names ``gpu_sizer.lifecycle`` re-exports (a ``lifecycle/decide.py`` next to the re-exported
``decide`` function) would replace that name for every import that runs afterwards, and callers
would get a module where they expect a function, depending on import order.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import gpu_sizer.lifecycle as lifecycle


def test_importing_every_submodule_leaves_the_public_names_in_place() -> None:
    before = {name: getattr(lifecycle, name) for name in lifecycle.__all__}
    for info in pkgutil.iter_modules(lifecycle.__path__, prefix="gpu_sizer.lifecycle."):
        importlib.import_module(info.name)
    shadowed = {
        name: getattr(lifecycle, name)
        for name in lifecycle.__all__
        if getattr(lifecycle, name) is not before[name]
        or isinstance(getattr(lifecycle, name), types.ModuleType)
    }
    assert not shadowed, f"submodules shadow re-exported names: {sorted(shadowed)}"
