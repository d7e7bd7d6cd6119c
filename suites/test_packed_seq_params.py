"""Building MCore ``PackedSeqParams`` from a packed batch (``get_packed_seq_params``).

From MB's own batches: every micro-batch MB's packed dataset collates (offline packed SFT
through MB's builder, see suites/_sftcases.py) goes through MB's ``get_packed_seq_params``; what
the params carry (boundaries, padded variants, ``max_seqlen``, dtypes) is checked by the oracle
against MB's own unpacked path, like the collated batch itself, and ``qkv_format`` is ``"thd"``.

Documented legacy contract (hand-made batches in the layout MB's legacy collate emitted, because
current MB no longer collates them but ``get_packed_seq_params`` still accepts them): ``cu_seqlens``
padded with at least one ``-1`` (the legacy collate always appends one; optionally with
``cu_seqlens_argmin``) is stripped of that padding and nothing else; with ``cu_seqlens_unpadded``
the params hold the real-token boundaries in ``cu_seqlens_q`` and the physical ones in
``cu_seqlens_q_padded``; ``max_seqlen`` passes through. No batch without a ``-1`` is made: no MB
producer emits one.

Fast path (MB: "if argmin is not pre-computed in the dataloader, torch.argmin here will incur a
device-to-host synchronization"): with the argmin precomputed, building the params from a batch
whose boundaries are on the device reads nothing back on the host (counted on CPU by
:mod:`harness.suite.adapters.hostsync`); a read is a ``fast-path-contract`` violation, impact
``perf-contract``. MB's own batches are checked the same way.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import forward as fwd
from harness.suite.adapters import hostsync, thd
from harness.suite.oracle.differential import Invariant, InvariantFailure, Violation
from suites import _sftcases
from suites._explain import first_difference, show

pytestmark = pytest.mark.import_group("light")


def _legacy_batch(
    bounds: list[int], sentinels: int, max_seqlen: int, argmin: bool = False, unpadded: list[int] | None = None
) -> dict:
    batch = {
        "cu_seqlens": torch.tensor([bounds + [-1] * sentinels], dtype=torch.int32),
        "max_seqlen": torch.tensor([[max_seqlen]], dtype=torch.int32),
    }
    if argmin:
        batch["cu_seqlens_argmin"] = torch.tensor([[len(bounds)]])
    if unpadded is not None:
        batch["cu_seqlens_unpadded"] = torch.tensor([unpadded + [-1] * sentinels], dtype=torch.int32)
    return batch


@pytest.mark.parametrize(
    "bounds,sentinels,argmin",
    [
        ([0, 5, 9, 12], 2, False),
        ([0, 5, 9, 12], 2, True),
        ([0, 7], 5, False),
        ([0, 3, 4, 10, 16, 31, 32], 1, True),
    ],
    ids=["3seq-2sentinels", "3seq-2sentinels-argmin", "1seq-5sentinels", "6seq-1sentinel-argmin"],
)
def test_offline_sentinel_stripped(golden, bounds, sentinels, argmin):
    max_seqlen = max(b - a for a, b in itertools.pairwise(bounds))
    params = thd.packed_seq_params(_legacy_batch(bounds, sentinels, max_seqlen, argmin))
    assert params["qkv_format"] == "thd"
    tags = ("legacy-keys", "no-sentinel" if sentinels == 0 else "sentinel")
    violations = [
        Violation(
            Invariant.LOGICAL_BOUNDARIES,
            0,
            None,
            bounds,
            params[key],
            f"{key}: -1 padding stripped, every real boundary kept",
            tags,
        )
        for key in ("cu_seqlens_q", "cu_seqlens_kv")
        if params[key] != bounds
    ]
    if params["max_seqlen_q"] != max_seqlen:
        violations.append(Violation(Invariant.MAX_SEQLEN, 0, None, max_seqlen, params["max_seqlen_q"], "", tags))
    if argmin:
        violations += _host_reads(_legacy_batch(bounds, sentinels, max_seqlen, argmin))
    if violations:
        raise InvariantFailure("\n".join(v.text() for v in violations), violations)
    golden.check(params)


def _host_reads(batch: dict) -> list[Violation]:
    """MB's builder on ``batch`` with its boundaries device-resident: every host read it makes."""
    _, builder = fwd.mb_packed_seq_params.resolved
    with hostsync.count_host_reads() as reads:
        builder(hostsync.place(batch, hostsync.DEVICE_KEYS))
    if not reads:
        return []
    return [
        Violation(
            Invariant.FAST_PATH,
            0,
            None,
            "no host read of a device tensor (what the host needs is precomputed)",
            sorted(set(reads)),
            "get_packed_seq_params synchronises the device every micro-batch",
            ("host-sync",),
        )
    ]


@pytest.mark.parametrize(
    "unpadded,padded",
    [
        ([0, 5, 9, 12], [0, 8, 12, 16]),
        ([0, 1, 2, 3], [0, 4, 8, 12]),
        ([0, 13], [0, 16]),
    ],
    ids=["3seq-mult4", "1token-seqs-mult4", "1seq-mult16"],
)
def test_offline_padded_and_unpadded(golden, unpadded, padded):
    params = thd.packed_seq_params(_legacy_batch(padded, 3, 8, unpadded=unpadded))
    _same_boundaries(unpadded, params["cu_seqlens_q"], "cu_seqlens_q are the real-token boundaries")
    _same_boundaries(padded, params["cu_seqlens_q_padded"], "cu_seqlens_q_padded are the physical boundaries")
    _same_boundaries(padded, params["cu_seqlens_kv_padded"], "cu_seqlens_kv_padded are the physical boundaries")
    golden.check(params)


def _same_boundaries(expected: list[int], got: list[int], rule: str) -> None:
    """Both lists and where they first differ (a bare ``assert ==`` read "Left contains one more
    item: -1 ... Use -v to get more diff", and -v is no option of ``harness run``)."""
    if list(got) != list(expected):
        where = first_difference(expected, got, "boundary")
        raise AssertionError(f"{rule}: {where}; expected {show(expected)}, got {show(got)}")


MB_BATCH_CASES = [
    c
    for c in _sftcases.CASES
    if c.id in ("prompt-mult1", "prompt-mult4", "completion-mult2", "chat-mult8", "chat-mult4-full-loss")
] + _sftcases.FIXED_SHAPE_CASES


@pytest.mark.parametrize("case", MB_BATCH_CASES, ids=[c.id for c in MB_BATCH_CASES])
def test_params_from_mb_batches(golden, case):
    """What MB's builder makes of MB's own collated batches, checked against MB's unpacked path."""
    b = _sftcases.built(case)
    _, builder = fwd.mb_packed_seq_params.resolved
    rows, formats = [], set()
    syncs: list[Violation] = []
    for batch, row in zip(b.batches, b.rows):
        meta = {k: v for k, v in batch.items() if k.startswith(("cu_seqlens", "max_seqlen"))}
        params = builder(meta)
        formats.add(getattr(params, "qkv_format", None))
        rows.append(batch_ops.with_params(row, params))
        if not syncs and ("cu_seqlens_q" in meta or any(k.endswith("argmin") for k in meta)):
            syncs = _host_reads(meta)  # what the host needs MB's collate precomputed: no sync allowed
    assert formats == {"thd"}, f"qkv_format must be 'thd', got {formats}"
    report = _sftcases.compare(case, b.examples, rows, b.special_ids).only(
        _sftcases.differential.BOUNDARY_INVARIANTS | {Invariant.FAST_PATH}
    )
    if syncs:
        report.violations.extend(syncs)
    report.assert_ok()
    golden.check(
        {
            "rows": [
                {k: v for k, v in r.items() if k.startswith(("cu_", "max_"))} for r in _sftcases.canonical_rows(rows)
            ]
        }
    )
