"""The layout of the three packages ``envs`` <- ``agents`` <- ``feudal_es``.

The import graph is read with :mod:`ast` from every ``.py`` file under ``feudal_es/``,
``envs/`` and ``agents/`` at the repository root (subpackages included): every
``import x`` and ``from x import y`` statement, at module level, in a class body or
inside a function, relative imports resolved against the importing module's package.
``from pkg import name`` names the submodule ``pkg.name`` when there is such a file, else
``pkg`` itself. ``importlib.import_module("x")`` / ``__import__("x")`` with a literal
string count as imports of ``x`` that do not run at import time (other dynamic imports
are not seen). Only edges between modules of the three packages matter.

Rules (each test's docstring has the details):

1. dependency direction: ``envs`` imports neither ``agents`` nor ``feudal_es``; ``agents``
   does not import ``feudal_es`` (any import statement anywhere in the file);
2. no import cycle among the modules of the three packages, over the imports that run
   when a module is imported (module level and class bodies; not inside functions, not
   under ``if TYPE_CHECKING:``);
3. the ES core (``feudal_es/es.py`` and the ``feudal_es`` modules it imports) imports
   nothing but jax, equinox, optax, numpy, the standard library and itself;
4. no module of ``feudal_es`` is over ``MAX_LINES`` lines, except those in
   ``LONG_MODULES_ALLOWED`` (with the reason);
5. ``import feudal_es`` / ``import envs`` / ``import agents`` in a fresh interpreter has
   no side effects: JAX's backends not started, ``jax_num_cpu_devices`` and the ``JAX_*``
   / ``XLA_*`` environment variables as a fresh interpreter has them, no ``feudal_es/``
   id in PettingZoo's or Gymnasium's registry (registration is an explicit call).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict, deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("feudal_es", "envs", "agents")

MAX_LINES = 500
#: ``feudal_es`` modules allowed over MAX_LINES: repo-relative path -> why.
LONG_MODULES_ALLOWED: dict[str, str] = {}

#: The dependency direction: package -> packages it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {"envs": ("agents", "feudal_es"),
                                         "agents": ("feudal_es",)}

#: What the ES core may import besides the standard library and other ES core modules.
ES_START = "feudal_es.es"
ES_ALLOWED = ("jax", "equinox", "optax", "numpy")
# imported by one ES module, inside a function, only when a config names it: an optional
# backend (ESConfig(kind="evosax:...")), never a dependency of the reference API
ES_LAZY_BACKENDS = {"feudal_es.evolution.evosax_kind": ("evosax",)}


# --- the import graph --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Import:
    importer: str  # dotted name of the importing module
    path: str  # its file, relative to the repository root
    line: int
    target: str  # the module the statement names (``pkg.sub`` for ``from pkg import sub``)
    at_import: bool  # runs when the importer is imported (not in a function/TYPE_CHECKING)

    @property
    def runs(self) -> tuple[str, ...]:
        """The modules the statement executes: the target's packages, then the target
        (``import a.b.c`` runs ``a/__init__.py``, ``a/b/__init__.py``, then ``a/b/c``)."""
        parts = self.target.split(".")
        return tuple(".".join(parts[:i]) for i in range(1, len(parts) + 1))

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def top(module: str) -> str:
    return module.partition(".")[0]


def ancestors(module: str) -> tuple[str, ...]:
    """The packages above ``module`` (``a.b.c`` -> ``a``, ``a.b``)."""
    parts = module.split(".")
    return tuple(".".join(parts[:i]) for i in range(1, len(parts)))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the three packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    assert found, f"no modules under {ROOT}/{{{','.join(PACKAGES)}}}"
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


class _Collector(ast.NodeVisitor):
    """Import statements with whether they run at import time, and literal dynamic
    imports (``importlib.import_module("x")``, ``__import__("x")``)."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        self.dynamic: list[tuple[int, str]] = []  # (line, module)
        self._deferred = 0  # > 0 inside a function or an ``if TYPE_CHECKING:`` body

    def _defer(self, nodes: list[ast.stmt]) -> None:
        self._deferred += 1
        for node in nodes:
            self.visit(node)
        self._deferred -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # decorators and defaults run at import time but hold no import statement
        self._defer(node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._defer(node.body)
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self._deferred == 0))

    visit_ImportFrom = visit_Import

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (name in ("import_module", "__import__") and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and not node.args[0].value.startswith(".")):
            self.dynamic.append((node.lineno, node.args[0].value))
        self.generic_visit(node)


def _resolve(importer: str, is_package: bool, node: ast.Import | ast.ImportFrom,
             known: dict[str, Path]) -> list[str]:
    """The modules one statement names, relative imports resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        if node.level - 1 > len(package) - 1:
            raise ValueError(f"relative import beyond the top package in {importer}")
        base_parts = package[: len(package) - (node.level - 1)]
        base = ".".join([*base_parts, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    targets = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        targets.append(sub if alias.name != "*" and sub in known else base)
    return targets


@functools.cache
def imports() -> dict[str, tuple[Import, ...]]:
    """Module -> its import statements, one entry per module named (any package)."""
    known = modules()
    graph: dict[str, tuple[Import, ...]] = {}
    for name, path in known.items():
        collector = _Collector()
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        rel = path.relative_to(ROOT).as_posix()
        graph[name] = tuple(
            Import(name, rel, node.lineno, target, at_import)
            for node, at_import in collector.found
            for target in _resolve(name, path.name == "__init__.py", node, known)
        ) + tuple(Import(name, rel, line, target, False) for line, target in collector.dynamic)
    return graph


# --- 1. direction ------------------------------------------------------------------------
def test_dependency_direction():
    """``envs`` imports neither ``agents`` nor ``feudal_es``; ``agents`` does not import
    ``feudal_es`` (the direction is envs <- agents <- feudal_es). Every import statement
    counts, inside functions and under ``TYPE_CHECKING`` too."""
    bad = [f"{imp.where}: {imp.importer} imports {imp.target} ({top(imp.importer)} must "
           f"not import {top(imp.target)})"
           for stmts in imports().values() for imp in stmts
           if top(imp.target) in FORBIDDEN.get(top(imp.importer), ())]
    assert not bad, "imports against the direction envs <- agents <- feudal_es:\n" + \
        "\n".join(bad)


# --- 2. cycles ---------------------------------------------------------------------------
def import_time_graph() -> dict[str, dict[str, Import]]:
    """``importer -> {module: the statement}`` over the imports that run at import time.

    A statement that names ``a.b.c`` runs ``a``, ``a.b`` and ``a.b.c``: edges to all three
    that are modules here, except to the importer's own packages when they are not what
    the statement names (they are already being imported when the importer runs; ``from
    pkg import name`` does name ``pkg`` and so is an edge to it)."""
    known = modules()
    graph: dict[str, dict[str, Import]] = defaultdict(dict)
    for importer, stmts in imports().items():
        own = set(ancestors(importer))
        for imp in stmts:
            if not imp.at_import:
                continue
            for module in imp.runs:
                if module in known and module != importer and (
                        module == imp.target or module not in own):
                    graph[importer].setdefault(module, imp)
    return graph


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def _cycle_through(start: str, members: set[str], graph: dict[str, dict[str, Import]]
                   ) -> list[str]:
    """A shortest cycle from ``start`` back to it within one component (BFS)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, {})):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child in members and child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # impossible in a component


def test_no_import_cycles():
    """No cycle among the modules of the three packages, over the imports that run when a
    module is imported (module level and class bodies, including module-level ``if`` and
    ``try`` blocks; not inside functions, not under ``if TYPE_CHECKING:``): a cycle there
    means a module can see another one half-initialised, depending on which is imported
    first. Each cycle is reported as its path, each edge with its file and line."""
    graph = import_time_graph()
    reports = []
    for component in _strongly_connected(graph):
        cycle = _cycle_through(component[0], set(component), graph)
        hops = [f"  {a} -> {b}  ({graph[a][b].where})" for a, b in itertools.pairwise(cycle)]
        reports.append(f"cycle among {len(component)} modules {component}:\n"
                       + "\n".join(hops))
    assert not reports, "import cycles:\n" + "\n".join(reports)


# --- 3. the ES core ----------------------------------------------------------------------
def es_modules() -> dict[str, str]:
    """The ES core: module -> how it was reached.

    ``feudal_es/es.py`` plus every ``feudal_es`` module an ES module names in an import
    statement (anywhere in the file: a function's import runs when the API is used),
    followed transitively; plus the packages Python runs on the way (``feudal_es/
    __init__.py`` for ``feudal_es.es``, ``pkg/__init__.py`` for ``pkg.mod``), of which
    only the imports that run at import time count (their functions are not the ES API).
    """
    known = modules()
    how: dict[str, str] = {}  # module -> "named" | "package on the way"
    queue = deque([(ES_START, "named"), *((a, "package on the way") for a in
                                          ancestors(ES_START))])
    while queue:
        module, reached = queue.popleft()
        if how.get(module) == "named" or how.get(module) == reached:
            continue
        how[module] = reached
        for imp in imports().get(module, ()):
            if reached != "named" and not imp.at_import:
                continue
            if top(imp.target) != "feudal_es" or imp.target not in known:
                continue
            queue.append((imp.target, "named"))
            queue.extend((a, "package on the way") for a in ancestors(imp.target)
                         if a in known)
    return how


def test_es_core_imports_only_jax_equinox_optax_numpy_and_the_stdlib():
    """The reference ES API contract: ``feudal_es/es.py`` and the ES modules it imports
    (see :func:`es_modules`: the ``feudal_es`` modules it names, transitively, and the
    package ``__init__`` files run on the way) import nothing but jax (and its
    submodules), equinox, optax, numpy, the standard library and each other. So no
    ``agents`` or ``envs``, and no other third-party package (but an optional backend of
    ES_LAZY_BACKENDS, imported inside a function by the one module named there); a
    ``feudal_es`` module that an ES module imports is itself held to the rule (it joins
    the ES modules)."""
    es = es_modules()
    assert ES_START in modules(), f"{ES_START} not found under {ROOT}"
    allowed = set(ES_ALLOWED) | set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for module, reached in sorted(es.items()):
        for imp in imports()[module]:
            if reached != "named" and not imp.at_import:
                continue
            name = top(imp.target)
            if name == "feudal_es":
                if imp.target not in es:
                    bad.append(f"{imp.where}: {module} imports {imp.target} (no such module)")
            elif name in PACKAGES:
                bad.append(f"{imp.where}: {module} imports {imp.target} ({name} is outside "
                           "the ES core)")
            elif not imp.at_import and name in ES_LAZY_BACKENDS.get(module, ()):
                continue
            elif name not in allowed:
                bad.append(f"{imp.where}: {module} imports {imp.target} (third-party, not "
                           f"one of {ES_ALLOWED} nor the standard library)")
    summary = ", ".join(f"{m} ({r})" for m, r in sorted(es.items()))
    assert not bad, f"ES modules: {summary}\n" + "\n".join(bad)


# --- 4. module size ----------------------------------------------------------------------
def test_no_feudal_es_module_over_max_lines():
    """Every ``.py`` file under ``feudal_es/`` has at most MAX_LINES lines, except those
    in LONG_MODULES_ALLOWED; an allow-list entry for a file that no longer exists or is no
    longer over the limit fails too (so the list only shrinks)."""
    counts = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8")
                                                     .splitlines())
              for module, path in modules().items() if top(module) == "feudal_es"}
    over = {p: n for p, n in sorted(counts.items()) if n > MAX_LINES}
    unexpected = [f"{p}: {n} lines" for p, n in over.items() if p not in LONG_MODULES_ALLOWED]
    stale = [f"{p}: {counts.get(p, 'no such file')} lines" for p in LONG_MODULES_ALLOWED
             if p not in over]
    assert not unexpected and not stale, (
        (f"feudal_es modules over {MAX_LINES} lines:\n  " + "\n  ".join(unexpected)
         if unexpected else "")
        + ("\nstale LONG_MODULES_ALLOWED entries (not over the limit):\n  "
           + "\n  ".join(stale) if stale else ""))


# --- 5. import side effects --------------------------------------------------------------
_CHILD = r"""
import json, os, sys
watched = lambda: {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_"))}
before = watched()
PACKAGE = sys.argv[1]
if PACKAGE:
    __import__(PACKAGE)
import jax
from jax._src import xla_bridge
started = (xla_bridge.backends_are_initialized()
           if hasattr(xla_bridge, "backends_are_initialized") else bool(xla_bridge._backends))
after = watched()
import gymnasium, pettingzoo
ids = lambda registry: sorted(i for i in registry if str(i).startswith("feudal_es/"))
print(json.dumps({
    "backends_started": started,
    "num_cpu_devices": jax.config.jax_num_cpu_devices,
    "environ": {k: [before.get(k), after.get(k)] for k in sorted({*before, *after})
                if before.get(k) != after.get(k)},
    "pettingzoo": ids(pettingzoo.parallel_registry) + ids(pettingzoo.aec_registry),
    "gymnasium": ids(gymnasium.registry),
}))
"""


def _child_env() -> dict[str, str]:
    """This environment without a chosen JAX CPU device count (conftest sets one)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if "xla_force_host_platform_device_count" not in f]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, dict]:
    """What a fresh interpreter sees after importing nothing ("") and each package; the
    four children run at once."""
    procs = {name: subprocess.Popen([sys.executable, "-c", _CHILD, name], cwd=ROOT,
                                    env=_child_env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name in ("", *PACKAGES)}
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"import {name or '(nothing)'} failed:\n{err[-3000:]}"
        results[name] = json.loads(out.strip().splitlines()[-1])
    return results


@pytest.mark.parametrize("package", PACKAGES)
def test_import_has_no_side_effects(package, fresh_imports):
    """In a fresh interpreter (``JAX_NUM_CPU_DEVICES`` unset), ``import <package>``
    leaves JAX's backends unstarted, ``jax.config.jax_num_cpu_devices`` and the
    ``JAX_*``/``XLA_*`` environment variables as a fresh interpreter has them, and
    registers no ``feudal_es/`` id with PettingZoo or Gymnasium."""
    base, got = fresh_imports[""], fresh_imports[package]
    problems = []
    if got["backends_started"]:
        problems.append("JAX's backends are initialised (something ran JAX at import)")
    if got["num_cpu_devices"] != base["num_cpu_devices"]:
        problems.append(f"jax_num_cpu_devices is {got['num_cpu_devices']}, a fresh "
                        f"interpreter has {base['num_cpu_devices']}")
    if got["environ"]:
        problems.append(f"environment variables changed (before, after): {got['environ']}")
    for registry in ("pettingzoo", "gymnasium"):
        new = sorted(set(got[registry]) - set(base[registry]))
        if new:
            problems.append(f"{registry} registry holds {new} (registration must be an "
                            "explicit call)")
    assert not problems, f"import {package}: " + "; ".join(problems)
