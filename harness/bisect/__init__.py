"""Bisection of regressions: the pure algorithm, the verdict cache."""
