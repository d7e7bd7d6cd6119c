"""Whether any code MB runs can read a field MB's class inherits from megatron-core.

Why: ``GPTModelProvider`` inherits its fields from megatron-core's ``TransformerConfig``, and
some of them are read only by code MB never calls. ``max_seqlen_per_dp_cp_rank`` is read by
megatron-core's ``HybridCPDataLoaderWrapper`` alone, which only Megatron-LM's own trainer
(``megatron.training.pretrain``) reaches; MB trains with its own loop. No value a case
sets there can change what MB does, so the coverage table must say so (and why) rather than list a
gap a case could close. When MB starts calling such code, the knob turns back into an ordinary one
by itself.

The proof is a static reference closure over the installed ``megatron`` namespace, conservative
on purpose (a read knob marked unread would hide a real gap):

- the *readers* of a name are the top-level definitions (a class with all its methods counts as
  one) whose code mentions it: an attribute load, a bare name, a keyword or parameter of that
  name, or a string containing it. Only the field's own declaration and docstrings are not reads;
- a definition is *reached* when MB's package (``megatron.bridge``) refers to it, or a reached
  definition does. References resolve through imports (``from m import f as g``, ``import m``,
  ``m.f``, relative imports, re-exports in a package ``__init__``) and, in ``f``'s own module,
  its bare name; a string equal to the name in a module bound to ``f``'s module counts too
  (``getattr(module, "f")``);
- anything the closure cannot follow counts as reached: a read or a reference in module-level
  code (it runs on import), a decorated definition (a decorator may register it anywhere).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "megatron.bridge"
MODULE_LEVEL = ""  # the name of a module's own body as a definition

Def = tuple[str, str]  # (module, top-level name); name MODULE_LEVEL: the module's body


@dataclass(frozen=True)
class OffPath:
    """A name only code MB never reaches reads: the readers, and the entry points they hang from."""

    readers: tuple[str, ...]  # module.name of each reading definition
    entries: tuple[str, ...]  # module.name of the definitions nothing refers to, at the top of the chains

    def why(self) -> str:
        via = f", reached only from {', '.join(self.entries)}" if set(self.entries) != set(self.readers) else ""
        return f"read only by {', '.join(self.readers)}{via}, which MB never calls"


class Namespace:
    """The modules of the ``megatron`` namespace: every portion of it (``megatron.bridge`` from an MB
    source tree and ``megatron.core`` installed elsewhere are two directories of one namespace)."""

    def __init__(self, portions: Iterable[Path]) -> None:
        self._texts: dict[str, str] = {}
        self._packages: set[str] = set()
        self._trees: dict[str, ast.Module | None] = {}
        self._imports: dict[str, list[ast.Import | ast.ImportFrom]] = {}
        for portion in portions:
            for path in sorted(portion.rglob("*.py")):
                parts = path.relative_to(portion.parent).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                    self._packages.add(".".join(parts))
                self._texts.setdefault(".".join(parts), path.read_text(encoding="utf-8", errors="replace"))

    def modules_mentioning(self, *words: str) -> list[str]:
        patterns = [re.compile(rf"\b{re.escape(w)}\b") for w in words]
        return [
            m
            for m, text in self._texts.items()
            if all(w in text for w in words) and all(p.search(text) for p in patterns)
        ]

    def modules_importing(self, word: str, name: str) -> list[str]:
        """The modules with an import statement that mentions ``word`` and that mention ``name``:
        a module binds another module, or a name from it, only through an import that spells the
        module's last component (``from .training import train``, ``import megatron.training.training``)."""
        spelled = re.compile(rf"(?:\bfrom|\bimport)[^\n]*\b{re.escape(word)}\b|\bimport\s*\([^)]*\b{re.escape(word)}\b")
        return [m for m in self.modules_mentioning(word, name) if spelled.search(self._texts[m])]

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            try:
                self._trees[module] = ast.parse(self._texts[module])
            except SyntaxError:
                self._trees[module] = None
        return self._trees[module]

    def imports(self, module: str) -> list[ast.Import | ast.ImportFrom]:
        """Every import statement of ``module``, at any depth (a function's own imports too)."""
        if module not in self._imports:
            tree = self.tree(module)
            nodes = ast.walk(tree) if tree is not None else ()
            self._imports[module] = [n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
        return self._imports[module]

    def absolute(self, module: str, level: int, name: str | None) -> str:
        """The module a (possibly relative) ``from`` import in ``module`` names."""
        if level == 0:
            return name or ""
        base = module.split(".")
        base = base if module in self._packages else base[:-1]
        base = base[: len(base) - (level - 1)]
        return ".".join([*base, *([name] if name else [])])

    def is_module(self, name: str) -> bool:
        return name in self._texts


def _top_level(tree: ast.Module) -> list[tuple[str, ast.stmt]]:
    """Each top-level statement of ``tree`` with the definition it makes (MODULE_LEVEL: none)."""
    out: list[tuple[str, ast.stmt]] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((stmt.name, stmt))
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            out.append((MODULE_LEVEL, stmt))
    return out


def _docstrings(node: ast.AST) -> set[int]:
    """The string statements in ``node``'s bodies (docstrings, dataclass field docstrings)."""
    scopes = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    bodies = [n.body for n in ast.walk(node) if isinstance(n, scopes)]
    return {id(s.value) for b in bodies for s in b if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)}


def _mentions(stmt: ast.stmt, name: str) -> bool:
    """``stmt`` reads ``name`` in any way the module docstring lists (declarations and docstrings excluded)."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    skip = _docstrings(stmt)
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, (ast.keyword, ast.arg)) and node.arg == name:
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and word.search(node.value)
        ):
            return True
    return False


def _defs_reading(ns: Namespace, name: str) -> set[Def]:
    out: set[Def] = set()
    for module in ns.modules_mentioning(name):
        tree = ns.tree(module)
        if tree is None:
            out.add((module, MODULE_LEVEL))  # cannot tell: count as reached
            continue
        out |= {(module, top) for top, stmt in _top_level(tree) if _mentions(stmt, name)}
    return out


def _bindings(ns: Namespace, module: str, target: Def) -> tuple[set[str], set[str]]:
    """In ``module``: the local names bound to ``target`` itself, and those bound to its module."""
    to_def: set[str] = {target[1]} if module == target[0] else set()
    to_module: set[str] = set()
    for node in ns.imports(module):
        if isinstance(node, ast.ImportFrom):
            source = ns.absolute(module, node.level, node.module)
            for alias in node.names:
                local = alias.asname or alias.name
                if source == target[0] and alias.name == target[1]:
                    to_def.add(local)
                elif f"{source}.{alias.name}" == target[0]:
                    to_module.add(local)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == target[0]:
                    to_module.add(alias.asname or alias.name)
    return to_def, to_module


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _refers(stmt: ast.stmt, to_def: set[str], to_module: set[str], target: Def) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Name) and node.id in to_def and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Attribute) and node.attr == target[1]:
            dotted = _dotted(node)
            if dotted and any(dotted == f"{m}.{target[1]}" for m in to_module):
                return True
        if to_module and isinstance(node, ast.Constant) and node.value == target[1]:
            return True  # getattr(module, "name")
    return False


def _decorated(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and bool(stmt.decorator_list)


def _referrers(ns: Namespace, target: Def) -> tuple[set[Def], bool]:
    """The definitions referring to ``target`` (re-exports as the alias definitions they make), and
    whether something the closure cannot follow does (module-level code)."""
    module, name = target
    last = module.rsplit(".", 1)[-1]
    out: set[Def] = set()
    candidates = set(ns.modules_importing(last, name)) | {module}
    for other in sorted(candidates):
        tree = ns.tree(other)
        if tree is None:
            return out, True
        to_def, to_module = _bindings(ns, other, target)
        if not to_def and not to_module:
            continue
        for top, stmt in _top_level(tree):
            if (other, top) == target:
                continue
            if top == MODULE_LEVEL:  # a module-level import of it makes an alias others may import
                imports = [n for n in ast.walk(stmt) if isinstance(n, ast.ImportFrom)]
                out |= {(other, a.asname or a.name) for n in imports for a in n.names if (a.asname or a.name) in to_def}
            if _refers(stmt, to_def, to_module, target):
                if top == MODULE_LEVEL:
                    return out, True
                out.add((other, top))
    return out - {target}, False


def off_path(ns: Namespace, name: str) -> OffPath | None:
    """``None`` when code MB reaches may read ``name``; otherwise its readers and their entry points."""
    readers = _defs_reading(ns, name)
    seen: set[Def] = set()
    entries: set[Def] = set()
    todo = sorted(readers)
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        module, top = d
        tree = ns.tree(module)
        if module.startswith(BRIDGE) or top == MODULE_LEVEL or tree is None:
            return None
        if any(t == top and _decorated(s) for t, s in _top_level(tree)):
            return None
        referrers, unfollowable = _referrers(ns, d)
        if unfollowable:
            return None
        if not referrers:
            entries.add(d)
        todo += sorted(referrers - seen)
    if not readers:
        return None  # nothing reads it at all: the unread check of MB's own parameters covers that case
    return OffPath(tuple(f"{m}.{t}" for m, t in sorted(readers)), tuple(f"{m}.{t}" for m, t in sorted(entries)))
