"""Impact classes, the hypothetical tier, rule attribution and the host-sync counter (issue 22).

Pure pieces, no MB: each is the part of a verdict a person reads first (what a red costs), and
each can fail: an untyped case, a hypothetical case that fails a run, a rejection blamed on the
wrong rule, a host read that goes uncounted.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import pytest
import torch

from harness.records.impact import Impact, ImpactFailure, fail, parse
from harness.records.machine import Machine
from harness.records.oracle import DEFAULT_IMPACT, Invariant, Violation
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report.junit import _testcase
from harness.report.terminal import print_run_summary
from harness.suite.adapters import hostsync, rules
from harness.suite.outcome import case_impacts


def test_every_invariant_has_a_default_impact_and_values_parse():
    assert set(DEFAULT_IMPACT) == set(Invariant)
    assert Violation(Invariant.ALIGNMENT, 0, None, 4, 3).training_impact is Impact.CRASH
    assert Violation(Invariant.MAX_SEQLEN, 0, None, 4, 9, impact=Impact.PERF_CONTRACT).training_impact.value == (
        "perf-contract"
    )
    assert parse("trains-padding") is Impact.TRAINS_PADDING
    with pytest.raises(ValueError, match="one of: trains-padding"):
        parse("slow")
    assert all(i.label for i in Impact)


def test_a_case_names_its_impacts_from_violations_typed_assertions_or_a_crash():
    vs = [
        {"invariant": "alignment", "impact": "crash"},
        {"invariant": "padding-never-trains", "impact": "trains-padding"},
    ]
    assert case_impacts(Verdict.FAIL, "", None, vs) == ["crash", "trains-padding"]
    with pytest.raises(ImpactFailure) as info:
        raise fail(Impact.ACCEPTS_INVALID_CONFIG, "rule gone")
    assert case_impacts(Verdict.FAIL, "assertion failed: rule gone", info, []) == ["accepts-invalid-config"]
    assert case_impacts(Verdict.FAIL, "Megatron raised TypeError: x", None, []) == ["crash"]
    assert case_impacts(Verdict.FAIL, "broken: timeout", None, []) == ["crash"]
    assert case_impacts(Verdict.FAIL, "assertion failed: untyped", None, []) == []  # said, not guessed
    assert case_impacts(Verdict.PASS, "", None, vs) == []


def _run(*cases: CaseResult) -> RunResult:
    return RunResult("r", {"kind": "installed"}, {}, Machine(), "full", cases=list(cases))


def test_the_hypothetical_tier_never_fails_a_run_and_is_reported_apart():
    ok = CaseResult("s::a", "s", Verdict.PASS)
    hyp = CaseResult("s::b[e]", "s", Verdict.FAIL, message="x", impacts=["trains-padding"], tier="hypothetical")
    run = _run(ok, hyp)
    assert run.exit_code() == 0 and run.documented == [ok]
    assert run.counts()["fail"] == 0 and run.counts(hypothetical=True)["fail"] == 1
    out = io.StringIO()
    print_run_summary(run, out)
    text = out.getvalue()
    assert "hypothetical tier" in text and "FAIL s::b" not in text
    real = CaseResult("s::c", "s", Verdict.FAIL, message="boom", impacts=["drops-trained-token"])
    assert _run(ok, real).exit_code() == 1
    out = io.StringIO()
    print_run_summary(_run(real), out)
    assert "FAIL s::c [impact: drops-trained-token]" in out.getvalue()
    assert CaseResult.from_json(hyp.to_json()) == hyp


def test_junit_failure_type_is_the_impact_and_hypothetical_cases_are_skipped():
    el = _testcase(CaseResult("s::c", "s", Verdict.FAIL, message="m", impacts=["wrong-logits"]))
    assert el.find("failure").get("type") == "wrong-logits"
    untyped = _testcase(CaseResult("s::d", "s", Verdict.FAIL, message="m"))
    assert untyped.find("failure").get("type") == "unclassified"
    hyp = _testcase(CaseResult("s::e", "s", Verdict.FAIL, message="m", tier="hypothetical"))
    assert hyp.find("failure") is None and hyp.find("skipped").get("type") == "hypothetical"
    assert "wrong-logits" in ET.tostring(el, encoding="unicode")


def _raise_in(filename: str, source: str) -> BaseException:
    code = compile(source, filename, "exec")
    try:
        exec(code, {})
    except Exception as exc:
        return exc
    raise AssertionError("the snippet did not raise")


def test_a_rejection_is_attributed_by_message_and_by_mb_raising_statement(tmp_path):
    mb = tmp_path / "megatron" / "bridge" / "training"
    mb.mkdir(parents=True)
    cfg = mb / "config.py"
    cfg.write_text('raise ValueError("enable_offline_packing and enable_in_batch_packing are mutually exclusive.")\n')
    exc = _raise_in(str(cfg), cfg.read_text())
    who = rules.attribute(exc)
    assert who.rules == (rules.Rule.OFFLINE_IN_BATCH_EXCLUSIVE,) and who.frame and who.frame.endswith("config.py:1")
    other = mb / "other.py"
    other.write_text("x = [1][3]\n")  # torch or Python failing inside MB's call: not a documented check
    assert rules.attribute(_raise_in(str(other), other.read_text())).frame is None
    micro = ValueError("Micro batch size should be 1 when training with packed sequence, but yours is 4")
    assert rules.attribute(micro).rules == (rules.Rule.OFFLINE_MICRO_BATCH_1,)  # the exclusivity rule is not named
    multi = mb / "multi.py"
    multi.write_text('assert 1 == 2, (\n    "Sequence length must be divisible by 2 * context parallel size"\n)\n')
    attributed = rules.attribute(_raise_in(str(multi), multi.read_text()))
    assert attributed.rules == (rules.Rule.CP_SEQ_DIVISIBLE,) and attributed.by_check


def test_host_reads_of_device_tensors_are_counted_and_host_tensors_are_free():
    dev = hostsync.on_device(torch.tensor([0, 5, 9, 12, -1, -1], dtype=torch.int32))
    host_argmin = torch.tensor(4)
    with hostsync.count_host_reads() as reads:
        dev[: int(host_argmin.item())]  # the precomputed argmin lives on the host: free
        dev.squeeze()
    assert reads == []
    with hostsync.count_host_reads() as reads:
        dev[: torch.argmin(dev)]  # argmin of device boundaries, read back to slice
    assert reads == ["slice bound read from a device tensor"]
    for op, what in (
        (lambda: dev.tolist(), "tolist()"),
        (lambda: int(dev[0]), "__int__()"),
        (lambda: dev[dev >= 0], "boolean-mask indexing of a device tensor"),
        (lambda: torch.nonzero(dev), "nonzero (data-dependent size)"),
        (lambda: dev.cpu(), "cpu()"),
    ):
        with hostsync.count_host_reads() as reads:
            op()
        assert what in reads, (what, reads)
    placed = hostsync.place({"cu_seqlens": torch.zeros(3), "max_seqlen": torch.tensor(3)}, hostsync.DEVICE_KEYS)
    assert isinstance(placed["cu_seqlens"], hostsync.DeviceResident)
    assert not isinstance(placed["max_seqlen"], hostsync.DeviceResident)
