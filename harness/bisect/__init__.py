"""Bisection of regressions.

``algorithm`` (the pure multi-case state machine), ``cache`` (verdicts kept across runs),
``evaluator`` (one commit -> one verdict per case), ``executor`` (where evaluations run),
``driver`` (the loop that ties them to a git range), ``findings`` and ``document`` (what a
bisection found, as the typed ``bisect.json`` record).
"""
