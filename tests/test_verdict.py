"""The one verdict ranking (harness.verdict): every verdict ranked, worst and settle agree with it."""

from __future__ import annotations

from harness.verdict import SEVERITY, Verdict, is_flaky, settle, worst


def test_every_verdict_has_a_severity() -> None:
    assert set(SEVERITY) == set(Verdict)
    assert len(set(SEVERITY.values())) == len(SEVERITY), "two verdicts share a rank"


def test_worst_orders_fail_error_untestable_pass() -> None:
    assert worst([]) is Verdict.PASS
    assert worst([Verdict.PASS, Verdict.UNTESTABLE]) is Verdict.UNTESTABLE
    assert worst([Verdict.UNTESTABLE, Verdict.ERROR]) is Verdict.ERROR
    assert worst([Verdict.ERROR, Verdict.FAIL, Verdict.PASS]) is Verdict.FAIL


def test_settle_lets_a_decisive_retry_win_over_skips() -> None:
    assert settle([]) is None
    assert settle([None]) is None
    assert settle([Verdict.ERROR, Verdict.PASS]) is Verdict.PASS
    assert settle([Verdict.UNTESTABLE, None, Verdict.FAIL]) is Verdict.FAIL
    assert settle([Verdict.UNTESTABLE, Verdict.ERROR]) is Verdict.ERROR
    assert not is_flaky([Verdict.ERROR, Verdict.PASS])
    assert is_flaky([Verdict.PASS, None, Verdict.FAIL])
