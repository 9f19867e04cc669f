"""One root exception: every exception class dpfed defines derives from
:class:`dpfed.core.errors.DpfedError`, so ``except DpfedError`` catches whatever dpfed raises on
purpose. Every module of dpfed, party, coordinator and protos is imported and every Exception
subclass defined in it is checked; private control-flow classes (a leading underscore, never seen
by users) and warning categories (``warnings.warn`` categories, not raised) are left out."""
from __future__ import annotations

import importlib
import pkgutil
import types

from dpfed.core.errors import DpfedError

PACKAGES = ("dpfed", "party", "coordinator", "protos")


def _modules() -> list[types.ModuleType]:
    mods = []
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        mods.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{name}."):
            if info.name.endswith(".__main__"):  # runs the command line when imported
                continue
            mods.append(importlib.import_module(info.name))
    return mods


def exception_classes(modules: list[types.ModuleType]) -> list[type[BaseException]]:
    """Public Exception subclasses defined (not just imported) in the given modules."""
    found = []
    for mod in modules:
        for obj in vars(mod).values():
            if (isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == mod.__name__
                    and not obj.__name__.startswith("_") and not issubclass(obj, Warning)):
                found.append(obj)
    return found


def test_every_dpfed_exception_derives_from_dpfed_error() -> None:
    modules = _modules()
    assert len(modules) > 40  # the walk really saw the packages
    classes = exception_classes(modules)
    names = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    assert {"dpfed.core.ledger.BudgetExceededError", "protos.codec.ProtocolError",
            "coordinator.client.JobError"} <= names  # the check covers every layer
    stray = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, DpfedError))
    assert not stray, f"exceptions not derived from DpfedError: {stray}"


def test_the_check_catches_a_stray_exception() -> None:
    mod = types.ModuleType("dpfed.planted")
    exec("class PlantedError(ValueError):\n    pass\nclass _Private(Exception):\n    pass\n", vars(mod))
    classes = exception_classes([mod])
    assert [c.__name__ for c in classes] == ["PlantedError"]
    assert not issubclass(classes[0], DpfedError)
