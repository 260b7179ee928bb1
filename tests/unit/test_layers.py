"""The tree goes one way, down the request's path: no import circle between stage folders
(imports made for type checking only included), and the named rules of the README's
Architecture section."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stage(module: str) -> str:
    """`proxy.store.reads` → `proxy.store`; `strategies.ledger` → `strategies`."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "proxy" and len(parts) > 1 else parts[0]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports, at any depth (inside `if TYPE_CHECKING:` and functions too)."""
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                found.add(node.module)
    return found


def graph(*tops: str) -> dict[str, set[str]]:
    """Stage → the stages it imports, for every module under the given top-level folders."""
    edges: dict[str, set[str]] = defaultdict(set)
    for top in tops:
        for path in (ROOT / top).rglob("*.py"):
            source = stage(module_name(path))
            for name in imported(path):
                if name.split(".")[0] in ("proxy", "strategies", "bench", "tests"):
                    target = stage(name)
                    if target != source:
                        edges[source].add(target)
    return edges


def circle(edges: dict[str, set[str]]) -> list[str]:
    """One import circle, as the stages along it, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_checker_finds_a_circle() -> None:
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b", "c"}, "b": {"c"}}) == []


def test_the_checker_reads_type_only_and_relative_imports(tmp_path: Path) -> None:
    module = tmp_path / "proxy" / "store" / "reads.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import history\n"
        "from ..recall import units\n"
        "if TYPE_CHECKING:\n"
        "    from proxy.exchange.steps import Exchange\n"
        "def late():\n"
        "    import strategies.ledger\n"
    )
    names = imported(module, tmp_path)
    assert {"proxy.store", "proxy.recall", "proxy.exchange.steps", "strategies.ledger"} <= names
    assert {stage(name) for name in names} >= {"proxy.recall", "proxy.exchange", "strategies"}


def test_no_import_circle_between_stage_folders() -> None:
    assert circle(graph("proxy", "strategies")) == []


def test_the_named_rules_hold() -> None:
    edges = graph("proxy", "strategies")
    assert not {s for s in edges["strategies"] if s.startswith("proxy")}, "strategies is pure"
    assert "proxy.exchange" not in edges["proxy.formats"], "converters import no exchange"
    assert "proxy.recall" not in edges["proxy.store"], "the store imports no recall"
    importers_of_app = {s for s, targets in edges.items() if "proxy.app" in targets}
    assert importers_of_app <= {"proxy.cli", "proxy.testing"}, "nothing below app imports it back"
    importers_of_testing = {s for s, targets in edges.items() if "proxy.testing" in targets}
    assert importers_of_testing == set(), "the proxy never imports its test support"


def test_tests_and_bench_never_import_each_other() -> None:
    assert "tests" not in graph("bench")["bench"]
    assert "bench" not in graph("tests")["tests"]
