"""The layering of DESIGN.md, checked on every module's imports (ast, nothing imported).

    cli -> ops -> runroot -> adapters -> core -> stdlib
                 ops -> backends -> adapters -> core   (launch backends: I/O, beside adapters)
    training -> runroot / adapters / core   (never ops, never cli)

Imports under ``if TYPE_CHECKING:`` are types only and never run; they may name any
lower layer. torch is imported at module level only inside ``ckptctl.training``; other
code that needs it (``verify --check-finite``) imports it inside the function.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ckptctl"

#: Modules at the top of the package every layer may use.
SHARED = {"ckptctl", "ckptctl.errors", "ckptctl.exit_codes"}

#: For each package: the ckptctl packages its modules may import at run time.
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "adapters": {"adapters", "core"},
    "backends": {"backends", "adapters", "core"},
    "runroot": {"runroot", "adapters", "core"},
    "ops": {"ops", "runroot", "backends", "adapters", "core"},
    "training": {"training", "runroot", "adapters", "core"},
    "cli": {"cli", "ops", "core"},
}
#: Type-only imports (``if TYPE_CHECKING:``) may also name these.
TYPE_ONLY_EXTRA: dict[str, set[str]] = {
    "cli": {"runroot", "adapters", "backends"},
}
#: Single modules a layer may also import at run time: ``list``/``locate``/``verify`` call the
#: read-only use cases where they live (``runroot.locate``, shared with the training library)
#: and build their options and read their results (``runroot.reports``); no shim in ``ops``.
MODULE_EXTRA: dict[str, set[str]] = {
    "cli": {"ckptctl.runroot.locate", "ckptctl.runroot.reports"},
}
#: Top-level modules and what they may import.
TOP_LEVEL: dict[str, set[str]] = {
    "ckptctl.errors": {"ckptctl", "ckptctl.exit_codes"},
    "ckptctl.exit_codes": set(),
    "ckptctl": set(),
    "ckptctl.__main__": {"ckptctl.cli"},
}


@dataclass(frozen=True)
class Imp:
    module: str
    """The imported module (``ckptctl.core.verify.contract``, ``torch``)."""
    line: int
    at_module_level: bool
    """Runs when the module is imported (not inside a function)."""
    type_only: bool
    """Inside ``if TYPE_CHECKING:``."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, source: str | None = None) -> list[Imp]:
    rel = path.relative_to(PKG.parent).with_suffix("")
    is_package = rel.name == "__init__"
    module = ".".join(rel.parts[:-1] if is_package else rel.parts)
    out: list[Imp] = []

    def visit(node: ast.AST, top: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Imp(a.name, node.lineno, top, type_only) for a in node.names)
            return
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            out.append(Imp(target, node.lineno, top, type_only))
            # "from ckptctl import audit" names a submodule
            for a in node.names:
                sub = f"{target}.{a.name}"
                where = PKG.parent / Path(*sub.split("."))
                if target.startswith("ckptctl") and (where.is_dir() or where.with_suffix(".py").exists()):
                    out.append(Imp(sub, node.lineno, top, type_only))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, top, True)
            for child in node.orelse:
                visit(child, top, type_only)
            return
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for kid in ast.iter_child_nodes(node):
            visit(kid, inner, type_only)

    text = path.read_text(encoding="utf-8") if source is None else source
    visit(ast.parse(text), True, False)
    return out


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


ALL_MODULES = sorted(PKG.rglob("*.py"))


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def _ckptctl_package(target: str) -> str:
    """``ckptctl.core.verify.contract`` -> ``core``; ``ckptctl.errors`` -> ``ckptctl.errors``."""
    parts = target.split(".")
    if target in SHARED or len(parts) < 2:
        return target
    if parts[1] in ALLOWED:
        return parts[1]
    return ".".join(parts[:2])


def test_every_package_is_covered() -> None:
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED), "add the new package's layer to ALLOWED (and DESIGN.md)"
    tops = {module_name(p) for p in PKG.glob("*.py")}
    assert tops == set(TOP_LEVEL), "add the new top-level module to TOP_LEVEL"


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_imports_follow_the_layers(path: Path) -> None:
    module = module_name(path)
    layer = _layer(module)
    bad = []
    for imp in imports_of(path):
        if not imp.module.startswith("ckptctl"):
            continue
        if layer is None:
            allowed = TOP_LEVEL[module]
            if not any(imp.module == a or imp.module.startswith(a + ".") for a in allowed):
                bad.append(f"line {imp.line}: {imp.module}")
            continue
        pkg = _ckptctl_package(imp.module)
        if pkg in SHARED:
            continue
        ok = ALLOWED[layer] | (TYPE_ONLY_EXTRA.get(layer, set()) if imp.type_only else set())
        if pkg not in ok and imp.module not in MODULE_EXTRA.get(layer, set()):
            bad.append(f"line {imp.line}: {imp.module} ({layer} -> {pkg})")
    assert not bad, f"{module} breaks the layering (DESIGN.md): " + "; ".join(bad)


@pytest.mark.parametrize(
    "path", sorted((PKG / "core").rglob("*.py")), ids=lambda p: module_name(p)
)
def test_core_imports_only_the_standard_library(path: Path) -> None:
    bad = [
        f"line {imp.line}: {imp.module}"
        for imp in imports_of(path)
        if not imp.module.startswith("ckptctl")
        and imp.module.split(".")[0] not in sys.stdlib_module_names
        and imp.module != "__future__"
    ]
    assert not bad, f"{module_name(path)}: core is stdlib only: " + "; ".join(bad)


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_torch_at_module_level_only_in_training(path: Path) -> None:
    module = module_name(path)
    if module.startswith("ckptctl.training"):
        return
    eager = [
        f"line {imp.line}: {imp.module}"
        for imp in imports_of(path)
        if imp.module.split(".")[0] == "torch" and imp.at_module_level and not imp.type_only
    ]
    assert not eager, f"{module} imports torch when imported (do it inside the function): {eager}"


# -- one home per resource ---------------------------------------------------------------------

#: Calls that rename or remove a directory tree.
_MUTATING_CALLS = {"rename", "remove_tree", "rmtree", "replace", "removedirs", "rmdir"}
#: Where they may appear: runroot.mutate (step directories) and the storage adapter (the
#: primitive itself); _dcp_io renames DCP's own ``.metadata.tmp`` file inside a save.
_MUTATION_HOMES = {
    "ckptctl.runroot.mutate",
    "ckptctl.adapters.storage",
    "ckptctl.training._dcp_io",
}


#: Calls that remove a file. On an object store a step directory disappears when its commit
#: marker is removed (``mutate.hide``), so these are held to a home too.
_REMOVING_CALLS = {"remove_file", "rm", "rm_file", "unlink", "delete"}
#: Besides the homes above: the lock-file protocol removes its own lock file.
_REMOVAL_HOMES = _MUTATION_HOMES | {"ckptctl.adapters.runlock"}


def mutating_calls(source: str, names: set[str]) -> list[str]:
    """``.rename()``-style calls in ``source`` whose method name is in ``names``."""
    return [
        f"line {node.lineno}: .{node.func.attr}()"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
        and not (isinstance(node.func.value, ast.Constant))  # "x".replace(...)
        and not _is_str_method(node)
    ]


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_only_runroot_mutate_renames_or_removes_directories(path: Path) -> None:
    module = module_name(path)
    if module in _MUTATION_HOMES:
        return
    calls = mutating_calls(path.read_text(encoding="utf-8"), _MUTATING_CALLS)
    assert not calls, f"{module} renames/removes directly; go through ckptctl.runroot.mutate: {calls}"


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_only_runroot_mutate_removes_files_from_a_run_root(path: Path) -> None:
    module = module_name(path)
    if module in _REMOVAL_HOMES:
        return
    calls = mutating_calls(path.read_text(encoding="utf-8"), _REMOVING_CALLS)
    assert not calls, f"{module} removes files directly; go through ckptctl.runroot.mutate: {calls}"


def test_the_mutation_checker_sees_violations() -> None:
    """What an ops module that quarantined by hand would look like is caught; str.replace is not."""
    src = (
        "def quarantine(storage, a, b, root):\n"
        "    storage.rename(a, b)\n"
        "    root.storage.remove_tree(a)\n"
        "    os.replace(a, b)\n"
        "    storage.remove_file(a + '/.ckptctl-commit')\n"
        "    return b.replace('step_', 'x')\n"
    )
    assert mutating_calls(src, _MUTATING_CALLS) == ["line 2: .rename()", "line 3: .remove_tree()", "line 4: .replace()"]
    assert mutating_calls(src, _REMOVING_CALLS) == ["line 5: .remove_file()"]


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_audit_records_are_appended_only_through_runroot_audit(path: Path) -> None:
    """Every audit record is a typed ``runroot.audit`` record written by ``audit.write``."""
    module = module_name(path)
    if module in {"ckptctl.runroot.audit", "ckptctl.adapters.audit"}:
        return
    calls = mutating_calls(path.read_text(encoding="utf-8"), {"append_record"})
    names = [
        f"line {node.lineno}: append_record"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and any(a.name == "append_record" for a in node.names)
    ]
    assert not calls + names, f"{module} appends audit records by hand; use ckptctl.runroot.audit.write: {calls + names}"


# -- options declared once ------------------------------------------------------------------------

#: Flags several commands share: declared once, in ``ckptctl/cli/options.py``.
SHARED_FLAGS = {"--config", "--signatures", "--json", "--dry-run", "--deep", "--world-size", "--yes", "--require"}


def declared_flags(source: str) -> list[tuple[str, int]]:
    """Flag names passed to ``typer.Option(...)`` calls in ``source``, with their line."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "Option"
        ):
            out.extend(
                (a.value, node.lineno)
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")
            )
    return out


@pytest.mark.parametrize("path", sorted((PKG / "cli").glob("*.py")), ids=lambda p: module_name(p))
def test_shared_options_are_declared_only_in_cli_options(path: Path) -> None:
    if path.name == "options.py":
        flags = [f for f, _ in declared_flags(path.read_text(encoding="utf-8"))]
        assert set(flags) >= SHARED_FLAGS and len(flags) == len(set(flags))
        return
    dup = [f"line {n}: {f}" for f, n in declared_flags(path.read_text(encoding="utf-8")) if f in SHARED_FLAGS]
    assert not dup, f"{module_name(path)} declares a shared option again; use ckptctl.cli.options: {dup}"
    assert declared_flags('x = typer.Option("--config", "-c", help="h")\n') == [("--config", 1)]


def _is_str_method(node: ast.Call) -> bool:
    """``text.replace("a", "b")``: two string arguments is str.replace, not os.replace."""
    assert isinstance(node.func, ast.Attribute)
    if node.func.attr != "replace":
        return False
    return not (isinstance(node.func.value, ast.Name) and node.func.value.id == "os")


def test_the_checker_sees_violations() -> None:
    """The rules above can fail: a core module importing ops and torch is caught."""
    src = (
        "from typing import TYPE_CHECKING\n"
        "import torch\n"
        "from ckptctl.ops import rollback\n"
        "from .. import errors\n"
        "if TYPE_CHECKING:\n"
        "    from ckptctl.adapters.storage import Storage\n"
        "def f():\n"
        "    import torch.nn\n"
    )
    found = imports_of(PKG / "core" / "not_a_module.py", source=src)
    assert [(i.module, i.at_module_level, i.type_only) for i in found] == [
        ("typing", True, False),
        ("torch", True, False),
        ("ckptctl.ops", True, False),
        ("ckptctl.ops.rollback", True, False),
        ("ckptctl", True, False),
        ("ckptctl.errors", True, False),
        ("ckptctl.adapters.storage", True, True),
        ("torch.nn", False, False),
    ]
    assert _ckptctl_package("ckptctl.ops.rollback") not in ALLOWED["core"]
    assert _ckptctl_package("ckptctl.adapters.storage") not in ALLOWED["core"]


# -- no facades: every name is imported from the module that defines it -------------------------

ROOT = PKG.parent
#: Where callers live: the package, and the tests, benches and examples that use it.
CALLER_FILES = sorted(
    p for d in ("ckptctl", "tests", "bench", "examples") for p in (ROOT / d).rglob("*.py")
)
#: The one package face kept: training scripts import the library from ``ckptctl.training``
#: (docs/training.md, examples/train.py); everywhere else a name comes from its module.
PACKAGE_FACES = {"ckptctl.training"}
#: ``__all__`` entries that name an imported value, with why they may: none.
REEXPORTS_ALLOWED: set[tuple[str, str]] = set()


def _module_path(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def top_level_names(source: str) -> tuple[set[str], set[str]]:
    """(names the module defines, names it binds by importing), at module level (``if``/``try``
    bodies included, ``if TYPE_CHECKING:`` left out: those names do not exist at run time)."""
    defined: set[str] = set()
    imported: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(source).body)
    return defined, imported


_NAMES: dict[str, tuple[set[str], set[str]]] = {}


def _names_of(module: str) -> tuple[set[str], set[str]] | None:
    if module not in _NAMES:
        path = _module_path(module)
        if path is None:
            return None
        _NAMES[module] = top_level_names(path.read_text(encoding="utf-8"))
    return _NAMES[module]


def reexported(source: str) -> list[str]:
    """Names ``__all__`` lists that the module imports instead of defining."""
    defined, _ = top_level_names(source)
    out: list[str] = []
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            out.extend(
                e.value
                for e in node.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value not in defined
            )
    return out


def only_reexports(source: str) -> bool:
    """A module whose body is imports of ckptctl names (plus ``__all__``): a shim."""
    body = [
        n
        for n in ast.parse(source).body
        if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))  # docstring
        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
    ]
    imports = [n for n in body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("ckptctl")]
    rest = [
        n
        for n in body
        if n not in imports
        and not (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    ]
    return bool(imports) and not rest


def borrowed_names(source: str) -> list[str]:
    """``from ckptctl.x import name`` (and ``alias.name`` for ``from ckptctl import x as alias``)
    where module ``ckptctl.x`` does not define ``name`` but got it by importing it."""
    tree = ast.parse(source)
    out: list[str] = []
    aliases: dict[str, str] = {}

    def borrowed(module: str, name: str) -> bool:
        if module in PACKAGE_FACES or _module_path(f"{module}.{name}") is not None:
            return False
        names = _names_of(module)
        return names is not None and name not in names[0] and name in names[1]

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ckptctl"):
            for a in node.names:
                if _module_path(f"{node.module}.{a.name}") is not None:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif borrowed(node.module, a.name):
                    out.append(f"line {node.lineno}: from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("ckptctl")})
    attrs = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
    ]
    # ``_dcp_io.fast_crc32 = zlib.crc32``: a bench patching the binding a module uses, not a borrow
    patched = {(n.value.id, n.attr) for n in attrs if isinstance(n.ctx, ast.Store)}
    for node in attrs:
        if (node.value.id, node.attr) not in patched and borrowed(aliases[node.value.id], node.attr):
            out.append(f"line {node.lineno}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return out


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_no_module_reexports(path: Path) -> None:
    module = module_name(path)
    source = path.read_text(encoding="utf-8")
    names = [n for n in reexported(source) if (module, n) not in REEXPORTS_ALLOWED]
    if module in PACKAGE_FACES:
        return
    assert not names, f"{module} re-exports {names}: callers import them from the module that defines them"
    assert not only_reexports(source), f"{module} only re-exports: remove it, import from the real modules"


@pytest.mark.parametrize("path", CALLER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_names_are_imported_from_the_module_that_defines_them(path: Path) -> None:
    borrowed = borrowed_names(path.read_text(encoding="utf-8"))
    assert not borrowed, f"{path.relative_to(ROOT)} imports names through a module that only imports them: {borrowed}"


def test_the_facade_checkers_see_violations() -> None:
    shim = '"""Old home."""\nfrom ckptctl.core.verify.contract import Problem\n__all__ = ["Problem"]\n'
    assert reexported(shim) == ["Problem"] and only_reexports(shim)
    real = 'from ckptctl.core.verify.contract import Problem\n__all__ = ["f"]\ndef f() -> Problem: ...\n'
    assert reexported(real) == [] and not only_reexports(real)
    # runroot.inspect imports Problem's module as `v`, and scan_root's helpers import names:
    # reaching a name through a module that merely imported it is caught, either way.
    assert borrowed_names("from ckptctl.runroot.inspect import DcpIndex\n") == [
        "line 1: from ckptctl.runroot.inspect import DcpIndex"
    ]
    assert borrowed_names("from ckptctl.runroot import inspect as i\ni.DcpIndex\n") == [
        "line 2: i.DcpIndex (ckptctl.runroot.inspect)"
    ]
    assert borrowed_names("from ckptctl.runroot.inspect import scan_root\nfrom ckptctl.core.verify import dcp\n") == []


# -- one name per module, no circles ---------------------------------------------------------------


def module_aliases(source: str, module: str, is_package: bool = False) -> dict[str, str]:
    """Local name -> ckptctl module, for every import in ``source`` that binds a module."""
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            if target.startswith("ckptctl"):
                out.update(
                    {a.asname or a.name: f"{target}.{a.name}" for a in node.names if _module_path(f"{target}.{a.name}")}
                )
        elif isinstance(node, ast.Import):
            out.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("ckptctl")})
    return out


def test_no_alias_names_two_different_modules() -> None:
    """``core`` meaning core.recover in one file and core.watch in the next reads as one thing."""
    seen: dict[str, dict[str, list[str]]] = {}
    for path in ALL_MODULES:
        module = module_name(path)
        aliases = module_aliases(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        for alias, target in aliases.items():
            seen.setdefault(alias, {}).setdefault(target, []).append(module)
    reused = {alias: targets for alias, targets in seen.items() if len(targets) > 1}
    assert not reused, f"one local name for different modules (give each import its own name): {reused}"


def import_graph() -> dict[str, set[str]]:
    """Module -> the ckptctl modules it imports (anywhere: module level, functions, TYPE_CHECKING)."""
    modules = {module_name(p) for p in ALL_MODULES}
    graph: dict[str, set[str]] = {}
    for path in ALL_MODULES:
        module = module_name(path)
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(node, module, path.name == "__init__.py")
                subs = {f"{target}.{a.name}" for a in node.names} & modules
                # "from ckptctl.training import _dcp_io" needs the submodule, not the package's face
                targets.update(subs if len(subs) == len(node.names) else {target, *subs})
        graph[module] = (targets & modules) - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    """A circle (even through a function-level or type-only import) means two modules are one."""
    found = circles(import_graph())
    assert not found, f"import circles (move the shared part to a module both import): {found}"


def test_the_circle_and_alias_checkers_see_violations() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    src = "from ckptctl.core.recover import decisions as core\nfrom ckptctl.core import names\n"
    assert module_aliases(src, "ckptctl.ops.x") == {
        "core": "ckptctl.core.recover.decisions",
        "names": "ckptctl.core.names",
    }


# -- core is grouped by domain ----------------------------------------------------------------------

#: The rooms of ``ckptctl/core`` (docs/architecture.md has the table); a new domain adds one here.
CORE_SUBPACKAGES = {"classify", "config", "launch", "recover", "rollback", "verify", "watch"}
#: Modules at the top of ``core``: only the names every domain shares.
CORE_TOP_LEVEL = {"__init__.py", "names.py"}


def test_core_is_grouped_into_domain_subpackages() -> None:
    core = PKG / "core"
    rooms = {p.name for p in core.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == CORE_SUBPACKAGES, "a new core domain: add it to CORE_SUBPACKAGES and docs/architecture.md"
    flat = {p.name for p in core.glob("*.py")}
    assert flat == CORE_TOP_LEVEL, f"core/ is grouped by domain; put {sorted(flat - CORE_TOP_LEVEL)} in a subpackage"
    nested = [str(p.relative_to(core)) for room in rooms for p in (core / room).iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert not nested, f"one level of rooms in core: {nested}"


@pytest.mark.parametrize("room", sorted(CORE_SUBPACKAGES))
def test_core_subpackage_inits_hold_only_a_docstring(room: str) -> None:
    """Callers import from the module that defines a name; a room's ``__init__`` only says what is where."""
    body = ast.parse((PKG / "core" / room / "__init__.py").read_text(encoding="utf-8")).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), room


# -- backends are strategies: nobody else branches on a backend's name ---------------------------------

#: Where backend names may be compared: the backends themselves.
BACKEND_HOME = PKG / "backends"


def _backend_names() -> set[str]:
    """The registry's names, read from its ``BACKENDS`` dict and each backend module's ``NAME``."""
    names: set[str] = set()
    for path in BACKEND_HOME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                names.add(node.value.value)
    return names


#: Names of values that hold a launch backend's name (``rdzv_backend`` is torchrun's, not ours).
_BACKEND_WORDS = {"backend", "backend_name"}


def _mentions_backend(node: ast.expr) -> bool:
    """``backend``, ``config.launch.backend``, ``job.get("backend")``, ``job["backend"]``."""
    if isinstance(node, ast.Name):
        return node.id in _BACKEND_WORDS
    if isinstance(node, ast.Attribute):
        return node.attr in _BACKEND_WORDS
    if isinstance(node, ast.Call):
        return any(isinstance(a, ast.Constant) and a.value == "backend" for a in node.args) or (
            isinstance(node.func, ast.Attribute) and _mentions_backend(node.func.value) and node.func.attr == "get"
        )
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "backend"
    return False


def backend_name_branches(source: str, names: set[str]) -> list[str]:
    """Comparisons (and ``match`` cases) that test a backend's name: against one of ``names``,
    or a value called ``backend`` against any string."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            consts = [
                c.value
                for side in sides
                for c in ([side] if isinstance(side, ast.Constant) else getattr(side, "elts", []))
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
            if any(c in names for c in consts) or (consts and any(_mentions_backend(x) for x in sides)):
                out.append((node.lineno, f"compares a backend name ({', '.join(map(repr, consts))})"))
        elif isinstance(node, ast.Match):
            for case in node.cases:
                lits = [
                    p.value.value
                    for p in ast.walk(case.pattern)
                    if isinstance(p, ast.MatchValue) and isinstance(p.value, ast.Constant)
                ]
                if any(v in names for v in lits):
                    out.append((case.pattern.lineno, "matches a backend name"))
    return [f"line {n}: {what}" for n, what in sorted(out)]


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: module_name(p))
def test_only_the_backends_package_compares_backend_names(path: Path) -> None:
    """Adding a backend is one module plus one registry line: nothing else may ``== "slurm"``."""
    if BACKEND_HOME in path.parents:
        return
    found = backend_name_branches(path.read_text(encoding="utf-8"), _backend_names())
    assert not found, (
        f"{module_name(path)} branches on a backend's name; ask the backend (ckptctl.backends.registry) instead: {found}"
    )


def test_the_backend_name_checker_sees_violations() -> None:
    names = _backend_names()
    assert {"local", "slurm"} <= names
    src = (
        "def f(config, job, kind, doc):\n"
        "    if config.launch.backend == 'slurm':\n"
        "        pass\n"
        "    if job.get('backend') != 'kubernetes':\n"
        "        pass\n"
        "    if kind in ('local', 'x'):\n"
        "        pass\n"
        "    match kind:\n"
        "        case 'slurm':\n"
        "            pass\n"
        "    return doc['kind'] == 'none' and kind == 'static'\n"
    )
    assert backend_name_branches(src, names) == [
        "line 2: compares a backend name ('slurm')",
        "line 4: compares a backend name ('kubernetes')",
        "line 6: compares a backend name ('local', 'x')",
        "line 9: matches a backend name",
    ]
