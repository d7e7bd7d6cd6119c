"""How a drawn case is judged: each exploration space's case held to the checks of its hand-written suite.

The strategies and the case model are in suites/_explore.py (and the spaces' own modules); here
the dispatch from an :class:`~suites._explore.ExploredCase` to the checks of the suite that owns
its path: the offline oracle and the documented shape rule (a world of one, with shards the
``packed_files`` checks), the layouts (``forward_cpu``, ``padding_loss_masks``,
``in_batch_packing``, ``parallel_layouts``), the direct HF SFT path, pretraining, Energon, MIMO and
whole configurations (``config_validation``).
Why apart: what is drawn and how it is named (specs, ids) changes for other reasons than what
judges it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import Untestable
from harness.records.impact import Impact, fail
from harness.suite.adapters import rules
from suites import _sftcases, _shards
from suites._explore import ExploredCase


def _built(case: ExploredCase) -> _sftcases.Built | None:
    """MB's build of ``case``; None when MB refused it by an explicit check because no example fits.

    MB documents that offline packing skips an example longer than the pack. When that leaves
    nothing (every example of MB's unpacked split is longer than the pack: a small split of long
    conversations), there is nothing to pack: an explicit refusal by a check of MB's is the right
    answer, any other exception is a crash of data preparation with no cause the user can read.
    """
    try:
        return _sftcases.built(case)
    except Untestable:
        raise  # a feature this era lacks: never a verdict
    except Exception as exc:
        lengths = [ex.length for ex in _sftcases.reference(case)]
        limit = case.max_single or case.seq  # one example's cap: MB skips an example past it as past the pack
        if any(n <= limit for n in lengths):
            raise
        if rules.raising_check(exc) is not None:
            return None
        raise fail(
            Impact.CRASH,
            f"every example is longer than the {limit}-token {'cap' if case.max_single else 'pack'} (lengths "
            f"{lengths}), so MB's packing skips "
            f"each (documented) and has nothing to pack; it crashed instead of refusing the dataset by a check: "
            f"{type(exc).__name__}: {exc}",
        ) from exc


def check(case: ExploredCase) -> _sftcases.Built | None:
    """Build ``case`` through MB and hold it to the oracle and the documented shape rule (None: MB
    refused a dataset with no example that fits the pack, by an explicit check)."""
    b = _built(case)
    if b is None:
        return None
    if case.pad_to_max_length:
        widths = [len(r.tokens) for r in b.rows]
        if any(w != case.seq for w in widths):
            # a fixed shape is what pipeline parallelism and CUDA graphs rely on: a ragged row crashes them
            raise fail(Impact.CRASH, f"pad_to_max_length pads every packed row to {case.seq}: row widths {widths}")
    _how, report, _held = _sftcases.at_the_cap(b)  # a pack size off the multiple: MB's cap (suites/_sftcases.py)
    report.assert_ok()
    return b


def check_any(case: ExploredCase) -> dict[str, Any]:
    """Hold ``case`` to every check its layout or packing path has (raises on a violation); returns
    what it trains in golden form (change detection only)."""
    if case.config:
        from suites import _explore_config

        return _explore_config.check(case)
    if case.direct:
        from suites import _directsft, _explore_direct

        return _directsft.check(_explore_direct.direct_request(case))
    if case.energon:
        from suites import _explore_energon

        return _explore_energon.check(case)
    if case.mimo:
        from suites import _explore_mimo

        return _explore_mimo.check(case)
    if case.pretrain:
        from suites import _explore_pretrain

        return _explore_pretrain.check(case)
    if case.in_batch:
        from suites import _inbatch

        examples = list(_sftcases.reference(case))
        packed = [
            _inbatch.pack_micro_batch(case, examples[i : i + case.mbs], (case.cp, case.tp, case.sp))
            for i in range(0, len(examples), case.mbs)
        ]
        return {"multiple": packed[0].multiple, "rows": _sftcases.canonical_rows([p.row for p in packed])}
    b = check(case)
    if b is None:
        return {"refused": "no example fits the pack"}
    if case.axis is None:
        golden: dict[str, Any] = {"rows": _sftcases.canonical_rows(b.rows)}
        if case.shards > 1:
            golden["shards"] = _check_shards(case, b)
        if case.reprepared or case.validation or case.loader:
            from suites import _explore_life

            golden.update(_explore_life.check(case))
        return golden
    if case.dp > 1 and case.cp > 1:
        from suites import _dpcp, _layouts

        if len(b.rows) < case.gbs and not case.keep_last:
            return {"refused": f"{len(b.rows)} packed rows make no global batch of {case.gbs}"}
        layout = _dpcp.DPCP(dp=case.dp, cp=case.cp, global_batch_size=case.gbs, drop_last=not case.keep_last)
        world = _dpcp.run_dp_cp(case, layout)
        _layouts.assert_ok(world.violations, f"DP {case.dp} x CP {case.cp} != MB's CP 1 path per data-parallel rank")
        return world.golden
    if case.dp > 1:
        from suites import _dataparallel

        return {"per_rank": _dataparallel.check_padding_per_rank(case, case.dp, case.mbs, case.gbs)}
    from suites import _forward, _layouts

    if case.forward:
        forward = _forward.cpu_offline(case)
        forward.assert_ok()
        return forward.golden
    if case.cp > 1:
        parts = _layouts.run_cp(case, case.cp)
        _layouts.assert_ok(parts.violations, f"CP {case.cp} != MB's CP 1 path")
    else:
        parts = _layouts.run_pp(case, case.pp)
        _layouts.assert_ok(parts.violations, f"PP {case.pp} stages != MB's PP 1 inputs")
    return parts.golden


def _check_shards(case: ExploredCase, b: _sftcases.Built) -> dict[str, Any]:
    """MB's packed set of ``case`` read back from ``case.shards`` Parquet shards (suites/_shards.py)."""
    files = b.build.packed_files
    if "train" not in files:
        raise AssertionError(f"MB's builder names no packed training file to shard: {files}")
    metadata = files.get("metadata") if case.pad_cu_seqlens else None
    work = Path(tempfile.mkdtemp(prefix="harness-explore-shards-"))
    try:
        sizes = _shards.even_sizes(len(b.rows), case.shards)
        _how, _report, examples = _sftcases.at_the_cap(b)  # the examples the rows hold, MB's cap applied
        return _shards.check(case, b.build.train, files["train"], examples, work, sizes, metadata=metadata)
    finally:
        shutil.rmtree(work, ignore_errors=True)
