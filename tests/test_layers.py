"""Imports point down: shared/'s rooms in layers, and no import reaches a room above its own.

The graph is read from the source with `ast` (no import runs), so a lazy import inside a
function counts like one at the top of a module. docs/architecture.md draws the same layers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHARED = Path(__file__).resolve().parent.parent / "shared"

# Bottom to top. A room is a package or a loose module directly under shared/. A room may
# import rooms of the layers below it, never one above; rooms on one line are siblings and
# do not import each other. A new room must be given its place here.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("config", "errors", "heap", "inputs", "locks", "metrics", "tokens", "wordlists"),
    ("db",),
    ("records",),
    ("embeddings", "vectors"),
    ("llm",),
    ("extraction",),
    ("memory",),
    ("compression",),
    ("context",),
    ("chat", "ops"),
    # The process's resources: only the use cases above should see it.
    ("runtime",),
    # Use cases: one module each in flows/.
    ("flows",),
    # mem0's hosted API and its import, over the use cases (a mem0 add stores an import).
    ("mem0_compat",),
    # Scripts alembic runs from above (`tiermem migrate`, the startup upgrade), filed beside
    # db/ so they ship in the package: a migration may reuse any domain code (0008 upgrades
    # slots with memory's own), and nothing imports one.
    ("migrations",),
)

# shared/ is the domain: services/ and workers/ are thin shells around it.
FORBIDDEN = ("services", "workers", "tiermem", "fastapi", "starlette", "celery", "kombu")


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(SHARED.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SHARED.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str:
    """The longest known module `name` starts with (`shared.x.Thing` -> `shared.x`)."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[Edge]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, _resolve(alias.name, known), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                yield Edge(module, _resolve(f"{source}.{alias.name}", known), node.lineno)


def _graph() -> list[Edge]:
    known = _modules()
    return [e for m, p in known.items() for e in _imports(m, p, known) if e.imported != m]


def _room(module: str) -> str:
    if module.startswith("shared.db.migrations"):
        return "migrations"
    return module.split(".")[1] if module.count(".") else ""


_LEVEL = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}


def _upward(edges: list[Edge]) -> dict[tuple[str, str], Edge]:
    """Imports into a room on the same layer or above (imports within a room are free)."""
    found: dict[tuple[str, str], Edge] = {}
    for e in edges:
        if not e.imported.startswith("shared."):
            continue
        a, b = _room(e.importer), _room(e.imported)
        if a != b and _LEVEL[b] >= _LEVEL[a]:
            found.setdefault((e.importer, e.imported), e)
    return found


def _describe(upward: dict[tuple[str, str], Edge]) -> str:
    lines = [
        f"  {e.importer} -> {e.imported}  "
        f"({_room(e.importer)} L{_LEVEL[_room(e.importer)]} -> "
        f"{_room(e.imported)} L{_LEVEL[_room(e.imported)]}, line {e.line})"
        for _, e in sorted(upward.items())
    ]
    return (
        "imports in shared/ that point up or sideways (move the code, or pass what it needs "
        "down as an argument):\n" + "\n".join(lines)
    )


def test_every_room_has_a_layer() -> None:
    rooms = {_room(m) for m in _modules() if _room(m)}
    missing = sorted(rooms - set(_LEVEL))
    assert not missing, f"place these rooms of shared/ in LAYERS (tests/test_layers.py): {missing}"
    assert len(_LEVEL) == sum(len(rooms) for rooms in LAYERS), "a room is on two layers"


def test_shared_imports_no_app_and_no_framework() -> None:
    bad = [
        f"{e.importer} imports {e.imported} (line {e.line})"
        for e in _graph()
        if e.imported.split(".")[0] in FORBIDDEN
    ]
    assert not bad, "shared/ must not import the apps or their frameworks:\n" + "\n".join(bad)


def test_imports_point_down() -> None:
    upward = _upward(_graph())
    assert not upward, _describe(upward)


def test_the_graph_sees_imports() -> None:
    """The reader itself: a lazy import inside a function and `from package import module`."""
    edges = {(e.importer, e.imported) for e in _graph()}
    assert ("shared.runtime", "shared.extraction.offline") in edges  # inside a function
    assert ("shared.ops.prometheus", "shared.metrics") in edges  # from shared import metrics
    assert ("shared.memory.writer", "shared.vectors") in edges  # a name from a package


def test_routes_reach_the_workers_only_through_the_task_queue() -> None:
    """One wiring style: a route sends through `TasksDep` (workers.task_queue), built in
    create_app from the settings, and imports nothing from workers/ itself."""
    routes = SHARED.parent / "services" / "api" / "routes"
    bad = []
    for path in sorted(routes.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            bad += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] == "workers"]
    assert not bad, "routes importing workers/ (use TasksDep):\n" + "\n".join(bad)
