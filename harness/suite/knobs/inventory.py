"""Which packing knobs MB exposes at a commit: read from MB's own source, never hand-listed.

A knob is a field of a configuration dataclass, or a parameter of a dataset class's
``__init__`` or of a collate / batch function, whose name says it shapes packed output (see
:func:`relevant`: packing, padding, sequence lengths and boundaries, the loss policy, the
parallel sizes and batch sizes the packing rules read). The scan parses (never imports) every
module under MB's ``data/`` plus the training config, the GPT provider and the step functions,
so it works on any commit and lists a knob MB adds the day it lands. The suite process adds
what the AST cannot see (fields a class inherits from megatron-core) when the class is
imported, see :mod:`harness.suite.knobs.spy`.

A parameter MB takes and never reads (stored on ``self`` under a name no code of the package
reads, or not used at all) is marked ``read=False`` by :func:`scan`: no case can observe what
it does, so the coverage table says so instead of counting it as a gap cases could close
(``GPTSFTDataset.min_seq_length``, documented as the minimum example length, is stored and
never read). The test is conservative: any attribute read of the stored name, or the name as a
string (``getattr``, keyword dictionaries), anywhere in the package counts as a read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

from harness.records.knobs import FACTORY, Knob
from harness.suite.knobs import unread

# a name is a packing knob when one of its words is one of these, or it is one of the exact names
WORDS = frozenset({"pack", "packed", "packing", "pad", "padding", "padded", "mult", "multiple", "eod", "truncation"})
PHRASES = ("seq_length", "seqlen", "max_length", "cu_seqlens", "per_token_loss", "answer_only", "eos_id", "drop_last")
EXACT = frozenset(
    {
        "context_parallel_size",
        "eval_context_parallel_size",
        "tensor_model_parallel_size",
        "sequence_parallel",
        "pipeline_model_parallel_size",
        "micro_batch_size",
        "global_batch_size",
    }
)
# other concerns that share a word: vocabulary padding, RoPE scaling, MoE capacity padding, muP multipliers
NOT_PACKING = ("vocab", "interpolation", "moe_", "mup_", "validation_sets")
SCANNED = ("data", "training/config.py", "training/gpt_step.py", "training/vlm_step.py", "models/gpt_provider.py")
FUNCTION = re.compile(r"collate|get_batch|pack|pad|partition")


def relevant(name: str, annotation: str = "") -> bool:
    """A packing knob: its words say so (see :data:`WORDS`), and it is a setting, not a tensor."""
    if "Tensor" in annotation or any(w in name for w in NOT_PACKING):
        return False
    return name in EXACT or bool(WORDS & set(name.split("_"))) or any(p in name for p in PHRASES)


def _text(node: ast.AST | None) -> str:
    return ast.unparse(node) if node is not None else ""


def _field_default(value: ast.expr | None) -> str | None:
    """A dataclass field's default as source text; ``field(default=...)`` unwrapped, a factory
    ``<factory>``, ``field()`` without either: required (None)."""
    if value is None:
        return None
    if isinstance(value, ast.Call) and _text(value.func).endswith("field"):
        for kw in value.keywords:
            if kw.arg == "default":
                return _text(kw.value)
            if kw.arg == "default_factory":
                return FACTORY
        return None
    return _text(value)


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in _text(d) for d in node.decorator_list)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, str, str | None]]:
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, _text(a.annotation), _text(d) if d is not None else None) for a, d in zip(positional, defaults)]
    out += [
        (a.arg, _text(a.annotation), _text(d) if d is not None else None)
        for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]
    return [p for p in out if p[0] not in ("self", "cls")]


def _class_knobs(module: str, node: ast.ClassDef) -> list[Knob]:
    out = []
    if _is_dataclass(node):
        for stmt in node.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and "ClassVar" not in _text(stmt.annotation)
            ):
                name = stmt.target.id
                if relevant(name, _text(stmt.annotation)):
                    out.append(Knob(module, node.name, name, _text(stmt.annotation), _field_default(stmt.value)))
        return out
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            out += [Knob(module, f"{node.name}.__init__", n, a, d) for n, a, d in _params(stmt) if relevant(n, a)]
    return out


def scan_module(module: str, source: str) -> list[Knob]:
    """The knobs one MB module declares (classes and module-level functions)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # a module that does not parse is the suites' failure to report, not the inventory's
    out: list[Knob] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out += _class_knobs(module, node)
        elif isinstance(node, ast.FunctionDef) and FUNCTION.search(node.name) and not node.name.startswith("_"):
            out += [Knob(module, node.name, n, a, d) for n, a, d in _params(node) if relevant(n, a)]
    return out


def _files(package: Path) -> list[Path]:
    out: list[Path] = []
    for rel in SCANNED:
        path = package / rel
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return out


def _stored_only(module: str, source: str, knobs: list[Knob]) -> dict[str, unread.StoredAs]:
    """Per parameter knob of ``module`` its function reads only to store (see :mod:`harness.suite.knobs.unread`)."""
    by_owner: dict[str, list[str]] = {}
    for k in knobs:
        by_owner.setdefault(k.owner, []).append(k.name)
    functions: list[tuple[str, ast.FunctionDef]] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            functions += [(f"{node.name}.__init__", s) for s in node.body if isinstance(s, ast.FunctionDef)]
        elif isinstance(node, ast.FunctionDef):
            functions.append((node.name, node))
    out: dict[str, unread.StoredAs] = {}
    for owner, fn in functions:
        if owner in by_owner and (fn.name == "__init__" or owner == fn.name):
            for param, attrs in unread.stored_only(fn, by_owner[owner]).items():
                out[f"{module}:{owner}.{param}"] = {param: attrs}
    return out


def scan(package: Path) -> list[Knob]:
    """Every packing knob of the ``megatron/bridge`` package at ``package`` (sorted by key), each
    parameter MB never reads marked ``read=False``."""
    out: list[Knob] = []
    stored: dict[str, unread.StoredAs] = {}
    for path in _files(package):
        rel = path.relative_to(package).with_suffix("")
        module = ".".join(("megatron", "bridge", *rel.parts)).removesuffix(".__init__")
        source = path.read_text(encoding="utf-8", errors="replace")
        knobs = scan_module(module, source)
        out += knobs
        if knobs:
            stored |= _stored_only(module, source, knobs)
    never = unread.unread(package, stored)
    return sorted({replace(k, read=False) if k.key in never else k for k in out}, key=lambda k: k.key)
