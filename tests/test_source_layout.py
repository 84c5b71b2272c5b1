"""Two of issue 31's bars on the source itself: no source file over 600 lines outside
migrations, and no import cycle between modules, not even one through a type-only import.
(``lint-imports`` keeps the contracts between packages and siblings; the cycle test here looks
at every module pair, a package's ``__init__`` included.)"""

from __future__ import annotations

from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "shunter", "worker", "trainer_core", "storage", "launcher")
SOURCE = {".py", ".js", ".css", ".html", ".sh"}
MAX_LINES = 600


def _sources() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in (REPO / package).rglob("*")
        if path.suffix in SOURCE
        and path.is_file()
        and "vendor" not in path.parts  # third-party assets served as they are
        and "__pycache__" not in path.parts
    ]


def test_no_source_file_is_over_600_lines() -> None:
    sources = _sources()
    assert len(sources) > 300  # the walk found the packages
    long = {
        str(p.relative_to(REPO)): n
        for p in sources
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"over {MAX_LINES} lines: {long}"


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_cycle_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    modules = set(graph.modules)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) & modules for m in modules}
    assert len(imports) > 300
    assert _cycles(imports) == []
