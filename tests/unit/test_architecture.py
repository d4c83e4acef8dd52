"""The architecture, checked from the source with `ast` (nothing is imported):

- no import cycles among the project's modules, through any import (module level, inside
  a function or under `if TYPE_CHECKING:`);
- udfs/ and schemas/, the engine-free code, import no engine or client package and nothing
  of pipelines/ or jobs/;
- pipelines/ never imports jobs/, schemas/ never imports udfs/ (not even in a function);
- no module of those packages or of bench/ is over MAX_LINES lines;
- the streaming jobs are named in one registry, pipelines/flink/jobs.py: no other module
  spells out their Flink job names, lists their names or tests a job against a name;
- DAY_MS is defined in udfs/periods.py alone: every other module (bench/ and tests/ too)
  imports it;
- no module of tests/ imports a test module (tests/**/test_*.py): shared helpers live in
  helper modules of tests/ or a conftest.py;
- no SQL that writes (INSERT, UPDATE, DELETE, ON CONFLICT, CREATE in string literals)
  outside pipelines/store/ and pipelines/reconcile/store.py (tests/ not checked).

`python tests/unit/test_architecture.py` prints the cycles, at module level and through
any import.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.module_graph import (
    PACKAGES,
    ROOT,
    all_imports,
    cycles,
    import_graph,
    imports_in,
    module_files,
    python_files,
)

ENGINE_FREE = ("udfs", "schemas")
ENGINES = ("pyflink", "pyspark", "apache_beam", "kafka", "confluent_kafka", "psycopg")
MAX_LINES = 400
# bench/ is no package (its scripts are run, not imported), but its modules are held to the
# limit too
SIZE_CHECKED = (*PACKAGES, "bench")

# TEMPORARY: the modules over MAX_LINES when this test was written, being split by their
# own changes; whoever splits one removes its entry here. Nothing new goes on this list.
OVER_MAX_LINES: set[str] = set()


def test_no_import_cycles() -> None:
    # an import inside a function or under TYPE_CHECKING closes a circle too: the modules
    # still depend on each other, whatever the order Python happens to load them in
    assert cycles(import_graph(top_level_only=False)) == []


def test_cycles_are_found_however_long():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_engine_free_code_imports_no_engine_and_no_pipeline() -> None:
    wrong = [f"{imp.source}:{imp.line} imports {imp.target}" for imp in all_imports()
             if imp.source.split(".")[0] in ENGINE_FREE
             and imp.target.split(".")[0] in (*ENGINES, "pipelines", "jobs")]
    assert wrong == []


def test_no_module_over_max_lines() -> None:
    sizes = {name: len(path.read_text().splitlines())
             for name, path in python_files(SIZE_CHECKED).items()}
    too_long = {name: n for name, n in sizes.items()
                if n > MAX_LINES and name not in OVER_MAX_LINES}
    assert too_long == {}, f"split these modules (at most {MAX_LINES} lines each)"


JOB_REGISTRY = "pipelines/flink/jobs.py"
# constants equal to a job's Flink name that are not one
NOT_JOB_NAMES = {
    # input.group_id's default, the attribution job's consumer group (named like the job,
    # but a Kafka identity with committed offsets: renaming the job must not move them; and
    # the registry imports the job config, so the config importing the registry would close
    # a circle)
    ("pipelines/settings/job_config.py", "seedance-attribution"),
    # flink_configuration's default (the registry's run imports pipelines.flink.runtime.kafka);
    # tests/unit/test_streaming_jobs.py keeps it the registry's
    ("pipelines/flink/runtime/kafka.py", "seedance-attribution"),
}
# a collection naming this many jobs lists them (fewer may be dashboard pages or metrics:
# "roi", "experiments" and "ltv" are those too)
LISTS_JOBS = 4


def registered_jobs() -> dict[str, str]:
    """{job name: Flink job name} of the registry's StreamingJob(name, title, flink_name,
    ...) calls, read from its source."""
    tree = ast.parse((ROOT / JOB_REGISTRY).read_text())
    return {call.args[0].value: call.args[2].value for call in ast.walk(tree)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "StreamingJob"}


def job_name_uses(tree: ast.AST, names: set[str], flink_names: set[str]) -> Iterator[str]:
    """Where a module spells out a job's Flink name, lists LISTS_JOBS job names or more (a
    collection, dict keys) or compares something's `job` with a job name."""
    def is_name(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in flink_names:
            yield f"{node.lineno}: {node.value!r}"
        elements = node.elts if isinstance(node, ast.List | ast.Tuple | ast.Set) \
            else node.keys if isinstance(node, ast.Dict) else []
        if sum(map(is_name, elements)) >= LISTS_JOBS:
            yield f"{node.lineno}: lists {ast.unparse(node)[:60]}"
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(is_name, operands)) and any(
                    isinstance(o, ast.Attribute) and o.attr == "job" for o in operands):
                yield f"{node.lineno}: {ast.unparse(node)}"


def test_streaming_jobs_are_named_in_the_registry_only() -> None:
    jobs = registered_jobs()
    assert {"attribution", "gpu-cost", "roi", "experiments"} <= set(jobs)
    found = []
    for path in module_files().values():
        name = str(path.relative_to(ROOT))
        if name == JOB_REGISTRY:
            continue
        tree = ast.parse(path.read_text(), name)
        found += [f"{name}:{use}" for use in job_name_uses(
            tree, set(jobs), set(jobs.values()) - {v for f, v in NOT_JOB_NAMES if f == name})]
    assert found == [], f"name jobs through {JOB_REGISTRY}"


def test_the_job_name_check_finds_what_it_is_for() -> None:
    tree = ast.parse('JOBS = ["attribution", "roi", "gpu-cost", "ltv"]\n'
                     'if args.job == "roi": pass\nrun(job_name="seedance-roi")\n'
                     'pages = {"roi": 1, "gpu-cost": 2, "ltv": 3}\n')
    names, flink_names = {"attribution", "gpu-cost", "roi", "ltv"}, {"seedance-roi"}
    assert [use.split(":")[0] for use in job_name_uses(tree, names, flink_names)] == \
        ["1", "2", "3"]


def test_the_graph_sees_imports_inside_functions() -> None:
    # jobs.cli imports its commands' heavy dependencies when a command runs
    everything = import_graph(top_level_only=False)
    assert import_graph()["jobs.cli"] <= everything["jobs.cli"]
    assert any(not imp.top_level for imp in all_imports())


def test_the_graph_sees_imports_under_type_checking(tmp_path) -> None:
    source = tmp_path / "a.py"
    source.write_text("from typing import TYPE_CHECKING\n\nimport c\n\nif TYPE_CHECKING:\n"
                      "    from b import B\n")
    found = {imp.target: imp.top_level for imp in imports_in("a", source, {"a", "b", "c"})}
    assert (found["b"], found["c"]) == (False, True)


# --- one home for small shared definitions, layers, tests -------------------------------

DAY_MS_HOME = "udfs/periods.py"
# modules that may define DAY_MS besides its home: none
DAY_MS_ELSEWHERE: set[str] = set()
# (importer, imported): top-level packages one must never import, even inside a function
FORBIDDEN_IMPORTS = {("pipelines", "jobs"), ("schemas", "udfs")}


def definitions_of(tree: ast.AST, name: str) -> Iterator[int]:
    """The lines where `name` is bound by an assignment (at any depth: `X = `, `X: int = `,
    `a, X = `)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for target in targets for n in ast.walk(target)):
            yield node.lineno


def test_day_ms_is_defined_in_udfs_periods_only() -> None:
    files = python_files((*SIZE_CHECKED, "tests"))
    found = [f"{name}:{line}" for name, path in files.items()
             if name != DAY_MS_HOME and name not in DAY_MS_ELSEWHERE
             for line in definitions_of(ast.parse(path.read_text(), name), "DAY_MS")]
    assert found == [], f"import DAY_MS from {DAY_MS_HOME}"
    assert list(definitions_of(ast.parse(files[DAY_MS_HOME].read_text()), "DAY_MS"))


def test_the_definition_check_finds_what_it_is_for() -> None:
    tree = ast.parse("DAY_MS = 1\nA, DAY_MS = 1, 2\nclass C:\n    DAY_MS: int = 3\n"
                     "from udfs.periods import DAY_MS\nx = DAY_MS\nd[DAY_MS] = 4\n")
    assert list(definitions_of(tree, "DAY_MS")) == [1, 2, 4]


def test_layers_import_downwards_only() -> None:
    wrong = [f"{imp.source}:{imp.line} imports {imp.target}" for imp in all_imports()
             if (imp.source.split(".")[0], imp.target.split(".")[0]) in FORBIDDEN_IMPORTS]
    assert wrong == []


def imported_test_modules(tree: ast.AST, module: str) -> Iterator[str]:
    """The project's test modules (tests/**/test_*.py) that module `module` (dotted) of
    tests/ imports, or whose names it imports."""
    def is_test(name: str) -> bool:
        return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (f"{node.lineno}: {a.name}" for a in node.names if is_test(a.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[:-node.level]
                base = ".".join(anchor + ([base] if base else []))
            if is_test(base):
                yield f"{node.lineno}: {base}"
            else:
                yield from (f"{node.lineno}: {base}.{a.name}" for a in node.names
                            if is_test(f"{base}.{a.name}"))


def test_no_test_module_imports_another() -> None:
    found = []
    for name, path in python_files(("tests",)).items():
        module = ".".join(Path(name).with_suffix("").parts)
        found += [f"{name}:{use}" for use in imported_test_modules(
            ast.parse(path.read_text(), name), module)]
    assert found == [], "share helpers through tests/*.py helper modules or a conftest.py"


def test_the_test_import_check_finds_what_it_is_for() -> None:
    tree = ast.parse("import tests.unit.test_a\nfrom tests.unit.test_b import x\n"
                     "from tests.unit import test_c\nfrom .test_d import y\n"
                     "from tests.spans import make_spans\nfrom . import conftest\n"
                     "from apache_beam.testing.test_pipeline import TestPipeline\n")
    found = [use.split(":")[0] for use in imported_test_modules(tree, "tests.unit.test_e")]
    assert found == ["1", "2", "3", "4"]


# The warehouse is written through pipelines/store/ (and the reconciliation's own tables
# through pipelines/reconcile/store.py): no SQL that writes anywhere else
SQL_WRITERS = ("pipelines/store/", "pipelines/reconcile/store.py")
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|ON\s+CONFLICT|"
                       r"CREATE\s+(TEMP\w*\s+|UNIQUE\s+)?(TABLE|INDEX|VIEW))\b", re.I)


def string_literals(tree: ast.AST, between: str = "") -> Iterator[tuple[int, str]]:
    """A module's string literals with their lines, an f-string as its literal parts joined
    by `between` (what stood for the values)."""
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}
    for node in ast.walk(tree):
        if id(node) in parts:
            continue
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, between.join(
                v.value for v in node.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def sql_writes(tree: ast.AST) -> Iterator[str]:
    """Where a module's string literals (f-strings' literal parts joined) write SQL."""
    for line, text in string_literals(tree):
        if SQL_WRITE.search(text):
            yield f"{line}: {text[:60]!r}"


def test_sql_writes_only_in_the_store() -> None:
    found = [f"{name}:{use}" for name, path in python_files(SIZE_CHECKED).items()
             if not name.startswith(SQL_WRITERS)
             for use in sql_writes(ast.parse(path.read_text(), name))]
    assert found == [], "write the warehouse through pipelines/store/ (schemas/rows.py rows)"


def test_the_sql_write_check_finds_what_it_is_for() -> None:
    tree = ast.parse("a = 'INSERT INTO t VALUES (?)'\nb = f'DELETE FROM {t} WHERE x = ?'\n"
                     "c = 'update t set x = 1'\nd = 'CREATE TABLE IF NOT EXISTS t (x INT)'\n"
                     "e = f'INSERT INTO {t} VALUES (?) ' f'ON CONFLICT ({k}) DO NOTHING'\n"
                     "f = 'SELECT x FROM t WHERE updated = 1'\ng = 'the deleted rows'\n")
    assert [use.split(":")[0] for use in sql_writes(tree)] == ["1", "2", "3", "4", "5"]


# --- the warehouse's edges: who reads SQL, who writes each table, what the loader loads --

# SQL that reads (SELECT ... FROM, COPY) is in the store, the reconciliation's store and the
# dashboard's query modules (its views as SQL, and the filters and paging they are built
# with); the dashboard's pages, charts, server and app read through those
SQL_READERS = ("pipelines/store/", "pipelines/reconcile/store.py",
               "pipelines/dashboard/queries.py", "pipelines/dashboard/filters.py",
               "pipelines/dashboard/paging.py")
SQL_READER_SUFFIX = "_views.py"  # pipelines/dashboard/*_views.py: a page's queries
# (module, why) reading SQL that is not the warehouse's
SQL_READS_ELSEWHERE = {
    ("pipelines/stack/postgres.py", "the local PostgreSQL server's catalog (pg_database)"),
    ("bench/backfill.py", "the totals of a bench run's own scratch SQLite file"),
}
SQL_READ = re.compile(r"\bSELECT\s.*?\bFROM\b|\bCOPY\s+\w+\s+(FROM|TO)\b", re.S)


def sql_reads(tree: ast.AST) -> Iterator[str]:
    """Where a module's string literals (f-strings' literal parts joined) read SQL (SELECT
    ... FROM in capitals, as the project writes SQL, or COPY)."""
    for line, text in string_literals(tree, "{}"):
        if SQL_READ.search(text):
            yield f"{line}: {text[:60]!r}"


def test_sql_reads_only_in_the_store_and_the_dashboard_queries() -> None:
    allowed = {name for name, _ in SQL_READS_ELSEWHERE}
    found = [f"{name}:{use}" for name, path in python_files(SIZE_CHECKED).items()
             if not name.startswith(SQL_READERS) and name not in allowed
             and not (name.startswith("pipelines/dashboard/")
                      and name.endswith(SQL_READER_SUFFIX))
             for use in sql_reads(ast.parse(path.read_text(), name))]
    assert found == [], "read the warehouse through a function of pipelines/store/"


def test_the_sql_read_check_finds_what_it_is_for() -> None:
    tree = ast.parse("a = 'SELECT x FROM t'\nb = f'SELECT {c} FROM {t} WHERE x = ?'\n"
                     "c = ('SELECT COUNT(*) '\n     'FROM t')\nd = 'COPY t FROM STDIN'\n"
                     "e = 'select the rows from the file'\nf = 'SELECT 1'\n")
    assert [use.split(":")[0] for use in sql_reads(tree)] == ["1", "2", "3", "5"]


# every table of schemas/sql/*.sql -> the one module that writes it (others go through it)
TABLE_WRITERS = {
    **dict.fromkeys(
        ("attribution_credits", "conversions", "gpu_call_costs", "gpu_idle_costs", "ad_spend",
         "roi_daily",
         "roi_unallocated", "roi_days_closed", "order_costs", "order_segments",
         "experiment_exposures", "experiment_conversions",
         # the stream's scores upserted by user, a refresh's replacing the table
         "customer_ltv"),
        "pipelines/store/sinks.py"),  # the loader's sinks; the backfill's days through them
    "kafka_offsets": "pipelines/store/loading.py",
    "load_rejects": "pipelines/store/loading.py",
    "backfill_runs": "pipelines/store/backfill.py",
    "experiment_results": "pipelines/store/experiments.py",
    "credit_intervals": "pipelines/store/intervals.py",
    "ltv_return": "pipelines/store/ltv.py",
    "ltv_calibration": "pipelines/store/ltv.py",
    **dict.fromkeys(("lift_tests", "calibration_factors", "roi_calibrated"),
                    "pipelines/store/incrementality.py"),
    **dict.fromkeys(("control_decisions", "control_actions", "control_verifications"),
                    "pipelines/control/ledger.py"),
    **dict.fromkeys(("billing_ad_rows", "billing_cloud_costs", "reconciliation_daily",
                     "alerts", "reconciliation_runs"), "pipelines/reconcile/store.py"),
}
# what writes a table given its declaration (schemas/*rows.py): a class made for it (a
# sink), or a Warehouse write (on a receiver named like a warehouse) given it
WAREHOUSE_WRITES = {"store", "insert", "claim", "delete", "upsert"}
SQL_WRITE_TABLE = re.compile(r"\b(?:INSERT\s+INTO|DELETE\s+FROM|UPDATE(?=\s+\w+\s+SET\b))\s+(\w+)",
                             re.I)


def ddl_tables() -> set[str]:
    return {table for path in sorted((ROOT / "schemas" / "sql").glob("*.sql"))
            for table in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", path.read_text(),
                                    re.I)}


def declared_tables() -> dict[str, str]:
    """{declaration's name: its table} of the Row declarations in schemas/ (`X = Row(...,
    table="t")` or `X = Y.derive(..., table="t")`)."""
    found = {}
    for path in sorted((ROOT / "schemas").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for keyword in node.value.keywords:
                    if keyword.arg == "table" and isinstance(keyword.value, ast.Constant):
                        found.update({t.id: keyword.value.value for t in node.targets
                                      if isinstance(t, ast.Name)})
    return found


def table_writes(tree: ast.AST, declared: dict[str, str]) -> Iterator[str]:
    """The tables a module writes: by SQL naming them (an f-string's `{X.table}` read as X's
    table) or by handing their declaration to a sink or a Warehouse write."""
    def declaration(node: ast.AST) -> str | None:
        name = node.attr if isinstance(node, ast.Attribute) else \
            node.id if isinstance(node, ast.Name) else None
        return declared.get(name) if name else None

    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                v.value if isinstance(v, ast.Constant) else
                (declaration(v.value.value) or "{}") if isinstance(v, ast.FormattedValue)
                and isinstance(v.value, ast.Attribute) and v.value.attr == "table" else "{}"
                for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in parts:
            text = node.value
        if text:
            yield from SQL_WRITE_TABLE.findall(text)
        if isinstance(node, ast.Call):
            func = node.func
            # a class made for the table (a sink: TableSink(warehouse, rows.X), ...)
            writes = (isinstance(func, ast.Name) and func.id[:1].isupper()) or (
                isinstance(func, ast.Attribute) and func.attr in WAREHOUSE_WRITES
                and ast.unparse(func.value).split(".")[-1] in ("warehouse", "wh"))
            if writes:
                yield from (t for t in map(declaration, node.args) if t)


def test_every_table_has_one_writer() -> None:
    tables = ddl_tables()
    assert set(TABLE_WRITERS) == tables, "name the one writer of each table in TABLE_WRITERS"
    declared = declared_tables()
    writers: dict[str, set[str]] = {table: set() for table in tables}
    for name, path in python_files(("jobs", "pipelines")).items():
        for table in table_writes(ast.parse(path.read_text(), name), declared):
            writers.setdefault(table, set()).add(name)
    extra = {table: sorted(found - {TABLE_WRITERS.get(table)})
             for table, found in writers.items() if found - {TABLE_WRITERS.get(table)}}
    assert extra == {}, "write a table through its one writer (TABLE_WRITERS)"
    by_name = {v: k for k, v in declared.items()}
    silent = [table for table, owner in TABLE_WRITERS.items()
              if table not in (ROOT / owner).read_text()
              and by_name.get(table, table) not in (ROOT / owner).read_text()]
    assert silent == []


def test_the_table_write_check_finds_what_it_is_for() -> None:
    tree = ast.parse("a = 'INSERT INTO t1 VALUES (?)'\nb = f'DELETE FROM {T2.table} WHERE x'\n"
                     "ReplacedTable(warehouse, rows.T3)\nself.warehouse.store(T4, [])\n"
                     "ledger.claim(T5, row)\nc = f'UPDATE {self.row.table} SET x = 1'\n"
                     "d = 'SELECT x FROM t6'\ne = 'ON CONFLICT (k) DO UPDATE SET x = 1'\n")
    declared = {f"T{i}": f"t{i}" for i in range(2, 6)}
    assert sorted(table_writes(tree, declared)) == ["t1", "t2", "t3", "t4"]


def registry_loads() -> tuple[dict[str, tuple[str, tuple[str, ...]]], set[str], set[str]]:
    """From the registry's source: {topic: (sink, tables)} of LOADS, NOT_LOADED, and the
    topics the jobs write (config attributes)."""
    tree = ast.parse((ROOT / JOB_REGISTRY).read_text())
    loads, not_loaded, written = {}, set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "Load":
                topic, sink, tables = (ast.literal_eval(a) for a in node.args[:3])
                loads[topic] = (sink, tables)
            elif node.func.id == "StreamingJob":
                written |= {t for k in node.keywords if k.arg == "writes"
                            for t in ast.literal_eval(k.value)}
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "NOT_LOADED" for t in node.targets):
            not_loaded = set(ast.literal_eval(node.value))
    return loads, not_loaded, written


def sink_tables(declared: dict[str, str]) -> dict[str, set[str]]:
    """{sink class of pipelines/store/sinks.py: the tables of the declarations it names}."""
    tree = ast.parse((ROOT / "pipelines/store/sinks.py").read_text())
    return {node.name: {declared[n.attr] for n in ast.walk(node)
                        if isinstance(n, ast.Attribute) and n.attr in declared}
            for node in tree.body if isinstance(node, ast.ClassDef)}


def test_the_loader_map_covers_every_topic_jobs_write_to_tables() -> None:
    loads, not_loaded, written = registry_loads()
    assert written - not_loaded <= set(loads), "a written topic needs its Load (or NOT_LOADED)"
    assert not set(loads) & not_loaded
    assert not_loaded <= written
    sinks = sink_tables(declared_tables())
    tables = ddl_tables()
    for topic, (sink, loaded) in loads.items():
        assert set(loaded) <= tables, topic
        assert sink in sinks and sinks[sink] == set(loaded), (topic, sink, sinks.get(sink))


def test_commands_do_not_import_the_demo() -> None:
    wrong = [f"{imp.source}:{imp.line} imports {imp.target}" for imp in all_imports()
             if imp.source.startswith("jobs.commands")
             and (imp.target == "jobs.demo" or imp.target.startswith("jobs.demo."))]
    assert wrong == [], "a command the demo needs lives in jobs/commands/ or pipelines/"


if __name__ == "__main__":
    for label, only in (("module level", True), ("with imports inside functions", False)):
        found = cycles(import_graph(top_level_only=only))
        print(f"import cycles, {label}: {len(found) or 'none'}")
        for component in found:
            print("  " + " <-> ".join(component))
