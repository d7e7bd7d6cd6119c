"""Fault catalogue: small source patches that inject a known packing regression into MB.

Each :class:`Fault` is data: a file of the ``megatron.bridge`` package, an exact snippet
that must occur there exactly once, and its replacement. Applying one is a plain string
replacement (no diff/patch tooling, no line numbers), so the catalogue survives unrelated
edits of the surrounding code; when MB changes the snippet itself, :func:`apply` says so
in one line instead of silently patching nothing.

Used by tests/test_bisect_command.py (commits that inject a fault into a temporary git
repository built from the installed MB) and usable by anyone checking that a suite catches
a regression: copy MB's ``src``, ``apply`` a fault, ``harness run --mb-src`` it.

The package's modules are the other kind of fault: faults injected into the harness itself
(signals, full disks, corrupt files, odd repositories), the matrix in tests/faults/matrix.py.

``suite`` and ``catches`` say which golden suite and tests catch the fault (checked against
MB 0.6.2 with ``harness run --mb-src <tree>/src``: cu_seqlens_off_by_one fails the 5 cases
without a precomputed argmin; alignment_pad_loss_mask_one the 3 right-padded cases whose
alignment multiple exceeds 1; position_ids_not_reset all 6 right-padded cases;
pad_cu_seqlens_rule_dropped the pad_cu_seqlens-without-pad_to_max_length rule case).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Fault:
    name: str
    path: str  # relative to the megatron/bridge package directory
    old: str
    new: str
    description: str
    suite: str = ""  # the suite that catches it ("" for a breakage that is not a behaviour fault)
    # the tests (suite::test_function) whose cases FAIL with the fault applied: some of their
    # parametrised cases, never a case of another test (ids of parameters are left out on
    # purpose: suites rename them)
    catches: tuple[str, ...] = ()

    def caught_by(self, case_id: str) -> bool:
        return any(case_id == t or case_id.startswith(t + "[") for t in self.catches)

    def apply_to(self, package_dir: Path) -> None:
        apply(package_dir, self)

    def revert_from(self, package_dir: Path) -> None:
        apply(package_dir, self.reverse())

    def reverse(self) -> Fault:
        return Fault(self.name + "-revert", self.path, self.new, self.old, "revert " + self.description)


def apply(package_dir: Path, fault: Fault) -> Path:
    """Replace ``fault.old`` by ``fault.new`` in ``package_dir/fault.path``; returns the file."""
    target = Path(package_dir) / fault.path
    text = target.read_text(encoding="utf-8")
    count = text.count(fault.old)
    if count != 1:
        raise ValueError(f"fault {fault.name}: expected the snippet once in {fault.path}, found it {count} times")
    target.write_text(text.replace(fault.old, fault.new), encoding="utf-8")
    return target


_PSP = "packed_seq_params::"
_IBP = "in_batch_packing::"
_CFG = "config_validation::"

CU_SEQLENS_OFF_BY_ONE = Fault(
    name="cu_seqlens_off_by_one",
    path="training/utils/packed_seq_utils.py",
    old="cu_seqlens_padded = cu_seqlens_padded[: torch.argmin(cu_seqlens_padded)]",
    new="cu_seqlens_padded = cu_seqlens_padded[: torch.argmin(cu_seqlens_padded) + 1]",
    description="sentinel stripping without a precomputed argmin keeps one -1 in cu_seqlens",
    suite="packed_seq_params",
    catches=(_PSP + "test_offline_sentinel_stripped", _PSP + "test_offline_padded_and_unpadded"),
)

ALIGNMENT_PAD_LOSS_MASK_ONE = Fault(
    name="alignment_pad_loss_mask_one",
    path="data/packing/in_batch.py",
    old='output_pad_values: dict[str, int | float] = {"labels": ignore_index, "loss_mask": 0, **extra_pad_values}',
    new='output_pad_values: dict[str, int | float] = {"labels": ignore_index, "loss_mask": 1, **extra_pad_values}',
    description="in-batch alignment padding gets loss mask 1 (padding reaches the loss)",
    suite="in_batch_packing",
    catches=(_IBP + "test_pack_right_padded", _IBP + "test_pack_with_eos_as_pad_and_a_sequence_tensor"),
)

POSITION_IDS_NOT_RESET = Fault(
    name="position_ids_not_reset",
    path="data/packing/in_batch.py",
    old='packed["position_ids"][0, offset : offset + length] = row["position_ids"]',
    new='packed["position_ids"][0, offset : offset + length] = row["position_ids"] + offset',
    description="in-batch packing continues position ids across sequences instead of restarting at 0",
    suite="in_batch_packing",
    catches=(_IBP + "test_pack_right_padded", _IBP + "test_pack_with_eos_as_pad_and_a_sequence_tensor"),
)

PAD_CU_SEQLENS_RULE_DROPPED = Fault(
    name="pad_cu_seqlens_rule_dropped",
    path="training/config.py",
    old="if pad_cu_seqlens and not pad_to_max_length:",
    new="if False and pad_cu_seqlens and not pad_to_max_length:  # rule dropped",
    description="validate() no longer requires pad_to_max_length for offline pad_cu_seqlens",
    suite="config_validation",
    catches=(_CFG + "test_packing_rule",),
)

# Why not the offline-vs-in-batch exclusivity rule: dropping it is masked in MB 0.6.2, the
# golden case (offline packing with micro-batch size 4) is still rejected by the offline
# micro-batch-size rule, so no suite can see it (checked; the case keeps passing).

# A break, not a behaviour fault: makes the in-batch packing module unimportable (the in-batch
# cases FAIL with "broken:" on the commits carrying it; the other suites are unaffected).
IN_BATCH_SYNTAX_ERROR = Fault(
    name="in_batch_syntax_error",
    path="data/packing/in_batch.py",
    old="def _ceil_to_multiple(value: int, multiple: int) -> int:",
    new="def _ceil_to_multiple(value: int, multiple: int) -> int:\n    return (",
    description="syntax error in data/packing/in_batch.py (module cannot be imported)",
)

# MB raising instead of returning: torch refuses a tensor MB builds (blamed on MB, FAIL, wherever
# the tree lives: a bisect workspace under ~/.cache/harness included).
TORCH_RAISES_IN_MB = Fault(
    name="torch_raises_in_mb",
    path="training/utils/packed_seq_utils.py",
    old="cu_seqlens_padded = cu_seqlens_padded[: torch.argmin(cu_seqlens_padded)]",
    new="cu_seqlens_padded = torch.cat([cu_seqlens_padded, cu_seqlens_padded.reshape(1, 1, -1)])",
    description="sentinel stripping concatenates tensors of different ranks: torch raises inside MB",
    suite="packed_seq_params",
    catches=(_PSP + "test_offline_sentinel_stripped", _PSP + "test_offline_padded_and_unpadded"),
)

# A break of a packing module that exists: every case using it FAILs with "broken:" (bisectable).
GPT_SFT_SYNTAX_ERROR = Fault(
    name="gpt_sft_syntax_error",
    path="data/packing/gpt_sft.py",
    old="def _safe_load_packed_npy(file_path: str | Path) -> np.ndarray:",
    new="def _safe_load_packed_npy(file_path: str | Path) -> np.ndarray:\n    return (",
    description="syntax error in data/packing/gpt_sft.py (the packed SFT dataset cannot be imported)",
    suite="padding_loss_masks",
    # every packed SFT case imports it; this one passes on the installed MB (no known bug in it:
    # the offline suite's determinism cases are checked by the oracle too and meet 0.6.2's bugs)
    catches=("padding_loss_masks::test_samples_mapping_follows_seed",),
)

# A hang at import of the packed-seq utilities: the case running when the suite process is
# killed at --timeout FAILs with "broken: timeout" (bisectable; the bisection itself never hangs).
PACKED_SEQ_UTILS_HANG = Fault(
    name="packed_seq_utils_hang",
    path="training/utils/packed_seq_utils.py",
    old="PackedMetadataValue = torch.Tensor | int | None",
    new="PackedMetadataValue = torch.Tensor | int | None\n\nimport time as _time\n\n_time.sleep(10**6)",
    description="importing training/utils/packed_seq_utils.py never returns",
    suite="packed_seq_params",
)

_ALG = "packing_algorithms::"

FIRST_FIT_NEEDS_ONE_MORE = Fault(
    name="first_fit_needs_one_more",
    path="data/packing/algorithms.py",
    old="first_bin = tree.query_first_fit(s)",
    new="first_bin = tree.query_first_fit(s + 1)",
    description="first fit asks for one token more room than a sequence needs (exact fits open a new bin)",
    suite="packing_algorithms",
    catches=(
        _ALG + "test_first_fit",
        _ALG + "test_first_fit_decreasing",
        _ALG + "test_first_fit_shuffle",
        _ALG + "test_packing_strategy_pipeline",
    ),
)

FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        CU_SEQLENS_OFF_BY_ONE,
        ALIGNMENT_PAD_LOSS_MASK_ONE,
        POSITION_IDS_NOT_RESET,
        PAD_CU_SEQLENS_RULE_DROPPED,
        IN_BATCH_SYNTAX_ERROR,
        TORCH_RAISES_IN_MB,
        GPT_SFT_SYNTAX_ERROR,
        PACKED_SEQ_UTILS_HANG,
        FIRST_FIT_NEEDS_ONE_MORE,
    )
}


# ---- megatron-core (a Megatron-LM tree's megatron/core): faults a bisection of Megatron-LM finds ----
# ``path`` is relative to the megatron/core package directory. Checked against megatron-core
# 0.19.2 under MB 0.6.2 (harness run with the core tree first on the path): the off-by-one fails
# the 4 sentinel cases that pass without it (max-seqlen: expected 5, got 6) and every
# test_params_from_mb_batches case; the syntax error stops MB's packed-seq utilities importing.

CORE_MAX_SEQLEN_OFF_BY_ONE = Fault(
    name="core_max_seqlen_off_by_one",
    path="packed_seq_params.py",
    old="""        cu_seqlens = (
            self.cu_seqlens_q_padded if self.cu_seqlens_q_padded is not None else self.cu_seqlens_q
        )""",
    new="""        if self.qkv_format == "thd" and self.max_seqlen_q is not None:
            self.max_seqlen_q = int(self.max_seqlen_q) + 1  # counts the end-of-sequence boundary
        cu_seqlens = (
            self.cu_seqlens_q_padded if self.cu_seqlens_q_padded is not None else self.cu_seqlens_q
        )""",
    description="PackedSeqParams makes max_seqlen_q one longer than the longest THD segment",
    suite="packed_seq_params",
    catches=(_PSP + "test_offline_sentinel_stripped", _PSP + "test_params_from_mb_batches"),
)

CORE_PACKED_SEQ_PARAMS_SYNTAX_ERROR = Fault(
    name="core_packed_seq_params_syntax_error",
    path="packed_seq_params.py",
    old="class PackedSeqParams:",
    new="class PackedSeqParams:\n    (",
    description="syntax error in megatron/core/packed_seq_params.py (megatron-core does not import with MB)",
)
