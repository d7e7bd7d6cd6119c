"""Where a known MB bug lives: a signature of its code, checked against the MB under test.

A known-bug entry scoped by version (``==0.6.2``) says nothing at a source checkout of main
(version ``0.7.0``): the bug's cases came back there as plain fails with no hint, and the entry
asked to be removed while the code was still in MB. A bug is a piece of code, so an entry names
it (``code`` in ``fixtures/known_failures.json``), and the entry applies wherever that code is:

* ``{"file": "bridge/data/packing/gpt_sft.py", "contains": "loss_mask[tokens == self.tokenizer.eos_id] = 0"}``:
  the text is in the file (whitespace does not count: a statement re-wrapped is the same code);
* ``{"file": ..., "function": "GPTSFTPackedDataset._build_loss_mask", "fingerprint": "..."}``: the
  function's body has that normalised AST fingerprint (:func:`fingerprint`; line numbers,
  comments, docstrings and formatting do not count, so moving the code keeps the bug known).

Paths start at the ``megatron`` namespace: ``bridge/...`` is the MB under test, ``core/...`` the
megatron-core it imports (a bug of megatron-core that MB's path reaches). An entry applies where
*all* its signatures are present (a bug made of two pieces needs both). Code that moved to
another file is still found: when the named file lacks it, every file of that package is
searched. A signature is *present* (the bug is here), *gone* (the code is not in this MB: fixed,
or moved out of reach), or unknown (no source to read: the entry's versions decide, as before).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CodeSignature:
    """One piece of MB code a known bug is made of (see the module docstring)."""

    file: str
    contains: str | None = None
    function: str | None = None
    fingerprint: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> CodeSignature:
        sig = cls(
            file=str(doc["file"]),
            contains=doc.get("contains"),
            function=doc.get("function"),
            fingerprint=doc.get("fingerprint"),
        )
        if (sig.contains is None) == (sig.function is None) or (sig.function is None) != (sig.fingerprint is None):
            raise ValueError(f"code signature of {sig.file}: give contains, or function with fingerprint")
        return sig

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def describe(self) -> str:
        return f"{self.file} {self.function}()" if self.function else f"{self.file} `{self.contains}`"

    def present_in(self, roots: Mapping[str, Path]) -> bool | None:
        """Is this code in the package its path starts with (``roots``: ``bridge`` -> MB's
        ``megatron/bridge`` directory, ``core`` -> megatron-core's)? None: that package unknown."""
        top, _, rest = self.file.partition("/")
        package = roots.get(top)
        if package is None or not package.is_dir():
            return None
        named = package / rest
        if named.is_file() and self._in(named):
            return True
        return any(self._in(p) for p in _sources(str(package)) if p != named)

    def _in(self, path: Path) -> bool:
        text = _text(str(path))
        if self.contains is not None:
            return _normal(self.contains) in _normal(text)
        assert self.function is not None
        leaf = self.function.rsplit(".", 1)[-1]
        if f"def {leaf}" not in text:
            return False
        return self.fingerprint in _functions(str(path)).get(self.function, ())


def fingerprint(node: ast.AST) -> str:
    """A function's body, normalised: its AST without positions or its docstring, hashed."""
    body = list(getattr(node, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    dumped = "\n".join(ast.dump(stmt, include_attributes=False) for stmt in body)
    return hashlib.sha256(dumped.encode()).hexdigest()[:16]


def fingerprint_of(path: Path, function: str) -> str:
    """The fingerprint of ``function`` (``Class.method`` or ``name``) in ``path``; KeyError if absent."""
    found = _functions(str(path)).get(function)
    if not found:
        raise KeyError(f"no function {function} in {path}")
    return found[0]


def _normal(text: str) -> str:
    return "".join(text.split())


@functools.cache
def _text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@functools.cache
def _sources(package: str) -> tuple[Path, ...]:
    return tuple(sorted(Path(package).rglob("*.py")))


@functools.cache
def _functions(path: str) -> dict[str, tuple[str, ...]]:
    """Qualified function name -> fingerprints of its definitions in the file."""
    try:
        tree = ast.parse(_text(path))
    except SyntaxError:
        return {}
    found: dict[str, list[str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.setdefault(name, []).append(fingerprint(child))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return {k: tuple(v) for k, v in found.items()}
