"""Module paths that Flink state pins: a pickle names a class by its module, so a class
stored in keyed state keeps the module path it had when state was first written, and that
path stays importable after the file moved.

`PINNED` lists every class that goes into the jobs' state, by the path its pickles record
(tests/unit/test_pickle_pins.py reads the operators' pickles and checks that they name
nothing else). The classes set `__module__` to that path, so what is pickled now loads in
earlier versions too. `MOVED` maps each pinned path that no longer is a file to the module
that holds the classes now; `install()` (called by udfs/__init__.py) makes those paths
import as the new modules, so `pickle.loads` finds them. Nothing in the project imports
an old path (tests/unit/test_architecture.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    "udfs.journey_book": "udfs.journeys.book",
    "udfs.journey_columns": "udfs.journeys.columns",
}

PINNED: frozenset[tuple[str, str]] = frozenset({
    ("udfs.journey_book", "Snapshot"),
    ("udfs.journey_book", "Progress"),
    ("udfs.journey_book", "Overlay"),  # since the journeys store what changed
    ("udfs.journey_columns", "ConvertedJourneys"),
    ("udfs.journey_columns", "JourneyTouches"),
    ("schemas.events", "EventColumns"),
    ("schemas.events", "OrderColumns"),
    ("schemas.events", "TouchColumns"),
    ("schemas.records", "GpuCall"),  # the GPU cost job's waiting and active calls
    ("schemas.gpu", "GpuSample"),  # and its samples
})


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module that replaced it (the same module object)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system gave the module the alias's spec; it keeps its own
        module.__spec__ = self.own_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        moved_to = MOVED.get(fullname)
        if moved_to is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(moved_to))


def install() -> None:
    """Makes the moved paths importable (once per interpreter)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
