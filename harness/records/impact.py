"""Training impact: what a broken invariant does to a training run, from one closed set.

A red verdict is a training defect or it is nothing. Every violation the oracle reports names
one :class:`Impact`; an invariant whose breach has no impact (say, a logical boundary that also
covers the causal tail of a sequence, where nothing trains and no real token attends) is not
checked as a failure at all. Reports, ``results.json``, JUnit and the terminal show the impact, so
the person reading a red knows what it costs before reading how it was found.

Pure Python, imported by :mod:`harness.records.oracle` (each invariant's default impact) and by
the plugin (a case's impacts), never by Megatron-Bridge code.
"""

from __future__ import annotations

import enum


class Impact(enum.StrEnum):
    """What a defect does to training; the value is what reports and JSON name."""

    TRAINS_PADDING = "trains-padding"  # a padding position (alignment, tail, padding row) trains
    TRAINS_MASKED_TOKEN = "trains-masked-token"  # a position MB's unpacked path masks (a prompt) trains
    DROPS_TRAINED_TOKEN = "drops-trained-token"  # a token unpacked trains is not trained packed
    WRONG_TARGETS = "wrong-targets"  # a trained position has other tokens or labels than unpacked
    CROSS_DOCUMENT_ATTENTION = "cross-document-attention"  # a real token attends across documents
    WRONG_LOGITS = "wrong-logits"  # a trained token's logits differ (positions, max_seqlen, model)
    WRONG_LOSS_NORMALISATION = "wrong-loss-normalisation"  # loss sum or token count of a step differ
    ACCEPTS_INVALID_CONFIG = "accepts-invalid-config"  # a documented rule does not refuse what it must
    REFUSES_VALID_CONFIG = "refuses-valid-config"  # a valid configuration (or input) is refused
    IRREPRODUCIBLE = "irreproducible"  # the configured seed does not decide the data order
    CRASH = "crash"  # MB raises, aborts or hangs, or hands kernels what they refuse (dtype, shape)
    PERF_CONTRACT = "perf-contract"  # MB's documented fast path is left (padded kernels, host syncs)

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Impact.TRAINS_PADDING: "padding trains",
    Impact.TRAINS_MASKED_TOKEN: "a masked token trains",
    Impact.DROPS_TRAINED_TOKEN: "a trained token is dropped",
    Impact.WRONG_TARGETS: "wrong tokens or labels are trained",
    Impact.CROSS_DOCUMENT_ATTENTION: "attention across documents",
    Impact.WRONG_LOGITS: "logits of trained tokens differ",
    Impact.WRONG_LOSS_NORMALISATION: "wrong loss normalisation",
    Impact.ACCEPTS_INVALID_CONFIG: "an invalid configuration is accepted",
    Impact.REFUSES_VALID_CONFIG: "a valid configuration is refused",
    Impact.IRREPRODUCIBLE: "the seed does not decide the data",
    Impact.CRASH: "a crash",
    Impact.PERF_CONTRACT: "the documented fast path is broken",
}


def parse(value: str) -> Impact:
    """An impact from its JSON value; a one-line ``ValueError`` naming the closed set otherwise."""
    try:
        return Impact(value)
    except ValueError:
        known = ", ".join(i.value for i in Impact)
        raise ValueError(f"unknown impact {value!r} (one of: {known})") from None


class ImpactFailure(AssertionError):
    """A documented-rule or contract assertion of a suite, with the impact its breach has.

    Suites raise it (directly or through :func:`fail`) where a plain ``assert`` would leave the
    reader to guess what the failure costs; the plugin records ``impact`` on the case.
    """

    def __init__(self, text: str, impact: Impact) -> None:
        super().__init__(text)
        self.impact = impact


def fail(impact: Impact, text: str) -> ImpactFailure:
    """The exception to raise: ``raise fail(Impact.CRASH, "...")``."""
    return ImpactFailure(text, impact)


def require(condition: object, impact: Impact, text: str) -> None:
    """``assert condition`` with an impact (the text is only built by the caller, so keep it cheap)."""
    if not condition:
        raise ImpactFailure(text, impact)


__all__ = ["Impact", "ImpactFailure", "fail", "parse", "require"]
