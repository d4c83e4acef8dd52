"""schemas/rows.py against what the project builds from it: the warehouse DDL
(schemas/sql/*.sql, created in SQLite through the Warehouse class) has exactly the declared
columns, types, nullability and keys, and the record types and codecs write the declared
fields; so the declarations and the rest cannot drift apart."""

from __future__ import annotations

import re

import pytest

from pipelines.codec import credit_messages
from pipelines.codec.dead_letters import dead_letter_json
from pipelines.settings.paths import PROJECT_ROOT
from pipelines.sources.ad_spend import SpendRecord
from pipelines.store.warehouse import Warehouse
from schemas import rows
from schemas.records import Credit, DeadLetter

SQL = PROJECT_ROOT / "schemas" / "sql"
# tables of the DDL no row declares: none (the reconciliation's are schemas/reconcile_rows.py's)
NOT_DECLARED: set[str] = set()


def sql_tables() -> dict[str, str]:
    """Every table the DDL files create -> the file."""
    return {table: path.name for path in sorted(SQL.glob("*.sql"))
            for table in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", path.read_text(), re.I)}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """(name, declared type, not null, primary key position) of each table's columns."""
    with Warehouse(f"sqlite:///{tmp_path_factory.mktemp('rows') / 'warehouse.db'}") as wh:
        for path in sorted(SQL.glob("*.sql")):
            wh.apply_ddl(path)
        yield {table: wh.query(f"PRAGMA table_info({table})") for table in sql_tables()}


def test_every_table_of_the_ddl_is_declared_once():
    declared = [row.table for row in rows.ROWS if row.table]
    assert len(declared) == len(set(declared))
    assert set(sql_tables()) - NOT_DECLARED == set(declared)


@pytest.mark.parametrize("row", [r for r in rows.ROWS if r.table], ids=lambda r: r.table)
def test_the_table_has_exactly_the_declared_columns(tables, row):
    info = tables[row.table]
    assert tuple(c[1] for c in info) == row.names
    for (_, name, sql_type, not_null, _, pk), column in zip(info, row.columns, strict=True):
        assert sql_type.upper() in rows.SQL_TYPES[column.type], (name, sql_type, column.type)
        assert bool(not_null) != column.nullable, name
        # SQLite numbers primary key columns from 1, in key order
        assert pk == (row.key.index(name) + 1 if name in row.key else 0), name


def test_records_and_codecs_write_the_declared_fields():
    assert Credit._fields == rows.CREDIT.names == credit_messages.FIELDS
    assert SpendRecord._fields == rows.AD_SPEND.names
    message = dead_letter_json(DeadLetter("bad", "detail", b"x"), "spans", 0, 7)
    assert tuple(re.findall(r'"(\w+)":', message)) == rows.DEAD_LETTER.names


def test_derived_layouts():
    assert rows.BACKFILL_CREDIT.spark_ddl().startswith("model string, order_id string, ")
    assert rows.BACKFILL_CREDIT.spark_types()["day"] == "string"  # a date is YYYY-MM-DD text
    assert rows.CONVERSION.spark_types()["trace_ids"] == "array<string>"
    assert rows.GPU_IDLE_COST.pandas_dtypes() == {
        "gpu_uuid": "object", "interval_end_ms": "int64", "interval_start_ms": "int64",
        "model": "object", "idle_seconds": "float64", "cost_usd": "float64",
        "interval_cost_usd": "float64", "price_known": "bool"}
    unallocated = rows.ROI_UNALLOCATED.select("model", "cost_kind", "key", "amount") \
        .renamed(cost_kind="kind")
    assert unallocated.names == ("model", "kind", "key", "amount") and not unallocated.table
    assert rows.ROI_DAILY.without("day", "currency").key == ()
    with pytest.raises(ValueError, match="leading"):
        rows.Row("t", "", (rows.Column("a", "string"), rows.Column("b", "string")),
                 key=("b",), table="t")


def test_a_table_message_takes_the_row_declaration_for_its_fields():
    from pipelines.codec import table_messages
    row = ("o-1", "u-1", 5, 9.5, "EUR", "new", 2, ["t-1", "t-2"])
    by_row = table_messages.encode(rows.CONVERSION, [row])
    assert by_row == table_messages.encode(rows.CONVERSION.names, [row])
    assert table_messages.decode(by_row) == [dict(zip(rows.CONVERSION.names, row, strict=True))]
