"""The layering of the shipped packages (docs/architecture.md), checked on the source: no import circles, no
import against the layer order, no private name imported from another module, no object's private
attribute read or written from outside the module that defines it, no ``Any`` in an actor's constructor or
``task_status``, and the backoff formula (``2 ** n``) written nowhere but ``daemon.backoff``.

Imports under ``if TYPE_CHECKING:`` are not imports at run time and do not count. The checker is tested on
small synthetic trees first, so a checker that finds nothing cannot pass for a clean tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("daemon", "actors")

# The layers, lowest first: a module imports only from its own layer or those below. Within a layer, the
# groups named in PEERS stand side by side and none imports another.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("daemon", "daemon.logs", "daemon.metrics", "daemon.backoff", "daemon.extras")),
    ("engine", ("daemon.cricket",)),
    ("adapters", ("daemon.store", "daemon.sportmonks", "daemon.apns", "daemon.replay")),
    ("services", ("actors", "daemon.api")),
    ("configuration", ("daemon.config",)),
    ("runtime", ("daemon.runtime",)),
    ("demo", ("daemon.demo",)),
    ("commands", ("daemon.commands", "daemon.cli", "daemon.__main__")),
)
PEERS = {"adapters", "services"}

# Private attributes of third-party objects that a module may use, and why. Each is the one place that does.
THIRD_PARTY_PRIVATE: Mapping[str, str] = {
    # h2 keeps no public API for the fast paths the sender and the test server need (header blocks encoded
    # once per push, frames parsed without an event object per frame); every use is checked at import
    # (``_missing_h2_internals``) and falls back to h2's public API when a release moves one.
    "daemon.apns.internals": "h2 internals behind a version check with fallbacks",
}


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: set[str] = field(default_factory=set)


def load_modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            modules[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return modules


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def _resolve(module: Module, node: ast.ImportFrom, known: Mapping[str, Module]) -> str:
    if not node.level:
        return node.module or ""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(name: str, known: Mapping[str, Module]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def analyse_imports(modules: Mapping[str, Module]) -> list[str]:
    """Fill each module's run-time imports; return the private names imported across modules."""
    private: list[str] = []
    for module in modules.values():
        skipped = _type_checking_nodes(module.tree)
        for node in ast.walk(module.tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, node, modules)
                if not target.startswith(PACKAGES):
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    owner = _owner(full, modules)
                    if owner is not None and owner != module.name:
                        module.imports.add(owner)
                    is_private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if is_private and full not in modules:
                        private.append(f"{module.name} imports {alias.name} from {target}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGES):
                        owner = _owner(alias.name, modules)
                        if owner is not None and owner != module.name:
                            module.imports.add(owner)
    return private


def find_cycles(modules: Mapping[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(modules[start].imports)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in modules:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(modules[succ].imports))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
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
                    cycles.append(sorted(component))
    return cycles


def layer_of(name: str) -> tuple[int, str, str]:
    """(layer index, layer name, group) of a module: the longest matching prefix wins."""
    best: tuple[int, int, str, str] | None = None
    for i, (layer, groups) in enumerate(LAYERS):
        for group in groups:
            if name == group or name.startswith(group + "."):
                if best is None or len(group) > best[1]:
                    best = (i, len(group), layer, group)
    if best is None:
        raise AssertionError(f"{name} is in no layer: add it to LAYERS and to docs/architecture.md")
    return best[0], best[2], best[3]


def layer_violations(modules: Mapping[str, Module]) -> list[str]:
    found: list[str] = []
    for module in modules.values():
        mine, layer, group = layer_of(module.name)
        for target in sorted(module.imports):
            theirs, their_layer, their_group = layer_of(target)
            if theirs > mine:
                found.append(f"{module.name} ({layer}) imports {target} ({their_layer})")
            elif theirs == mine and layer in PEERS and their_group != group:
                found.append(f"{module.name} imports its peer {target} ({layer} stand side by side)")
            if target.startswith("daemon.commands") and not module.name.startswith("daemon.commands"):
                found.append(f"{module.name} imports the command module {target}")
    return found


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines: methods and class attributes, and ``self._x`` assignments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def private_reach(modules: Mapping[str, Module]) -> list[str]:
    """``obj._name`` where ``obj`` is not ``self``/``cls`` and ``_name`` is not defined in the same module."""
    found: list[str] = []
    for module in modules.values():
        if module.name in THIRD_PARTY_PRIVATE:
            continue
        own = _defined_private_names(module.tree)
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr in own:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"{module.name}:{node.lineno} reads {ast.unparse(node)}")
    return found


def doublings(modules: Mapping[str, Module], *, home: str = "daemon.backoff") -> list[str]:
    """``2 ** n`` with a variable exponent outside ``home``: a backoff written out instead of called."""
    found: list[str] = []
    for module in modules.values():
        if module.name == home:
            continue
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Pow)
                and isinstance(node.left, ast.Constant)
                and node.left.value in (2, 2.0)
                and not isinstance(node.right, ast.Constant)
            ):
                found.append(f"{module.name}:{node.lineno} {ast.unparse(node)}")
    return found


def _names_any(annotation: ast.expr | None) -> bool:
    """``Any`` as the type itself: alone, ``TaskStatus[Any]``, or a member of a union (``Any | None``). ``Any``
    inside a container (``dict[str, Any]``: a JSON value) is data, not an untyped seam."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _names_any(ast.parse(annotation.value, mode="eval").body)
    if isinstance(annotation, ast.Name | ast.Attribute):
        return ast.unparse(annotation) in ("Any", "typing.Any")
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _names_any(annotation.left) or _names_any(annotation.right)
    if isinstance(annotation, ast.Subscript):
        outer = ast.unparse(annotation.value)
        inner = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if outer.endswith(("Optional", "Union", "TaskStatus")):
            return any(_names_any(e) for e in inner)
    return False


def untyped_seams(modules: Mapping[str, Module], *, package: str = "actors") -> list[str]:
    """In ``package`` (the actors): constructor parameters typed ``Any`` and ``task_status`` typed ``Any``."""
    found: list[str] = []
    for module in modules.values():
        if module.name != package and not module.name.startswith(package + "."):
            continue
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for fn in node.body:
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
                for arg in args:
                    constructor = fn.name == "__init__" and arg.arg not in ("self", "cls")
                    if (constructor or arg.arg == "task_status") and _names_any(arg.annotation):
                        found.append(
                            f"{module.name}.{node.name}.{fn.name}({arg.arg}: {ast.unparse(arg.annotation)})"
                        )
    return found


# --- the checker on synthetic trees ------------------------------------------------------------------------


def _tree(tmp: Path, files: Mapping[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_modules(tmp)


def test_the_checker_finds_a_circle_but_not_one_made_only_for_type_checking(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "daemon/__init__.py": "",
            "daemon/cricket/__init__.py": "",
            "daemon/cricket/a.py": "from daemon.cricket.b import x\n",
            "daemon/cricket/b.py": "from daemon.cricket import a\nx = 1\n",
            "daemon/cricket/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from daemon.cricket.d import y\n",
            "daemon/cricket/d.py": "from daemon.cricket.c import TYPE_CHECKING\ny = 1\n",
            "actors/__init__.py": "",
        },
    )
    analyse_imports(modules)
    assert find_cycles(modules) == [["daemon.cricket.a", "daemon.cricket.b"]]


def test_the_checker_finds_imports_against_the_layers_between_peers_and_of_commands(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "daemon/__init__.py": "",
            "daemon/cricket/__init__.py": "from daemon.store import repo\n",
            "daemon/store/__init__.py": "",
            "daemon/store/repo.py": "from daemon.apns import push\n",
            "daemon/apns/__init__.py": "",
            "daemon/apns/push.py": "",
            "daemon/runtime/__init__.py": "from daemon.commands import run\n",
            "daemon/commands/__init__.py": "",
            "daemon/commands/run.py": "from daemon.runtime import x\n",
            "actors/__init__.py": "from daemon.cricket import y\n",
        },
    )
    analyse_imports(modules)
    assert layer_violations(modules) == [
        "daemon.cricket (engine) imports daemon.store.repo (adapters)",
        "daemon.runtime (runtime) imports daemon.commands.run (commands)",
        "daemon.runtime imports the command module daemon.commands.run",
        "daemon.store.repo imports its peer daemon.apns.push (adapters stand side by side)",
    ]


def test_the_checker_finds_private_imports_and_reaches_into_other_objects(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "daemon/__init__.py": "__version__ = '1'\n",
            "daemon/cricket/__init__.py": "",
            "daemon/cricket/a.py": (
                "class A:\n    def __init__(self):\n        self._mine = 1\n\n"
                "    def same(self, other):\n        return other._mine\n"
            ),
            "daemon/cricket/b.py": (
                "from daemon import __version__\nfrom daemon.cricket.a import _helper\n"
                "def f(a):\n    a._set = 2\n    return a._mine + a.public\n"
            ),
            "actors/__init__.py": "",
        },
    )
    private = analyse_imports(modules)
    assert private == ["daemon.cricket.b imports _helper from daemon.cricket.a"]
    assert sorted(private_reach(modules)) == [
        "daemon.cricket.b:4 reads a._set",
        "daemon.cricket.b:5 reads a._mine",
    ]


def test_the_checker_finds_a_backoff_written_out(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "daemon/__init__.py": "",
            "daemon/backoff.py": "def delay(n):\n    return 2.0 ** (n - 1)\n",
            "daemon/cricket/__init__.py": "LIMIT = 2**31 - 1\n\ndef wait(n):\n    return min(5.0, 0.2 * 2**n)\n",
            "actors/__init__.py": "",
        },
    )
    assert doublings(modules) == ["daemon.cricket:4 2 ** n"]


def test_the_checker_finds_any_on_an_actors_constructor_and_task_status(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "daemon/__init__.py": "class Elsewhere:\n    def __init__(self, x: Any) -> None: ...\n",
            "actors/__init__.py": "",
            "actors/a.py": (
                "class A:\n"
                "    def __init__(self, feed: Any, repos: 'Any | None', items: dict[str, Any]) -> None: ...\n"
                "    async def run(self, *, task_status: trio.TaskStatus[Any] = IGNORED) -> None: ...\n"
                "    def other(self, x: Any) -> None: ...\n"
                "class B:\n"
                "    def __init__(self, feed: Feed, n: int | None = None) -> None: ...\n"
                "    async def run(self, *, task_status: trio.TaskStatus[None] = IGNORED) -> None: ...\n"
            ),
        },
    )
    assert untyped_seams(modules) == [
        "actors.a.A.__init__(feed: Any)",
        "actors.a.A.__init__(repos: 'Any | None')",
        "actors.a.A.run(task_status: trio.TaskStatus[Any])",
    ]


# --- the shipped packages ----------------------------------------------------------------------------------


def _shipped() -> tuple[dict[str, Module], list[str]]:
    modules = load_modules(ROOT)
    assert len(modules) > 100  # the packages were found
    return modules, analyse_imports(modules)


def test_no_import_circles_among_the_shipped_modules() -> None:
    modules, _ = _shipped()
    assert find_cycles(modules) == []


def test_every_import_follows_the_layer_order() -> None:
    modules, _ = _shipped()
    assert layer_violations(modules) == []


def test_no_module_imports_another_modules_private_names() -> None:
    _, private = _shipped()
    assert private == []


def test_no_module_reaches_into_another_objects_private_attributes() -> None:
    modules, _ = _shipped()
    assert private_reach(modules) == []


def test_every_layer_is_named_in_the_architecture_page() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    for layer, groups in LAYERS:
        assert layer in page, f"docs/architecture.md does not name the {layer} layer"
        for group in groups:
            assert f"`{group}`" in page, f"docs/architecture.md does not place `{group}`"


def test_the_backoff_formula_is_written_once() -> None:
    modules, _ = _shipped()
    assert doublings(modules) == [], "call daemon.backoff.backoff_delay"


def test_no_actor_takes_any_in_its_constructor_or_task_status() -> None:
    modules, _ = _shipped()
    assert untyped_seams(modules) == [], "name what the actor needs (a Protocol in actors/ports.py)"


def test_no_api_part_takes_any_in_its_task_status_or_constructor() -> None:
    modules, _ = _shipped()
    assert untyped_seams(modules, package="daemon.api") == [], "name what the part needs"
