"""Which parameters MB takes and never reads: a knob no case can observe.

A parameter is *unread* when its function uses it only to store it on ``self``
(``self.min_seq_length = min_seq_length``) under names nothing in the package reads, or not at
all. Why measure it: the coverage goal asks for every knob with its default and another value;
for a parameter MB ignores, no value a case passes changes anything MB does, and the table must
say that rather than list a gap a case could close (or count a case that sets it as proof of
anything). A parameter MB starts reading later turns back into an ordinary knob by itself.

Conservative on purpose (a read knob marked unread would hide a real gap): a read of the stored
attribute anywhere in the package (``obj.min_seq_length``), the parameter's or the attribute's
name as a string (``getattr``, ``kwargs.get``, keyword dictionaries), ``locals()`` in the
function, or a function whose body is only a stub (abstract methods, protocols) all count as
reads. Stores (``x.name = ...``) are not reads.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

StoredAs = dict[str, set[str]]  # parameter -> the self attributes it is stored as (empty: not used at all)


def _is_stub(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return all(
        isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        or (isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s))
        for s in body
    )


def _self_store(node: ast.AST) -> tuple[ast.Name, str] | None:
    """``self.A = p`` (one target, a bare name on the right) as ``(p's Name node, A)``."""
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Attribute)
        and isinstance(node.targets[0].value, ast.Name)
        and node.targets[0].value.id == "self"
        and isinstance(node.value, ast.Name)
    ):
        return node.value, node.targets[0].attr
    return None


def stored_only(fn: ast.FunctionDef | ast.AsyncFunctionDef, params: Iterable[str]) -> StoredAs:
    """The parameters of ``fn`` its body reads only to store them on ``self`` (or never uses)."""
    wanted = set(params)
    if _is_stub(fn) or any(isinstance(n, ast.Name) and n.id == "locals" for n in ast.walk(fn)):
        return {}
    stores: StoredAs = {p: set() for p in wanted}
    stored_names: set[int] = set()
    for node in ast.walk(fn):
        pair = _self_store(node)
        if pair is not None and pair[0].id in wanted:
            stores[pair[0].id].add(pair[1])
            stored_names.add(id(pair[0]))
    for node in ast.walk(fn):
        name = node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else None
        if name in stores and id(node) not in stored_names:
            stores.pop(name)
    return stores


def accessed(package: Path, names: set[str]) -> set[str]:
    """Those of ``names`` the package reads as an attribute (``x.name`` not followed by ``=``) or
    spells as a string, in any of its modules."""
    if not names:
        return set()
    alternatives = "|".join(sorted(map(re.escape, names)))
    pattern = re.compile(rf"""\.({alternatives})\b(?!\s*=(?!=))|["']({alternatives})["']""")
    found: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        found |= {a or b for a, b in pattern.findall(text)}
        if found >= names:
            break
    return found


def unread(package: Path, candidates: dict[str, StoredAs]) -> set[str]:
    """Of ``candidates`` (knob key -> its parameter and stored names, from :func:`stored_only`),
    the keys of the parameters nothing in ``package`` reads."""
    names = {n for stored in candidates.values() for p, attrs in stored.items() for n in (p, *attrs)}
    seen = accessed(package, names)
    return {key for key, stored in candidates.items() if all(not ({p, *attrs} & seen) for p, attrs in stored.items())}
