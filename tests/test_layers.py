"""The house stays walkable: no module imports from a layer above its own, and no file name repeats."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("specs", "segment_store", "indexing_task", "overlord")

# Bottom to top; a module may import from its own layer or any layer below.
# Inside overlord, its top-level modules (config, errors, logs, metrics, ...) sit below its packages.
LAYERS = (
    ("specs", "segment_store"),
    ("indexing_task",),
    ("overlord",),
    ("overlord.supervisor",),
    ("overlord.coordinator",),
    ("overlord.query",),
    ("overlord.http",),
    ("overlord.dev",),
    ("overlord.cli",),
)


def layer(module: str) -> int | None:
    """The layer of a module: that of the longest layer prefix it falls under; None outside the packages."""
    best: tuple[int, int] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def source_files() -> Iterator[Path]:
    """Every Python file of the source packages."""
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    """The dotted name of a source file."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """The line and absolute name of each module a file imports (relative imports resolved)."""
    me = module_name(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])
            else:
                yield node.lineno, str(node.module)


def upward_imports() -> list[str]:
    """Each import of a module from a higher layer, as ``file:line: importer -> imported``."""
    found = []
    for path in source_files():
        me = module_name(path)
        own = layer(me)
        assert own is not None, f"{me} is in no layer"
        for line, target in imported_modules(path):
            theirs = layer(target)
            if theirs is not None and theirs > own:
                found.append(f"{path.relative_to(ROOT)}:{line}: {me} -> {target}")
    return found


def test_no_module_imports_from_a_higher_layer() -> None:
    """A lower layer never depends on a higher one (move shared code down instead)."""
    assert upward_imports() == []


def test_the_layer_map_sees_upward_imports() -> None:
    """The check itself works: overlord.http is above overlord.query, specs is below everything."""
    assert layer("overlord.http.app") > layer("overlord.query.engine") > layer("overlord.supervisor.loop")  # type: ignore[operator]
    assert layer("overlord.config") < layer("overlord.supervisor.loop")  # type: ignore[operator]
    assert layer("specs.masked") == layer("segment_store.publish") == 0
    assert layer("pyspark.sql") is None


def test_no_module_basename_repeats_across_the_source_packages() -> None:
    """Each file name says its role without its folder (``__init__.py`` excepted)."""
    seen: defaultdict[str, list[str]] = defaultdict(list)
    for path in source_files():
        if path.name != "__init__.py":
            seen[path.name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
