"""The gpu_costs topic's messages (the GPU cost job's, pipelines/flink/gpu_cost/job.py): one
JSON object a message, its `kind` and the fields of that kind, keyed by [gpu_uuid]:

    call        a GPU-backed call's cost in one priced interval (schemas/rows.py
                GPU_CALL_COST: the gpu_call_costs table)
    idle        the idle part of one priced interval (GPU_IDLE_COST: gpu_idle_costs)
    unobserved  time before `until_ms` that no sample covered (UNOBSERVED_FIELDS)

`encode` writes one, `decode` reads one (GpuCostMessageError, a ValueError, naming what is
wrong with a message that is not one), `row` gives a call's or an idle interval's row in
its declaration's column order. Readers: the ROI job (pipelines/flink/roi/job.py) and the
loader (pipelines/store/sinks.py GpuCostsSink).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from schemas import rows

CALL, IDLE, UNOBSERVED = "call", "idle", "unobserved"
UNOBSERVED_FIELDS = ("gpu_uuid", "until_ms", "unobserved_ms")
FIELDS: dict[str, tuple[str, ...]] = {CALL: rows.GPU_CALL_COST.names,
                                      IDLE: rows.GPU_IDLE_COST.names,
                                      UNOBSERVED: UNOBSERVED_FIELDS}
ROWS = {CALL: rows.GPU_CALL_COST, IDLE: rows.GPU_IDLE_COST}  # the kinds stored as rows


class GpuCostMessageError(ValueError):
    """A gpu_costs message that cannot be read, said plainly."""


class GpuCostMessage(NamedTuple):
    kind: str
    values: dict[str, Any]  # the message's fields but `kind`


def encode(kind: str, values: Mapping[str, Any]) -> str:
    """The message of a `kind` with its fields from `values` (others in it are left out)."""
    if kind not in FIELDS:
        raise GpuCostMessageError(f"gpu_costs message: no kind {kind!r} (one of "
                                  f"{', '.join(FIELDS)})")
    missing = [name for name in FIELDS[kind] if name not in values]
    if missing:
        raise GpuCostMessageError(f"gpu_costs message of kind {kind}: field "
                                  f"'{missing[0]}' is missing")
    return json.dumps({"kind": kind, **{name: values[name] for name in FIELDS[kind]}},
                      separators=(",", ":"))


def decode(value: bytes | str) -> GpuCostMessage:
    """One message: its kind and its other fields as they came (a reader asks for those it
    needs: `row`). GpuCostMessageError if it is not JSON, not an object, or has no kind."""
    try:
        data = json.loads(value)
    except (TypeError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise GpuCostMessageError(f"gpu_costs message is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise GpuCostMessageError(f"gpu_costs message is not a JSON object: "
                                  f"{type(data).__name__}")
    kind = data.pop("kind", None)
    if not isinstance(kind, str):
        raise GpuCostMessageError(f"gpu_costs message without a kind (got {kind!r})")
    return GpuCostMessage(kind, data)


def row(message: GpuCostMessage) -> tuple[Any, ...]:
    """A call's or an idle interval's row (ROWS: its declaration's columns, in order);
    GpuCostMessageError naming a missing field, or a kind that is no row."""
    layout = ROWS.get(message.kind)
    if layout is None:
        raise GpuCostMessageError(f"gpu_costs message of kind {message.kind!r} is no row")
    try:
        return tuple(message.values[name] for name in layout.names)
    except KeyError as error:
        raise GpuCostMessageError(f"gpu_costs message of kind {message.kind}: field "
                                  f"{error} is missing") from None
