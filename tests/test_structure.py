"""The package's shape: no import cycles (type-only ones included), small modules, and the
boundaries DESIGN.md draws (the core imports no Django, only ``pipeline`` imports PySpark).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import redisq_django

PACKAGE_DIR = Path(redisq_django.__file__).parent
#: Modules stay under this many lines (CONVENTIONS.md: split by concern before then).
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module ``name`` imports, at any level: top, function, ``TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:
                # `from package import submodule` imports the submodule.
                candidate = f"{module}.{alias.name}"
                yield candidate if candidate in MODULES else module


def _graph() -> dict[str, set[str]]:
    return {
        name: {m for m in _imports(name, path) if m in MODULES and m != name}
        for name, path in MODULES.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_even_type_only_or_inside_functions() -> None:
    # The detector finds a cycle when there is one...
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # ...and the package has none.
    assert _cycles(_graph()) == []


def test_no_module_is_over_400_lines() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def _external_roots(name: str) -> set[str]:
    return {m.split(".")[0] for m in _imports(name, MODULES[name])}


def test_the_core_imports_no_django() -> None:
    core = [n for n in MODULES if n.startswith("redisq_django.core")]
    assert core
    assert {n for n in core if "django" in _external_roots(n)} == set()
    # ...and nothing of the Django layer either
    assert {
        n
        for n in core
        for m in _imports(n, MODULES[n])
        if m.startswith("redisq_django.") and not m.startswith("redisq_django.core")
    } == set()


def test_only_the_pipeline_imports_pyspark() -> None:
    outside = [n for n in MODULES if not n.startswith("redisq_django.pipeline")]
    assert {n for n in outside if "pyspark" in _external_roots(n)} == set()


def _reachable(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    """``start`` and every package module they import, directly or not."""
    seen = set(start)
    todo = list(start)
    while todo:
        for imported in graph[todo.pop()] - seen:
            seen.add(imported)
            todo.append(imported)
    return seen


def _is_our_admin(name: str) -> bool:
    return name.split(".")[:2] == ["redisq_django", "admin"]


def test_only_the_admin_imports_the_admin() -> None:
    # django.contrib.admin is optional (a worker-only service has none), and importing
    # our admin package registers ModelAdmins, which fails without it: only Django's
    # admin autodiscovery may import it (template tags are imported by every system
    # check, management commands run without the admin).
    graph = _graph()
    importers = {
        n: sorted(filter(_is_our_admin, graph[n])) for n in MODULES if not _is_our_admin(n)
    }
    assert {n: found for n, found in importers.items() if found} == {}


def test_the_management_commands_never_import_the_admin() -> None:
    # The detector follows imports at any depth...
    graph = _graph()
    assert "redisq_django.admin.common" in _reachable(graph, ["redisq_django.admin.queues"])
    # ...and nothing the management commands import, directly or not, is our admin...
    reached = _reachable(graph, [n for n in MODULES if n.startswith("redisq_django.management")])
    assert {n for n in reached if _is_our_admin(n)} == set()
    # ...nor imports django.contrib.admin, but the admin-history module, which asks first
    # whether it is installed (tests/django/test_without_admin.py runs every command).
    admin_users = {
        n
        for n in reached
        if any(m.startswith("django.contrib.admin") for m in _imports(n, MODULES[n]))
    }
    assert admin_users == {"redisq_django.history"}
