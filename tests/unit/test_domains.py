"""The layout's rules, checked from the source with `ast` (nothing is imported):

- udfs/ is one package per domain, and the domains depend on each other only as DEPENDS
  declares (a DAG: attribution -> journeys, roi -> ltv, the rest on none); the shared
  vocabulary on top of udfs/ (periods, lifecycle, ratios) imports no domain, and only
  udfs/settings.py, which composes the domains' settings, imports several;
- from outside a domain (bench/ included), a domain is imported through its face (its
  __init__): never `udfs.<domain>.<module>`; tests/ may reach inside (a unit test tests a
  module);
- udfs/ holds no module of its own but the shared ones (no `ltv_*.py` beside `ltv/`);
- no package cycles under pipelines/ (a package: pipelines/<x>/, and each job's package
  pipelines/flink/<job>/), through any import;
- at most MAX_MODULES modules in a folder of udfs/, pipelines/ or jobs/;
- Kafka consumers are made in pipelines/kafka/ only;
- no module imports a path that only exists for old pickles (udfs.pickle_paths.MOVED).

Each rule is also run on a small tree of its own with a deliberate violation, which it
must report. docs/architecture.md says where a new job, table or model goes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.module_graph import (
    PACKAGES,
    ROOT,
    Import,
    all_imports,
    cycles,
    imports_in,
    module_files,
    python_files,
)

DEPENDS: dict[str, set[str]] = {
    "journeys": set(),
    "attribution": {"journeys"},
    "ltv": set(),
    "roi": {"ltv"},
    "experiments": set(),
    "control": set(),
    "reconcile": set(),
    "traffic": set(),
    "orders": set(),
    "incrementality": {"journeys"},
}
# udfs/'s own modules: the vocabulary every domain may use, the composer of the domains'
# settings, and the module that keeps old pickles' paths importable
SHARED = {"periods", "lifecycle", "ratios", "config_files"}
COMPOSER = "settings"
TOP_LEVEL = {"__init__", COMPOSER, "pickle_paths", *SHARED}
MAX_MODULES = 15
COUNTED_FOLDERS = ("udfs", "pipelines", "jobs")
CONSUMERS = {("kafka", "KafkaConsumer"), ("confluent_kafka", "Consumer"),
             ("confluent_kafka", "DeserializingConsumer"), ("aiokafka", "AIOKafkaConsumer")}
KAFKA_HOME = "pipelines/kafka/"


def domain_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "udfs" and parts[1] in DEPENDS else None


def domain_breaches(imports: Iterable[Import]) -> list[str]:
    """Imports that break the declared domain graph."""
    out = []
    for imp in imports:
        source, target = domain_of(imp.source), domain_of(imp.target)
        where = f"{imp.source}:{imp.line} imports {imp.target}"
        if source and target and source != target and target not in DEPENDS[source]:
            out.append(f"{where}: {source} may depend on {sorted(DEPENDS[source]) or 'none'}")
        elif source and imp.target == f"udfs.{COMPOSER}":
            out.append(f"{where}: a domain never imports the composer")
        elif imp.source in {f"udfs.{name}" for name in SHARED} and target:
            out.append(f"{where}: the shared vocabulary imports no domain")
    return out


def face_breaches(imports: Iterable[Import]) -> list[str]:
    """Imports of a domain's inside from outside the domain (tests/ excepted)."""
    return [f"{imp.source}:{imp.line} imports {imp.target}: import `udfs.{target}` instead"
            for imp in imports
            if (target := domain_of(imp.target)) and imp.target != f"udfs.{target}"
            and domain_of(imp.source) != target and not imp.source.startswith("tests.")]


def imports_with_bench(root: Path) -> list[Import]:
    """Every import of the packages, and of bench/'s scripts (no package: named bench.x)."""
    known = set(module_files(root))
    return all_imports(root) + [imp for path in sorted((root / "bench").glob("*.py"))
                                for imp in imports_in(f"bench.{path.stem}", path, known)]


def stray_udfs_modules(root: Path) -> list[str]:
    """Modules on top of udfs/ that are not its own, and folders that are no domain."""
    udfs = root / "udfs"
    modules = [path.name for path in udfs.glob("*.py") if path.stem not in TOP_LEVEL]
    folders = [f"{path.name}/" for path in udfs.iterdir()
               if path.is_dir() and path.name not in DEPENDS and path.name != "__pycache__"]
    return sorted(modules + folders)


def package_of(module: str) -> str | None:
    """The package a pipelines/ module belongs to, each job's package a package of its own
    (modules directly in pipelines/ or pipelines/flink/ belong to that folder)."""
    parts = module.split(".")
    if parts[0] != "pipelines":
        return None
    if len(parts) > 3 and parts[1] == "flink":
        return ".".join(parts[:3])
    if len(parts) > 2:
        return ".".join(parts[:2])
    return "pipelines"


def package_graph(imports: Iterable[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in imports:
        source, target = package_of(imp.source), package_of(imp.target)
        if source and target and source != target:
            graph.setdefault(source, set()).add(target)
    return graph


def crowded_folders(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in python_files(COUNTED_FOLDERS, root):
        if not name.endswith("__init__.py"):
            folder = str(Path(name).parent)
            counts[folder] = counts.get(folder, 0) + 1
    return {folder: n for folder, n in sorted(counts.items()) if n > MAX_MODULES}


def imported_names(path: Path) -> Iterator[tuple[str, str, int]]:
    """(module, name, line) of every `from module import name`, and (module, "", line) of
    every `import module`, anywhere in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                yield node.module, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno


def consumers_outside_kafka(root: Path) -> list[str]:
    return [f"{name}:{line} makes a {module}.{what}"
            for name, path in python_files(PACKAGES, root).items()
            if not name.startswith(KAFKA_HOME)
            for module, what, line in imported_names(path) if (module, what) in CONSUMERS]


def old_path_imports(root: Path, moved: Iterable[str]) -> list[str]:
    old = set(moved)
    return sorted(f"{name}:{line} imports {module if module in old else f'{module}.{what}'}"
                  for name, path in python_files((*PACKAGES, "bench", "tests"), root).items()
                  for module, what, line in imported_names(path)
                  if module in old or f"{module}.{what}" in old)


def moved_paths() -> list[str]:
    """udfs.pickle_paths.MOVED's keys, read from its source."""
    tree = ast.parse((ROOT / "udfs" / "pickle_paths.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MOVED":
            return list(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise AssertionError("udfs/pickle_paths.py declares no MOVED")


# --- the rules on the project ---------------------------------------------------------

def test_the_declared_domain_graph_is_a_dag() -> None:
    assert cycles(DEPENDS) == []
    assert all(needed <= set(DEPENDS) for needed in DEPENDS.values())


def test_udfs_is_one_package_per_domain_with_the_shared_modules_on_top() -> None:
    assert stray_udfs_modules(ROOT) == []
    assert {path.name for path in (ROOT / "udfs").iterdir() if path.is_dir()} - \
        {"__pycache__"} == set(DEPENDS)
    for domain in DEPENDS:
        face = ast.parse((ROOT / "udfs" / domain / "__init__.py").read_text())
        assert ast.get_docstring(face), f"udfs/{domain}/__init__.py says what the domain is"
        assert any(isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
                   for node in face.body), f"udfs/{domain}/__init__.py declares __all__"


def test_domains_depend_on_each_other_only_as_declared() -> None:
    assert domain_breaches(all_imports()) == []


def test_a_domain_is_imported_through_its_face() -> None:
    assert face_breaches(imports_with_bench(ROOT)) == []


def test_no_package_cycles_under_pipelines() -> None:
    assert cycles(package_graph(all_imports())) == []


def test_no_folder_holds_more_than_fifteen_modules() -> None:
    assert crowded_folders(ROOT) == {}


def test_kafka_consumers_are_made_in_pipelines_kafka_only() -> None:
    assert consumers_outside_kafka(ROOT) == []


def test_nothing_imports_a_path_kept_for_old_pickles() -> None:
    assert moved_paths(), "udfs.pickle_paths.MOVED is read"
    assert old_path_imports(ROOT, moved_paths()) == []


# --- each rule, shown failing on a tree of its own --------------------------------------

def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
    return root


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, str]:
    """A small, rule-abiding project: two domains, a face, a composer, a pipelines job."""
    return {
        "udfs/__init__.py": "",
        "udfs/periods.py": "DAY_MS = 1\n",
        "udfs/settings.py": "from udfs.journeys import A\nfrom udfs.attribution import B\n",
        "udfs/journeys/__init__.py": "from udfs.journeys.book import A\n__all__ = ['A']\n",
        "udfs/journeys/book.py": "from udfs.periods import DAY_MS\nA = DAY_MS\n",
        "udfs/attribution/__init__.py": "from udfs.attribution.models import B\n",
        "udfs/attribution/models.py": "from udfs.journeys import A\nB = A\n",
        "udfs/roi/__init__.py": "", "udfs/ltv/__init__.py": "",
        "pipelines/__init__.py": "",
        "pipelines/store/__init__.py": "",
        "pipelines/store/sinks.py": "from udfs.attribution import B\n",
        "pipelines/flink/__init__.py": "",
        "pipelines/flink/jobs.py": "",
        "pipelines/flink/roi/__init__.py": "",
        "pipelines/flink/roi/job.py": "from pipelines.flink.jobs import *\n"
                                      "from pipelines.store.sinks import B\n",
        "pipelines/kafka/__init__.py": "",
        "pipelines/kafka/reader.py": "from kafka import KafkaConsumer\n",
    }


def test_the_rules_pass_the_sample_tree(tmp_path: Path, tree: dict[str, str]) -> None:
    root = write_tree(tmp_path, tree)
    imports = all_imports(root)
    assert (domain_breaches(imports), face_breaches(imports)) == ([], [])
    assert cycles(package_graph(imports)) == []
    assert stray_udfs_modules(root) == [] and crowded_folders(root) == {}
    assert consumers_outside_kafka(root) == []


@pytest.mark.parametrize(("name", "text", "found"), [
    ("udfs/journeys/back.py", "from udfs.attribution import B\n", "journeys may depend on none"),
    ("udfs/roi/day.py", "def f():\n    from udfs.journeys import A\n", "roi may depend on ['ltv']"),
    ("udfs/journeys/knobs.py", "from udfs.settings import X\n", "never imports the composer"),
    ("udfs/periods.py", "from udfs.journeys import A\n", "imports no domain"),
])
def test_an_undeclared_domain_dependency_is_reported(
        tmp_path: Path, tree: dict[str, str], name: str, text: str, found: str) -> None:
    breaches = domain_breaches(all_imports(write_tree(tmp_path, {**tree, name: text})))
    assert len(breaches) == 1 and found in breaches[0], breaches


@pytest.mark.parametrize("text", ["from udfs.journeys.book import A\n",
                                  "from udfs.journeys import book\n",
                                  "import udfs.journeys.book\n"])
def test_reaching_inside_a_domain_from_outside_is_reported(
        tmp_path: Path, tree: dict[str, str], text: str) -> None:
    root = write_tree(tmp_path, {**tree, "pipelines/store/reads.py": text,
                                 "bench/book.py": text,
                                 "tests/__init__.py": "", "tests/test_book.py": text})
    breaches = face_breaches(imports_with_bench(root))
    assert sorted(b.split(":")[0] for b in breaches) == ["bench.book",
                                                         "pipelines.store.reads"], breaches


def test_a_package_cycle_under_pipelines_is_reported(tmp_path: Path, tree: dict[str, str]) -> None:
    root = write_tree(tmp_path, {**tree, "pipelines/store/loading.py":
                                 "def f():\n    from pipelines.flink.roi.job import g\n"})
    assert cycles(package_graph(all_imports(root))) == [["pipelines.flink.roi",
                                                          "pipelines.store"]]


def test_a_prefixed_module_on_top_of_udfs_is_reported(tmp_path: Path, tree: dict[str, str]) -> None:
    root = write_tree(tmp_path, {**tree, "udfs/ltv_segments.py": "", "udfs/misc/__init__.py": ""})
    assert stray_udfs_modules(root) == ["ltv_segments.py", "misc/"]


def test_a_crowded_folder_is_reported(tmp_path: Path, tree: dict[str, str]) -> None:
    many = {f"jobs/commands/c{i}.py": "" for i in range(MAX_MODULES + 1)}
    root = write_tree(tmp_path, {**tree, **many, "jobs/commands/__init__.py": ""})
    assert crowded_folders(root) == {"jobs/commands": MAX_MODULES + 1}


def test_a_consumer_outside_pipelines_kafka_is_reported(
        tmp_path: Path, tree: dict[str, str]) -> None:
    root = write_tree(tmp_path, {**tree, "pipelines/flink/roi/offsets.py":
                                 "def f():\n    from confluent_kafka import Consumer\n"})
    assert consumers_outside_kafka(root) == [
        "pipelines/flink/roi/offsets.py:2 makes a confluent_kafka.Consumer"]


def test_an_import_of_a_pinned_old_path_is_reported(tmp_path: Path, tree: dict[str, str]) -> None:
    root = write_tree(tmp_path, {**tree, "pipelines/store/old.py":
                                 "from udfs.journey_book import Snapshot\n",
                                 "bench/old.py": "from udfs import journey_book\n"})
    assert old_path_imports(root, ["udfs.journey_book"]) == [
        "bench/old.py:1 imports udfs.journey_book",
        "pipelines/store/old.py:1 imports udfs.journey_book"]
