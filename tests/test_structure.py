"""The package's shape: no import cycles (type-only ones included) between modules nor
between the package's parts, the layers and edges of docs/layout.md, small modules, and
the boundaries DESIGN.md draws (the core imports no Django, only ``pipeline`` imports
PySpark).

Every import counts, wherever it is written: at the top, inside a function (it runs
later, but the one module still needs the other), under ``TYPE_CHECKING`` (the type
checker follows it, and a type-only cycle hides a collaborator that should be passed in).
A parent package's ``__init__``, which Python runs before a submodule, is not counted: the
package's own imports its public names lazily (PEP 562).
"""

from __future__ import annotations

import ast
import builtins
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import redisq_django

PACKAGE_DIR = Path(redisq_django.__file__).parent
#: A module over this many lines is worth a look (CONVENTIONS.md): is it still one
#: concern? The test says so (a LongModule warning in pytest's summary), never fails.
LOOK_AT_LINES = 400
#: ...and over this many it fails: split it by concern, never by a class chain, and never
#: by trimming docs, comments or measured figures, or joining lines.
MAX_LINES = 600


class LongModule(UserWarning):
    """A module over :data:`LOOK_AT_LINES` lines (shown, not an error: pyproject.toml)."""


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


#: Class names Django's conventions give to many modules (one per management command).
CONVENTIONAL_CLASSES = {"Command"}


def test_one_class_per_name() -> None:
    # Two classes with one name (the Redis dead entry and the database row were both
    # ``DeadLetter``) make every import of it a question: which one?
    where: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name not in CONVENTIONAL_CLASSES:
                where.setdefault(node.name, []).append(name)
    assert {c: modules for c, modules in where.items() if len(modules) > 1} == {}


#: Basenames Django gives to a file of each app or part (``signal_handlers.py``: a part's
#: receivers, connected from ``AppConfig.ready()``), and Python to a package's face and to
#: what ``python -m <package>`` runs.
CONVENTIONAL_BASENAMES = {"__init__", "__main__", "signal_handlers"}


def _one_concern(modules: list[str]) -> bool:
    """Whether modules sharing a basename are the places Django gives one concern:
    ``models/X.py`` (the rows), ``admin/X.py`` (their admin) and at most one
    capability's module working on them."""
    places = [m.split(".")[1] for m in modules]
    others = [p for p in places if p not in ("models", "admin")]
    return "models" in places and len(set(places)) == len(places) and len(others) <= 1


def test_one_module_basename_per_concern() -> None:
    # A basename says which concern a module holds (docs/layout.md, "Words")...
    assert _one_concern(["redisq_django.models.queues", "redisq_django.admin.queues"])
    assert _one_concern(["redisq_django.models.outbox", "redisq_django.publishing.outbox"])
    assert not _one_concern(["redisq_django.deadletters.triage", "redisq_django.admin.triage"])
    assert not _one_concern(["redisq_django.core.events", "redisq_django.publishing.events"])
    # ...and two modules share one only for one concern.
    where: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if path.stem not in CONVENTIONAL_BASENAMES:
            where.setdefault(path.stem, []).append(name)
    shared = {base: sorted(m) for base, m in where.items() if len(m) > 1}
    assert {base: m for base, m in shared.items() if not _one_concern(m)} == {}


def test_no_module_is_over_600_lines_and_those_over_400_are_named() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}
    for name, size in sorted(sizes.items()):
        if size > LOOK_AT_LINES:
            warnings.warn(f"{name}: {size} lines; still one concern?", LongModule, stacklevel=1)


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
    # ...nor imports django.contrib.admin, but the admin log's module, which asks first
    # whether it is installed (tests/management/test_without_admin.py runs every command).
    admin_users = {
        n
        for n in reached
        if any(m.startswith("django.contrib.admin") for m in _imports(n, MODULES[n]))
    }
    assert admin_users == {"redisq_django.admin_log"}


# -- docs/layout.md, "Rooms": a subpackage's face is its __init__ ------------------------

#: Subpackages whose ``__init__`` is their face: a module outside one imports the face,
#: never a module inside it (the modules inside import each other).
#: The rooms with a face: outside each, only its ``__init__`` is imported.
ROOMS = (
    *("redisq_django.admin.live", "redisq_django.admin.deadletters"),
    *("redisq_django.core.operator", "redisq_django.core.tasks", "redisq_django.core.archives"),
    *("redisq_django.core.partitions", "redisq_django.core.worker", "redisq_django.core.scripts"),
)


def _past_the_face(importer: str, imported: str) -> bool:
    """Whether ``importer`` reaches into a room from outside, past its face."""
    return any(
        imported.startswith(f"{room}.") and not importer.startswith(f"{room}.")
        for room in ROOMS
        if importer != room
    )


def test_outside_a_room_only_its_face_is_imported() -> None:
    # The rule finds an outsider reaching past a face, and lets the face and the room's
    # own modules import what is inside...
    assert _past_the_face("redisq_django.admin.queues", "redisq_django.admin.live.pages")
    assert not _past_the_face("redisq_django.admin.queues", "redisq_django.admin.live")
    assert not _past_the_face("redisq_django.admin.live", "redisq_django.admin.live.pages")
    assert not _past_the_face("redisq_django.admin.live.pages", "redisq_django.admin.live.scope")
    # ...and every room is there, and nothing outside it reaches in.
    assert [room for room in ROOMS if room not in MODULES] == []
    found = {(a, b) for a, deps in _graph().items() for b in deps if _past_the_face(a, b)}
    assert sorted(found) == []


# -- docs/layout.md: the layers and the edges between the package's parts ------------------
#
# A part is a subpackage or a top-level module of ``redisq_django``, by its name
# (``redisq_django`` itself: the package's ``__init__``, the public names).

FOUNDATION = (
    *("conf", "signals", "models", "connection", "figures", "admin_log"),
    *("database", "arguments", "discovery"),
)
CAPABILITIES = ("publishing", "deadletters", "consuming", "tasks", "schedules", "metrics")
ASSEMBLY = (
    *("runner", "apps", "signal_handlers", "checks", "admin", "management"),
    *("templatetags", "urls", "archives", "operations", "testing", "redisq_django"),
)
#: Each part's layer: 0 core, 1 foundation, 2 capabilities, 3 assembly and entry points.
LAYERS: dict[str, int] = {
    "core": 0,
    **dict.fromkeys(FOUNDATION, 1),
    **dict.fromkeys((*CAPABILITIES, "pipeline"), 2),
    **dict.fromkeys(ASSEMBLY, 3),
}
#: The imports allowed inside one layer, (importer, imported): docs/layout.md's orders,
#: followed through.
SIDEWAYS = {
    # foundation
    ("connection", "conf"),
    ("models", "conf"),
    ("admin_log", "models"),
    ("admin_log", "conf"),
    # capabilities
    ("tasks", "consuming"),
    ("schedules", "tasks"),
    ("schedules", "publishing"),
    # assembly and entry points
    ("archives", "operations"),
    ("admin", "archives"),
    ("admin", "operations"),
    ("management", "archives"),
    ("management", "operations"),
    ("management", "runner"),
    ("testing", "runner"),
    ("apps", "checks"),
    ("apps", "signal_handlers"),
}
#: ``pipeline`` runs on Spark executors with a Redis URL alone: core and ``arguments.py``
#: only.
PIPELINE_IMPORTS = {"core", "arguments"}
#: Module imports against those rules, each written down in docs/layout.md ("Allowed
#: exceptions") with its reason.
EXCEPTIONS = {
    ("redisq_django.models.schedules", "redisq_django.schedules.spec"),
    ("redisq_django.models.schedules", "redisq_django.schedules.timing"),
}
LAYOUT = Path(__file__).resolve().parents[1] / "docs" / "layout.md"


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _edges() -> set[tuple[str, str]]:
    """Every import between modules of the package, less the allowed exceptions."""
    return {(a, b) for a, deps in _graph().items() for b in deps} - EXCEPTIONS


def _part_graph(edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {_part(m): set() for m in MODULES}
    for a, b in edges:
        if _part(a) != _part(b):
            graph[_part(a)].add(_part(b))
    return graph


def _breaks_the_layout(importer: str, imported: str) -> bool:
    a, b = _part(importer), _part(imported)
    if a == b:
        return False
    if a == "pipeline":
        return b not in PIPELINE_IMPORTS
    return LAYERS[b] > LAYERS[a] or (LAYERS[b] == LAYERS[a] and (a, b) not in SIDEWAYS)


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {_part(m) for m in MODULES} - LAYERS.keys() == set()
    assert {(a, b) for a, b in SIDEWAYS if LAYERS[a] != LAYERS[b]} == set()


def test_no_import_cycles_between_the_parts_of_the_package() -> None:
    # Modules without a cycle can still make one between packages (a imports b.x, b.y
    # imports a): the detector finds it on the parts...
    modules = {
        ("redisq_django.consuming.runner", "redisq_django.schedules.job"),
        ("redisq_django.schedules.schedule_sync", "redisq_django.consuming.consumer_sync"),
    }
    assert _cycles(_part_graph(modules)) == [["consuming", "schedules"]]
    # ...and the package has none (the allowed exceptions aside).
    assert _cycles(_part_graph(_edges())) == []


def test_every_import_follows_the_layers_and_edges_of_the_layout() -> None:
    # The rules find an import from the side, from above, and the pipeline's imports of
    # what only Django has...
    assert _breaks_the_layout(
        "redisq_django.schedules.schedule_sync", "redisq_django.consuming.consumer_sync"
    )
    assert _breaks_the_layout("redisq_django.connection", "redisq_django.metrics.tracing")
    assert _breaks_the_layout("redisq_django.pipeline.cli", "redisq_django.conf")
    assert not _breaks_the_layout("redisq_django.tasks.task_queues", "redisq_django.consuming")
    # ...and no import of the package breaks them.
    assert sorted(e for e in _edges() if _breaks_the_layout(*e)) == []


def test_the_allowed_exceptions_are_still_needed_and_written_down() -> None:
    allowed = LAYOUT.read_text().split("### Allowed exceptions", 1)[1].split("\n## ", 1)[0]
    for importer, imported in sorted(EXCEPTIONS):
        assert imported in _graph()[importer], f"{importer} no longer imports {imported}"
        assert _breaks_the_layout(importer, imported)
        assert f"`{importer}` → `{imported}`" in allowed, "docs/layout.md must say why"


def _public_signatures_with_any(module: str) -> list[str]:
    tree = ast.parse(MODULES[module].read_text())
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            annotations = [a.annotation for a in every if a is not None and a.annotation]
            if node.returns is not None:
                annotations.append(node.returns)
            if any("Any" in ast.unparse(a) for a in annotations):
                found.append(f"{module}.{node.name}")
    return found


def test_the_dead_letters_are_one_wing_that_the_admin_and_the_command_call() -> None:
    graph = _graph()
    wing = [m for m in MODULES if m.startswith("redisq_django.deadletters")]
    # The admin and the operator command call the dead letters' package...
    callers = (
        "redisq_django.admin.deadletters.model_admin",
        "redisq_django.management.commands.redisq",
    )
    for caller in callers:
        assert "redisq_django.deadletters" in graph[caller], caller
    # ...not pass-throughs in operations.py...
    assert {m for m in graph["redisq_django.operations"] if m in wing} == set()
    # ...and its functions say what they take and give: no Any.
    assert [f for m in wing for f in _public_signatures_with_any(m)] == []


def _broker_forwards(source: str) -> list[str]:
    """The public functions of ``source`` that only pass a call on to the broker (or to
    what it hands out): one statement past the docstring, a call through ``broker``."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
            continue
        call = body[0].value
        if isinstance(call, ast.Call) and "broker" in ast.unparse(call.func):
            found.append(node.name)
    return found


def test_operations_forwards_nothing_the_broker_offers() -> None:
    # The scan finds a function that only hands a call on to the broker...
    forward = '''
def purge(queue, *, broker=None):
    """Purge."""
    (broker or get_broker()).purge(queue)

def held(queue):
    return get_broker().operator.held_keys(queue)

def names():
    return sorted(get_broker().queues()) + list(rows())
'''
    assert _broker_forwards(forward) == ["purge", "held"]
    # ...and operations.py keeps only what adds something: callers (the admin, the
    # commands) call the broker's objects themselves (docs/layout.md, "The core's seam").
    assert _broker_forwards(MODULES["redisq_django.operations"].read_text()) == []


# -- tests/ mirrors the package (CONTRIBUTING.md, "Where a new test goes") ----------------

TESTS_DIR = Path(__file__).resolve().parent
#: The directories of tests/ that mirror no package, besides the test apps (``*app``):
#: shared helpers, what a browser shows, the faults that cross packages (real processes,
#: signals, Redis restarts, clocks), the documentation site (docs/), and the worker-only
#: project.
TESTS_OF_NO_PACKAGE = {"support", "browser", "faults", "docs", "workeronly"}


def _test_dirs() -> list[Path]:
    """The directories under tests/ that must mirror a package, relative to tests/."""
    found = []
    for path in sorted(TESTS_DIR.rglob("*")):
        rel = path.relative_to(TESTS_DIR)
        if not path.is_dir() or any(p.startswith((".", "__")) for p in rel.parts):
            continue
        if rel.parts[0] in TESTS_OF_NO_PACKAGE or rel.parts[0].endswith("app"):
            continue
        found.append(rel)
    return found


def test_the_tests_are_laid_out_like_the_package() -> None:
    # A newcomer finds the tests of redisq_django/X/ in tests/X/, and nowhere else (a
    # grab-bag directory such as tests/django/ cannot come back)...
    dirs = _test_dirs()
    assert Path("core") in dirs and Path("core", "worker") in dirs
    assert {
        str(rel): "mirrors no package of redisq_django"
        for rel in dirs
        if not (PACKAGE_DIR / rel / "__init__.py").is_file()
    } == {}
    # ...and each is a package: pytest tells test files of one basename apart by it.
    assert [str(rel) for rel in dirs if not (TESTS_DIR / rel / "__init__.py").is_file()] == []


# -- docs/layout.md, "The core's seam": no reaching into the broker -----------------------

#: Attributes of the broker (or of what it hands out) that only the core uses: its
#: client, its scripts, its keys' prefix.
_SEAM_ATTRIBUTES = ("client", "scripts")
#: Where a module outside the core may still name one, (module, expression): why.
SEAM_ALLOWED = {
    # The pipeline's executors connect with a Redis URL alone (no Django settings, no
    # process-wide broker): the client is the link's own, not a broker's.
    ("redisq_django.pipeline.reading", "link.client"): "the executor's own connection",
    ("redisq_django.pipeline.reading", "self.link.client"): "the executor's own connection",
    ("redisq_django.pipeline.streaming", "self.link.client"): "the driver's own connection",
    ("redisq_django.pipeline.writer", "self.link.client"): "the executor's own connection",
    ("redisq_django.pipeline.outages", "redis_io.client"): "builds a connection from a URL",
}


def _seam_breaks(name: str, source: str) -> set[str]:
    """The expressions of ``source`` that reach into a broker: ``x.client``,
    ``x.scripts``, ``x.config.prefix``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        reaches = node.attr in _SEAM_ATTRIBUTES or (
            node.attr == "prefix"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "config"
        )
        if reaches and (name, ast.unparse(node)) not in SEAM_ALLOWED:
            found.add(ast.unparse(node))
    return found


def test_outside_the_core_nothing_reaches_into_the_broker() -> None:
    # The scan finds the broker's client, scripts and prefix, however reached...
    leaks = "broker.client.ping(); get_broker().scripts; b.config.prefix; config.prefix"
    assert _seam_breaks("redisq_django.checks", leaks) == {
        "broker.client",
        "get_broker().scripts",
        "b.config.prefix",
    }
    # ...and no module outside the core does it: they call the broker and what it hands
    # out (broker.operator, broker.task_results, broker.archives, broker.schedule_ledger).
    outside = {n: p for n, p in MODULES.items() if not n.startswith("redisq_django.core")}
    found = {n: sorted(_seam_breaks(n, p.read_text())) for n, p in outside.items()}
    assert {n: f for n, f in found.items() if f} == {}


def _builds_a_broker(source: str) -> set[str]:
    """The calls of ``source`` that build a broker or a quick client: ``Broker(…)``,
    ``quick_client(…)``."""
    return {
        ast.unparse(node.func)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).rsplit(".", 1)[-1] in ("Broker", "quick_client")
    }


def test_the_django_layer_builds_its_brokers_in_one_place() -> None:
    # The scan finds a broker built by hand...
    assert _builds_a_broker("b = Broker(quick_client(0.5), get_core_config())") == {
        "Broker",
        "quick_client",
    }
    # ...and outside the core only connection.py builds one (get_broker, quick_broker);
    # the pipeline's executors build theirs from a Redis URL alone.
    found = {
        name: sorted(_builds_a_broker(path.read_text()))
        for name, path in MODULES.items()
        if _part(name) not in ("core", "pipeline", "connection")
    }
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_the_seam_exceptions_are_still_needed() -> None:
    for module, expression in SEAM_ALLOWED:
        tree = ast.parse(MODULES[module].read_text())
        used = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert expression in used, f"{module} no longer uses {expression}: drop it"


# -- docs/layout.md, "Words": one word, one idea ------------------------------------------

#: A word holding "group", but in "consumer group" (the Redis one, which keeps the word).
_GROUP = re.compile(r"(consumer\s+)?(\w*group\w*)", re.IGNORECASE)
TEMPLATES_DIR = PACKAGE_DIR / "templates" / "admin" / "redisq_django"


def _group_words(text: str) -> set[str]:
    """Every identifier or word of ``text`` that says "group" of something else than the
    Redis consumer group."""
    return {m[2] for m in _GROUP.finditer(text) if not m[1]}


#: Where dead letters are the subject: their wing, their admin, their pages, and the
#: operator command (``redisq dead``). Dead letters that failed the same way are a
#: cause; what still says "group" there is a name of 0.9 kept one minor version.
DEAD_LETTER_PLACES = {
    **{f"deadletters/{p.name}": p for p in (PACKAGE_DIR / "deadletters").glob("*.py")},
    **{
        f"admin/deadletters/{p.name}": p
        for p in (PACKAGE_DIR / "admin" / "deadletters").glob("*.py")
    },
    **{f"templates/deadletter/{p.name}": p for p in (TEMPLATES_DIR / "deadletter").glob("*.html")},
    "management/commands/redisq.py": PACKAGE_DIR / "management" / "commands" / "redisq.py",
}
DEPRECATED_GROUP_WORDS = {
    "deadletters/__init__.py": {"groups", "Group", "GROUPS_LIMIT"},
    "admin/deadletters/triage_pages.py": {
        *("groups", "groups_view", "redisq_django_deadletter_groups"),
    },
    "management/commands/redisq.py": {"groups"},
}


def test_dead_letters_that_failed_the_same_way_are_a_cause_never_a_group() -> None:
    # The scan finds "group" said of dead letters, and leaves the consumer group alone...
    assert _group_words("Group by error · Retry group; the consumer group g") == {
        "Group",
        "group",
    }
    assert _group_words("groups_view, GROUPS_LIMIT") == {"groups_view", "GROUPS_LIMIT"}
    # ...and where dead letters are the subject, only the deprecated names of 0.9 say it.
    found = {name: _group_words(path.read_text()) for name, path in DEAD_LETTER_PLACES.items()}
    assert {
        name: sorted(words - DEPRECATED_GROUP_WORDS.get(name, set()))
        for name, words in found.items()
        if words - DEPRECATED_GROUP_WORDS.get(name, set())
    } == {}
    assert {n: w for n, w in DEPRECATED_GROUP_WORDS.items() if not w <= found[n]} == {}


#: Where priority levels are the subject: the levels of one task queue, read highest
#: first, are a priority ladder.
PRIORITY_PLACES = (
    *("core/worker/priority.py", "core/handler.py", "consuming/declarations.py"),
    *("tasks/task_queues.py", "tasks/backend_options.py", "tasks/backend.py"),
)


def test_the_levels_of_a_task_queue_are_a_ladder_never_a_group() -> None:
    found = {name: _group_words((PACKAGE_DIR / name).read_text()) for name in PRIORITY_PLACES}
    assert {name: sorted(words) for name, words in found.items() if words} == {}


def _literal(path: Path, name: str) -> object:
    """The literal value of ``name`` assigned at the top of ``path`` (no import: the
    pipeline's modules import PySpark)."""
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no {name} in {path}")


def test_no_data_source_option_calls_a_spark_partition_a_partition() -> None:
    # A partition is a queue's; what one Spark task reads is a slice. The names of 0.9
    # are only accepted, renamed, for one minor version.
    source_options = PACKAGE_DIR / "pipeline" / "source_options.py"
    options = _literal(source_options, "OPTIONS")
    renamed = _literal(source_options, "RENAMED")
    assert isinstance(options, tuple) and isinstance(renamed, dict)
    assert [o for o in options if "partition" in o.lower()] == []
    assert set(renamed.values()) <= set(options)


#: What a delivery must not be called: a Message is what its handler gets.
_MESSAGE_NAMES = {"message", "messages", "msg", "msgs"}


def _deliveries_named_message(source: str) -> list[str]:
    """The parameters of ``source`` annotated with ``Delivery`` (alone or in a
    container) but named as a message: ``function(parameter)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                annotation = ast.unparse(arg.annotation) if arg.annotation else ""
                if arg.arg in _MESSAGE_NAMES and re.search(r"\bDelivery\b", annotation):
                    found.append(f"{node.name}({arg.arg})")
    return found


def test_a_delivery_is_never_named_a_message() -> None:
    # The scan finds a Delivery named as a message, alone or in a container...
    assert _deliveries_named_message(
        "def f(message: Delivery, messages: Sequence[Delivery], m: Message) -> None: ..."
    ) == ["f(message)", "f(messages)"]
    # ...and no parameter of the package is (docs/layout.md, "Words": a delivery).
    found = {name: _deliveries_named_message(path.read_text()) for name, path in MODULES.items()}
    assert {name: f for name, f in found.items() if f} == {}


# -- one error root (CONVENTIONS.md, "Errors") ---------------------------------------------

#: Exceptions a handler raises to the worker, never the package to its user: control flow.
CONTROL_FLOW = {"Reject", "Settled"}
#: The exception classes the package's may derive from besides its own: Python's, and
#: those of Django and redis-py they also are (``ImproperlyConfigured``, ``RedisError``).
FOREIGN_EXCEPTIONS = {
    *(n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)),
    *("ImproperlyConfigured", "RedisError"),
}


def _class_bases() -> dict[str, set[str]]:
    """Each class of the package (one per name: test_one_class_per_name) and the names
    of its bases, as written (``redis.ConnectionError``: ``ConnectionError``)."""
    bases: dict[str, set[str]] = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
    return bases


def _outside_the_root(bases: dict[str, set[str]]) -> list[str]:
    """The exception classes of ``bases`` that do not derive from ``RedisqError``."""

    def reaches(name: str, goal: set[str], seen: frozenset[str] = frozenset()) -> bool:
        if name in goal:
            return True
        return any(reaches(b, goal, seen | {name}) for b in bases.get(name, set()) - seen)

    return sorted(
        name
        for name in bases
        if name not in CONTROL_FLOW
        and name != "RedisqError"
        and reaches(name, FOREIGN_EXCEPTIONS)
        and not reaches(name, {"RedisqError"})
    )


def test_every_error_the_package_raises_derives_from_redisq_error() -> None:
    # The scan follows the bases, through the package's own classes and others'...
    assert _outside_the_root(
        {
            "RedisqError": {"Exception"},
            "JobError": {"RedisqError", "RuntimeError"},
            "ArchiveError": {"JobError"},
            "Outage": {"RedisqError", "ConnectionError"},
            "Stray": {"ValueError"},
            "StrayChild": {"Stray"},
            "Plain": set(),
            "Reject": {"Exception"},
        }
    ) == ["Stray", "StrayChild"]
    # ...and every exception class of the package has RedisqError among its ancestors
    # (keeping its other bases, so that an `except ValueError` still catches it), but the
    # ones a handler raises to the worker.
    assert _outside_the_root(_class_bases()) == []
