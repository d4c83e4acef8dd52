"""How an orders table's rows are read: which column holds the order id, the user, the
amount, the currency, the status and the time, how amounts are scaled, and which
statuses withdraw an order (refunded, cancelled). A small YAML file a shop writes once
for its own table (jobs/config/order_changes.yaml is an example)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from udfs.config_files import read_config_text

FORMATS = ("debezium", "json")
REQUIRED = ("order_id", "user_id", "revenue")
OPTIONAL = ("currency", "status", "ts", "refunded")
KEYS = ("format", "table", "columns", "revenue_scale", "default_currency",
        "refund_statuses")


class OrderMappingError(ValueError):
    """A mapping file that cannot be used: names the file, line and field."""


@dataclass(frozen=True)
class OrderMapping:
    """What the columns of an orders table mean. `columns` maps each of REQUIRED (and
    any of OPTIONAL) to the table's column name."""

    format: str = "debezium"
    table: str = ""  # "schema.table" or "table": only change events of it ("": any)
    columns: tuple[tuple[str, str], ...] = (("order_id", "id"), ("user_id", "user_id"),
                                             ("revenue", "amount"))
    revenue_scale: float = 1.0  # amount column x scale = revenue (0.01: cents)
    default_currency: str = "USD"
    refund_statuses: tuple[str, ...] = ("refunded", "cancelled", "canceled")
    origin: str = "<mapping>"

    def column(self, field: str) -> str:
        """The table's column for a field ("" where the mapping names none)."""
        return dict(self.columns).get(field, "")


def load_order_mapping(path: Path) -> OrderMapping:
    """The mapping of a file, or an OrderMappingError naming the file, line and field."""
    text = read_config_text(path, OrderMappingError, "order mapping")
    return parse_order_mapping(text, str(path))


def parse_order_mapping(text: str, origin: str = "<mapping>") -> OrderMapping:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as error:
        raise OrderMappingError(f"{origin}: not valid YAML: {error}") from None
    if not isinstance(root, yaml.MappingNode):
        raise OrderMappingError(f"{origin}: the top level must be a mapping with `columns`")
    fields: dict[str, tuple[Any, int]] = {}
    for key_node, value_node in root.value:
        key = key_node.value
        if key not in KEYS:
            raise OrderMappingError(f"{origin}, line {key_node.start_mark.line + 1}: "
                                    f"unknown key {key!r} (known: {', '.join(KEYS)})")
        fields[key] = (value_node, key_node.start_mark.line + 1)
    plain = yaml.safe_load(text)

    def where(key: str) -> str:
        return f"{origin}, line {fields[key][1]}, `{key}`" if key in fields else \
            f"{origin}, `{key}`"

    mapping: dict[str, Any] = {"origin": origin}
    if "format" in fields:
        if plain["format"] not in FORMATS:
            raise OrderMappingError(f"{where('format')}: {plain['format']!r} is not one of "
                                    f"{', '.join(FORMATS)}")
        mapping["format"] = plain["format"]
    if "table" in fields:
        mapping["table"] = _text(plain["table"], where("table"))
    if "columns" not in fields:
        raise OrderMappingError(f"{origin}: `columns` is missing (it names the columns "
                                f"of {', '.join(REQUIRED)})")
    columns = plain["columns"]
    if not isinstance(columns, dict):
        raise OrderMappingError(f"{where('columns')}: must be a mapping of field: column")
    lines = {node.value: node.start_mark.line + 1 for node, _ in fields["columns"][0].value}
    for field, column in columns.items():
        if field not in REQUIRED + OPTIONAL:
            raise OrderMappingError(
                f"{origin}, line {lines[field]}, `columns.{field}`: not a field (known: "
                f"{', '.join(REQUIRED + OPTIONAL)})")
        _text(column, f"{origin}, line {lines[field]}, `columns.{field}`")
    missing = [field for field in REQUIRED if field not in columns]
    if missing:
        raise OrderMappingError(f"{where('columns')}: names no column for "
                                f"{', '.join(missing)}")
    mapping["columns"] = tuple((field, str(column)) for field, column in columns.items())
    if "revenue_scale" in fields:
        scale = plain["revenue_scale"]
        if isinstance(scale, bool) or not isinstance(scale, int | float) or scale <= 0:
            raise OrderMappingError(f"{where('revenue_scale')}: must be a positive number "
                                    f"(0.01 for amounts in cents), not {scale!r}")
        mapping["revenue_scale"] = float(scale)
    if "default_currency" in fields:
        currency = _text(plain["default_currency"], where("default_currency"))
        if len(currency) != 3 or not currency.isalpha():
            raise OrderMappingError(f"{where('default_currency')}: must be a three-letter "
                                    f"ISO 4217 code, not {currency!r}")
        mapping["default_currency"] = currency.upper()
    if "refund_statuses" in fields:
        statuses = plain["refund_statuses"]
        if not isinstance(statuses, list) or not all(isinstance(s, str) and s
                                                     for s in statuses):
            raise OrderMappingError(f"{where('refund_statuses')}: must be a list of "
                                    "status values")
        mapping["refund_statuses"] = tuple(status.lower() for status in statuses)
    return OrderMapping(**mapping)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise OrderMappingError(f"{where}: must be a non-empty text, not {value!r}")
    return value.strip()
