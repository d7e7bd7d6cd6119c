"""The dataset's life as dimensions of the offline exploration space: a re-prepared root, every split.

A hand-written case of ``offline_packed_dataset`` names one knob changed between two preparations
into one root and one pair of splits; here the offline data space (suites/_explore.py) draws them
on top of any drawn data and knobs, so a stale pack or a split packed from the wrong rows is looked
for where data, knobs and the dataset's history meet:

* ``reprepared``: the root was prepared before with one knob that decides the packs set otherwise
  (the pack size, the multiple, the loss, the truncation side, the tokenizer). MB must pack again:
  the case's rows hold its examples as MB's preparation reads them for a fresh root. (Not the
  fresh root's rows themselves: before 0.6 the packing order follows numpy's global RNG, which an
  earlier preparation in the same process moves, and a validation split's metadata may raise the
  static ``max_seqlen`` bound.)
* ``loader``: MB's loader of that kind over the rows for ``epochs`` epochs, restarted from a
  checkpoint after ``resume`` steps, held by ``data_loaders``' contract (suites/_epochs.py): every
  row once per epoch, padding never trains, a restart reads what the uninterrupted run reads.
* ``validation``: the validation split is prepared into the same root from other rows; its packed
  rows hold that split's examples as MB's preparation reads them for a fresh root (held by the
  oracle there), and the metadata has one entry per split.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.records.impact import Impact, ImpactFailure, fail
from harness.records.oracle import InvariantFailure
from harness.suite.adapters import rules, sft
from harness.suite.oracle import corpus
from suites import _epochs, _sftcases

# the knob set otherwise at the earlier preparation ("": none, a fresh root)
KNOBS = ("seq", "mult", "full_loss", "truncation_method", "tokenizer")


def previous(case: Any) -> Any:
    """The configuration ``case``'s root was prepared with before (``case.reprepared`` set otherwise)."""
    knob = case.reprepared
    if knob == "seq":
        change: dict[str, Any] = {"seq": case.seq * 2 if case.seq <= 64 else case.seq // 2}
    elif knob == "mult":
        change = {"mult": 1 if case.mult > 1 else 2}
    elif knob == "full_loss":
        change = {"full_loss": not case.full_loss}
    elif knob == "truncation_method":
        change = {"truncation_method": "left" if case.truncation_method != "left" else "right"}
    elif knob == "tokenizer":
        change = {"other_tokenizer": not case.other_tokenizer}
    else:
        raise ValueError(f"unknown re-preparation knob {knob!r}; known: {KNOBS}")
    if knob == "truncation_method" and case.kind == "chat":
        change = {"full_loss": not case.full_loss}  # chat preprocessing has no truncation side
    return dataclasses.replace(case, id=case.id + "-before", **change)


def validation_case(case: Any) -> Any:
    """The validation split's rows: the same shape of data, other examples and fewer of them."""
    return dataclasses.replace(case, id=case.id + "-validation", seed=case.seed + 500, n=max(1, case.n // 2))


def check(case: Any) -> dict[str, Any]:
    """Hold ``case``'s drawn life dimensions (raises on a violation); what they add to the golden."""
    out: dict[str, Any] = {}
    if case.loader:  # several epochs of MB's loader over the rows of a fresh root, and a restart
        out.update(_check_loader(case))
    if not (case.reprepared or case.validation):
        return out
    work = Path(tempfile.mkdtemp(prefix="harness-explore-life-"))
    try:
        valid = validation_case(case) if case.validation and _fits(validation_case(case)) else None
        root = (
            _sftcases.split_root(work / "root", case, valid)
            if valid is not None
            else corpus.write_dataset_root(work / "root", case.corpus)
        )
        if case.reprepared:
            try:
                sft.build_sft(_sftcases.request(previous(case), root))
            except Exception as exc:  # the earlier run stopped (a drawn configuration of its own): what it left
                if not _sftcases.raised_in_mb(exc):
                    raise
                out["before"] = f"the earlier preparation stopped: {type(exc).__name__}"
        build = sft.build_sft(_sftcases.request(case, root, validation=valid is not None))
        if case.reprepared:
            _, again = _sftcases.collated_rows(build.train)
            _raise_held(case, again, f"prepared again after {case.reprepared} was set otherwise")
        if valid is not None:
            out["validation_rows"] = _check_validation(case, valid, build)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fits(case: Any) -> bool:
    """Does one example of ``case`` fit its pack? (A split with none is the training path's rule:
    MB skips every example and must refuse the split by a check, judged by the space's own check.)"""
    return any(ex.length <= case.seq for ex in _sftcases.reference(case))


def _check_loader(case: Any) -> dict[str, Any]:
    """``case.epochs`` epochs of MB's ``case.loader`` loader and a restart after ``case.resume``
    steps, held by suites/_epochs.py; a "batch" loader that keeps only complete global batches
    over fewer rows than one must be refused by MB's documented rule."""
    rows = len(_sftcases.built(case).build.train)
    drop_last = not case.keep_last
    resumes = [case.resume] if case.resume else []
    try:
        _epochs.check_life(case, case.loader, drop_last, 1, 1, case.loader_batch, case.epochs, resumes)
    except (InvariantFailure, ImpactFailure):
        raise
    except Exception as exc:
        if not (drop_last and case.loader == "batch" and rows < case.loader_batch):
            raise
        rules.require_refused_by(
            exc, rules.Rule.DROP_LAST_NEEDS_A_GLOBAL_BATCH, f"{rows} packed row(s), a batch of {case.loader_batch}"
        )
        return {"loader": "refused: no complete global batch"}
    return {}


def _raise_held(case: Any, rows: list[Any], what: str) -> None:
    """Raise the oracle's violations of ``rows`` against ``case``'s examples as MB's packing
    preparation reads them when it packs ``case`` into a fresh root (the space's own reference:
    with alignment its runtime cap is the pack size, one token more than an unpacked run at that
    sequence length keeps), if any."""
    b = dataclasses.replace(_sftcases.built(case), rows=rows)
    b.report = _sftcases.compare(case, b.examples, rows, b.special_ids)
    _how, report, _examples = _sftcases.at_the_cap(b)
    if not report.ok:
        raise InvariantFailure(f"{what}: {report.summary()}", report.violations)


def _check_validation(case: Any, valid: Any, build: sft.SFTBuild) -> int:
    """The validation split's rows held to its examples by MB's own unpacked path; one metadata
    entry per split. Returns its row count (golden)."""
    if build.valid is None:
        raise fail(Impact.DROPS_TRAINED_TOKEN, "do_validation: MB's builder built no validation split")
    _, rows = _sftcases.collated_rows(build.valid)
    _raise_held(valid, rows, "validation split")
    meta = build.metadata_path or build.packed_files.get("metadata")
    if meta is not None and Path(meta).is_file():
        entries = json.loads(Path(meta).read_text())
        if not isinstance(entries, list) or len(entries) != 2:
            raise fail(Impact.CRASH, f"one metadata entry per split prepared (2), got {entries!r}"[:400])
    return len(rows)
