"""Packed files a user names instead of MB's default place: single files, and Parquet shards.

A user who packed once (or elsewhere) points ``PackedSequenceSpecs`` at the packed set:
``packed_train_data_path``, ``packed_val_data_path``, ``packed_metadata_path``. MB documents that it
reads a file that exists there and packs into one that does not; since its Parquet layout, the
training path may also name several shards, by a glob pattern or by their directory. Checked
here, always against MB itself at the same commit: what MB trains from the named files is what
its own packing of the same data gives (and MB's unpacked path per real token, by the oracle),
whatever ``dataset_root`` holds; the user's files stay unchanged; a name that is missing is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from harness import features
from harness.records.impact import Impact, fail
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import packed_artifact, rules, sft
from harness.suite.oracle import corpus
from suites import _mapping, _sftcases, _shards
from suites._explain import first_difference

pytestmark = pytest.mark.import_group("light")


# pre-packed sets a user names: with pad_cu_seqlens the boundary shape comes from the packing metadata
# (so its path is named too); without, only the training and validation files
PREPACKED = [
    _sftcases.CleanCase("user-packed-files-pad-cu-seqlens", seed=72, mult=2, pad_cu_seqlens=True, n=24),
    _sftcases.CleanCase("user-packed-files-plain", seed=74, mult=2, n=24),
]


@functools.cache
def _prepacked(case: _sftcases.SFTCase) -> tuple[sft.SFTBuild, sft.PackedPaths]:
    """MB's packing of ``case`` (training and validation), its files copied where a user keeps them."""
    work = Path(tempfile.mkdtemp(prefix="harness-prepacked-"))
    first = sft.build_sft(_sftcases.request(case, corpus.write_dataset_root(work / "a", case.corpus), validation=True))
    files = first.packed_files
    missing = [k for k in ("train", "validation", "metadata") if k not in files or not files[k].is_file()]
    if missing:
        raise AssertionError(f"MB's packing wrote no {', '.join(missing)} file where its builder says: {files}")
    kept = work / "prepacked"
    kept.mkdir()
    copies = {k: kept / (k + "".join(f.suffixes)) for k, f in files.items()}
    for k, target in copies.items():
        shutil.copyfile(files[k], target)
    # the legacy .npy packed dataset (before parquet) reads its metadata always: part of such a set
    legacy_npy = copies["train"].suffix == ".npy"
    metadata = copies["metadata"] if case.pad_cu_seqlens or legacy_npy else None
    return first, sft.PackedPaths(copies["train"], copies["validation"], metadata)


@pytest.mark.parametrize("case", PREPACKED, ids=[c.id for c in PREPACKED])
def test_packed_files_the_user_names(golden, tmp_path, case):
    """``PackedSequenceSpecs.packed_train_data_path`` / ``packed_val_data_path`` /
    ``packed_metadata_path``: pre-packed files (MB's own packing of one dataset, kept elsewhere) are
    what MB trains and validates on, with the boundary shape their metadata gives, while
    ``dataset_root`` holds other examples: nothing is re-packed and the user's files are unchanged."""
    first, named = _prepacked(case)
    before = {p: p.read_bytes() for p in (named.train, named.validation, named.metadata) if p is not None}
    other = dataclasses.replace(case, seed=case.seed + 1000)  # the dataset_root's own examples differ
    packing = dataclasses.replace(case.packing, paths=named)
    second = sft.build_sft(
        _sftcases.request(
            case, corpus.write_dataset_root(tmp_path / "b", other.corpus), packing=packing, validation=True
        )
    )
    shapes = {}
    for split, mine, theirs in (("training", first.train, second.train), ("validation", first.valid, second.valid)):
        _, want = _sftcases.collated_rows(mine)
        _, got = _sftcases.collated_rows(theirs)
        w, g = _sftcases.canonical_rows(want), _sftcases.canonical_rows(got)
        if g != w:
            raise fail(
                Impact.WRONG_TARGETS,
                f"{split}: MB does not train on the packed file the user named: "
                + first_difference(w, g, "packed row"),
            )
        shape = [len(r.cu_seqlens_q) if r.cu_seqlens_q is not None else None for r in got]
        expected = [len(r.cu_seqlens_q) if r.cu_seqlens_q is not None else None for r in want]
        if shape != expected:
            raise fail(
                Impact.CRASH,
                f"{split}: the static boundary shape does not follow the named metadata file (CUDA graphs "
                "replay a captured shape): " + first_difference(expected, shape, "cu_seqlens length of row"),
            )
        shapes[split] = sorted(set(shape), key=str)
        if split == "training":
            examples = batch_ops.unpacked_examples(first.prep_reference)
            _sftcases.compare(case, examples, got, _sftcases.special_ids(case)).assert_ok()
    changed = [p.name for p, data in before.items() if p.read_bytes() != data]
    assert not changed, f"MB rewrote the packed files the user named: {changed}"
    golden.check({"shapes": shapes, "rows": _sftcases.canonical_rows(_sftcases.collated_rows(second.train)[1])})


def test_a_named_packed_file_that_is_missing_is_refused(tmp_path):
    """A ``packed_train_data_path`` that names no file is refused by ``PackedSequenceSpecs``' own check
    (MB would otherwise pack ``dataset_root`` silently into a file the user believes holds their data)."""
    case = PREPACKED[-1]
    _, named = _prepacked(case)
    gone = tmp_path / ("absent" + "".join(named.train.suffixes))
    packing = dataclasses.replace(case.packing, paths=sft.PackedPaths(gone))
    root = corpus.write_dataset_root(tmp_path / "data", case.corpus)
    try:
        sft.build_sft(_sftcases.request(case, root, packing=packing))
    except Exception as exc:  # attributed, never counted blindly
        rules.require_refused_by(exc, rules.Rule.NAMED_PACKED_FILE_EXISTS, "a missing named packed file")
        return
    raise fail(
        Impact.ACCEPTS_INVALID_CONFIG,
        f"packed_train_data_path names no file ({gone.name}) and MB accepted it"
        + (" and packed dataset_root into it" if gone.exists() else ""),
    )


# shards of MB's packed rows as a user splits a large set: a two-row shard, a three-row one, then the rest
SHARD_SIZES = [2, 3]


@pytest.mark.parametrize("named", ["glob", "directory"])
def test_packed_shards_the_user_names(golden, tmp_path, named):
    """``packed_train_data_path`` naming several packed Parquet shards, by a glob pattern
    (``shard_*.idx.parquet``) or by their directory, as MB documents: MB trains every row of every
    shard exactly once, as from the one file those rows came from; an index MB's batch sampler draws
    (shuffled, across shards and row groups) reads the row an ascending read gives it; every drawn
    row, the padding rows of the last global batch included, is held to the oracle. The order of
    the shards (MB: their sorted names) is in the golden: a different order is a change."""
    case = PREPACKED[-1]
    first, single = _prepacked(case)
    examples = batch_ops.unpacked_examples(first.prep_reference)
    golden.check(_shards.check(case, first.train, single.train, examples, tmp_path, SHARD_SIZES, named))


# what a row's fields mean, for a field that differs between the two loaders
_FIELD_IMPACT = {"tokens": Impact.WRONG_TARGETS, "labels": Impact.WRONG_TARGETS, "position_ids": Impact.WRONG_LOGITS}


def _user_loader(
    case: _sftcases.SFTCase, layout: str, tmp_path: Path, return_cu_seqlen: bool | None, **more: Any
) -> Any:
    """MB's packed dataset class over MB's packed training file of ``case``, as a user's own loader
    constructs it: the Parquet file MB wrote, the same rows as Parquet shards (``shards``: their
    directory) or as a legacy ``.npy`` file."""
    _first, named = _prepacked(case)
    opener = packed_artifact.packed_dataset if layout == "npy" else packed_artifact.packed_parquet_dataset
    path = named.train
    if layout == "npy" and path.suffix != ".npy":
        path = packed_artifact.write_rows_npy(packed_artifact.read_rows(path), tmp_path / "training.npy")
    elif layout != "npy" and path.suffix == ".npy":
        raise features.missing("packed-parquet", "MB packed into one .npy file")
    elif layout == "shards":
        rows = packed_artifact.read_rows(path)
        path = packed_artifact.write_shards(rows, tmp_path / "shards", SHARD_SIZES, row_group_size=2)[0].parent
    return opener(
        path,
        max_seq_length=case.seq,
        metadata=named.metadata if path.suffix == ".npy" else None,
        pad_to_max_length=False,
        pad_cu_seqlens=False,
        tokenizer=_sftcases.load_tokenizer(case.distinct_eod),
        pad_seq_to_mult=case.mult,
        return_cu_seqlen=return_cu_seqlen,
        **more,
    )


@pytest.mark.parametrize("layout", ["npy", "parquet", "shards"])
def test_mapped_epochs_of_every_packed_format(golden, tmp_path, layout):
    """``max_train_samples`` beyond the packed rows (MB's samples mapping) in each packed format a
    user's loader reads, the legacy ``.npy`` file, the Parquet file and Parquet shards: every
    complete epoch of the mapping trains every packed row once, the partial last one distinct rows,
    and a padding index through the mapping trains nothing (suites/_mapping.py)."""
    case = PREPACKED[-1]
    rows = len(packed_artifact.read_rows(_prepacked(case)[1].train))
    asked = 3 * rows - 1
    ds = _user_loader(case, layout, tmp_path, None, max_num_samples=asked)
    golden.check(_mapping.check_mapped_epochs(ds, asked, case, _sftcases.special_ids(case)))


def _trained_difference(want: list[Any], got: list[Any], what: str) -> None:
    """Fail on the first field that trains (tokens, labels, loss mask, position ids) where the rows
    ``got`` differ from ``want``, with what that field's difference does to training."""
    for r, (w_row, g_row) in enumerate(zip(want, got, strict=True)):
        for name in ("tokens", "labels", "loss_mask", "position_ids"):
            w, g = getattr(w_row, name), getattr(g_row, name)
            if w == g:
                continue
            impact = _FIELD_IMPACT.get(name)
            if impact is None:  # the loss mask: which way it moved is the defect
                extra = any(b and not a for a, b in zip(w, g))
                impact = Impact.TRAINS_MASKED_TOKEN if extra else Impact.DROPS_TRAINED_TOKEN
            raise fail(impact, f"row {r}: {name} {what}: " + first_difference(list(w), list(g), "position"))


@pytest.mark.parametrize("layout", ["parquet", "npy"])
def test_a_loader_without_boundaries_keeps_every_other_field(golden, tmp_path, layout):
    """``return_cu_seqlen=False`` (``GPTSFTPackedDataset`` and its Parquet subclass, documented: "should be
    True unless you have a specific use case"): a user's loader of MB's packed file gets batches with
    no THD boundaries, so the model attends over the whole pack as the user chose; every other field
    of every row (tokens, labels, loss mask, position ids) is what the default loader gives, which is
    what MB's builder's loader gives, and the rows hold to MB's unpacked path by the oracle. Boundaries
    returned anyway train nothing wrong: the golden shows that as a change. So does a default loader
    whose boundaries differ from the builder's loader's (MB 0.4.0's builder did not hand
    ``pad_seq_to_mult`` to its Parquet dataset, so it returned no ``cu_seqlens_unpadded``): the
    padded boundaries only add loss-masked padding at each sequence's causal tail."""
    case = PREPACKED[1]
    first, _named = _prepacked(case)
    examples = batch_ops.unpacked_examples(first.prep_reference)
    ids = _sftcases.special_ids(case)
    _, built = _sftcases.collated_rows(first.train)
    batches_on, on = _sftcases.collated_rows(_user_loader(case, layout, tmp_path, None))
    _trained_difference(built, on, f"of MB's {layout} dataset over MB's own packed file differs from the builder's")
    _sftcases.compare(case, examples, on, ids).assert_ok()
    batches_off, off = _sftcases.collated_rows(_user_loader(case, layout, tmp_path, False))
    _trained_difference(on, off, "with return_cu_seqlen=False differs from the default loader's")
    _sftcases.compare(case, examples, off, ids).assert_ok()
    keys = sorted({k for b in batches_off for k in b})
    boundary = sorted(k for k in keys if k.startswith(("cu_seqlens", "max_seqlen")))
    golden.check(
        {
            "keys": keys,
            "boundaries": boundary,
            "rows": len(off),
            "default_keys": sorted(batches_on[0]),
            "default_boundaries_as_builder": _sftcases.canonical_rows(on) == _sftcases.canonical_rows(built),
        }
    )
