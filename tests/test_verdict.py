"""The one verdict ranking (harness.records.verdict): every verdict ranked, worst and settle agree with it."""

from __future__ import annotations

from harness.bisect.status import Mark
from harness.bisect.view import mark_of
from harness.records.verdict import SEVERITY, Verdict, is_flaky, settle, worst


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


def test_a_bisection_reads_known_bugs_as_bad_and_changes_as_good_unless_asked() -> None:
    assert mark_of(Verdict.KNOWN_FAIL) is Mark.BAD
    assert mark_of(Verdict.FIXED) is Mark.GOOD
    assert mark_of(Verdict.CHANGED) is Mark.GOOD
    assert mark_of(Verdict.CHANGED, changed=True) is Mark.BAD
    for v, m in ((Verdict.PASS, Mark.GOOD), (Verdict.FAIL, Mark.BAD)):
        assert mark_of(v) is m and mark_of(v, changed=True) is m
    for v in (Verdict.UNTESTABLE, Verdict.ERROR):
        assert mark_of(v) is Mark.SKIP and mark_of(v, changed=True) is Mark.SKIP


def test_a_regression_outranks_a_change_and_a_known_bug() -> None:
    assert worst([Verdict.CHANGED, Verdict.KNOWN_FAIL]) is Verdict.KNOWN_FAIL
    assert worst([Verdict.KNOWN_FAIL, Verdict.FAIL]) is Verdict.FAIL
    assert worst([Verdict.CHANGED, Verdict.UNTESTABLE]) is Verdict.CHANGED
