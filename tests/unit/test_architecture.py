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


def sql_writes(tree: ast.AST) -> Iterator[str]:
    """Where a module's string literals (f-strings' literal parts joined) write SQL."""
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}
    for node in ast.walk(tree):
        if id(node) in parts:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if SQL_WRITE.search(text):
            yield f"{node.lineno}: {text[:60]!r}"


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


if __name__ == "__main__":
    for label, only in (("module level", True), ("with imports inside functions", False)):
        found = cycles(import_graph(top_level_only=only))
        print(f"import cycles, {label}: {len(found) or 'none'}")
        for component in found:
            print("  " + " <-> ".join(component))
