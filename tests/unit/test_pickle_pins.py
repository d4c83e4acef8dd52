"""Classes pickled into Flink keyed state keep the module path their pickles name.

A savepoint holds the attribution job's state as pickles, and a pickle names each class by
its `__module__`: moving a class out of the module a savepoint names must leave that name
importable (udfs/pickle_paths.py: MOVED, the old module paths, and PINNED, the classes whose
`__module__` stays the old path). Here: (i) every project class the stateful operators'
stored pickles name, read from the bytes the state fakes hold (tests/state_pickles.py), is
pinned; (ii) each pinned class pickles under its pinned path, which still gives the class;
(iii) the pickles the code before the move stored (tests/fixtures/state/pre_move/, made by
tests/fixtures/state/make_pre_move_pickles.py at f7eae46) load into the current classes
with the values they had."""

from __future__ import annotations

import importlib
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from pipelines.flink.gpu_cost.job import Batch, CostPerGpu, LinkCalls
from schemas.gpu import GpuSample
from schemas.records import GpuCall
from tests.flink_fakes import Harness, StateStore
from tests.state_pickles import (
    class_path,
    operators_over,
    pickled_names,
    plain,
    project_names,
    stored_bytes,
    stream,
)
from udfs.pickle_paths import MOVED, PINNED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state" / "pre_move"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def pinned_class(module: str, name: str) -> type:
    """The class a pinned name stands for, from where it lives now."""
    return getattr(importlib.import_module(MOVED.get(module, module)), name)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def attribution_state_names() -> set[tuple[str, str]]:
    """The project classes named by anything the attribution job's stateful operators
    stored over a whole plan (gathered after every call) and held at its end."""
    operators = operators_over(stream(), 1.0, observe=True)
    operators.advance(2**63 - 1)
    operators._observe()
    assert operators.named is not None
    return operators.named


def test_every_class_the_attribution_state_names_is_pinned(attribution_state_names):
    assert {("udfs.journey_book", "Snapshot"), ("udfs.journey_columns", "ConvertedJourneys"),
            ("udfs.journey_columns", "JourneyTouches")} <= attribution_state_names
    assert attribution_state_names <= PINNED, (
        f"classes in keyed state that nothing pins: {attribution_state_names - PINNED}")


def gpu_state() -> list[StateStore]:
    """The GPU cost job's keyed state with a call waiting for its pod's GPU (LinkCalls) and
    samples and calls waiting for their period (CostPerGpu)."""
    call = GpuCall("t1", "s1", 1_000, 2_000, "u1", "", "pod-a", "shop", "ranking")
    sample = GpuSample(1_500, "GPU-1", "NVIDIA L40S", "host", "pod-a", "shop", 40.0, 5.0,
                       1000.0, 47000.0, 150.0, 1.0)
    link, cost = StateStore(), StateStore()
    Harness(LinkCalls(60_000, "metrics"), link).process(
        Batch("calls", "pod:shop/pod-a", (call,), 1_000), key="pod:shop/pod-a")
    costing = Harness(CostPerGpu("", 10_000, 60_000, 60_000), cost)
    costing.process(Batch("samples", "gpu:GPU-1", (sample,), 1_500), key="gpu:GPU-1")
    costing.process(Batch("calls", "gpu:GPU-1", (call._replace(gpu_uuid="GPU-1"),), 1_000),
                    key="gpu:GPU-1")
    return [link, cost]


def test_every_class_the_gpu_cost_state_names_is_pinned():
    """The GPU cost job keeps its samples and calls (schemas classes) in state as they
    are: pickled by Flink's PICKLED_BYTE_ARRAY coder, they name their classes too."""
    named = {name for store in gpu_state() for _, data in stored_bytes(store)
             for name in project_names(pickled_names(data))}
    assert named == {("schemas.records", "GpuCall"), ("schemas.gpu", "GpuSample")}
    assert named <= PINNED, f"classes in keyed state that nothing pins: {named - PINNED}"


@pytest.mark.parametrize("module,name", sorted(PINNED))
def test_a_pinned_class_pickles_under_its_pinned_path(module, name):
    cls = pinned_class(module, name)
    assert class_path(cls) == f"{module}:{name}"
    assert pickled_names(pickle.dumps(cls)) == {(module, name)}
    # the pinned path itself still gives the class (through the alias for a moved module)
    assert getattr(importlib.import_module(module), name) is cls


@pytest.mark.parametrize("file", sorted(EXPECTED["files"]))
def test_a_pickle_the_code_before_the_move_stored_loads_as_it_was(file):
    entry: dict[str, Any] = EXPECTED["files"][file]
    data = (FIXTURES / file).read_bytes()
    names = pickled_names(data)
    assert sorted(map(list, project_names(names))) == entry["names"]
    assert project_names(names) <= PINNED
    value: Any = data
    for _ in range(entry["layers"]):
        value = pickle.loads(value)
    assert plain(value) == entry["expected"]
    # and it pickles again under the same names
    again = pickle.dumps(value if entry["layers"] == 1 else pickle.dumps(value))
    assert project_names(pickled_names(again)) == project_names(names)
