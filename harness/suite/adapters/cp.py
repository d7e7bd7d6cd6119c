"""CP/TP-SP padding multiples as MB derives them.

Operation ``collate_padding_multiple(cp, tp, sp, in_batch, eval_cp=None)``: the multiple MB
pads each sequence to for context parallelism (2*CP) and sequence parallelism (CP*TP), plus
whether MB accepts the configuration (``{"accepted", "error_class", "message", "multiple",
"seq_length_rule"}``; a rejection is behaviour, not an error). ``seq_length_rule`` says whether
the era validates ``seq_length`` against that multiple (the data/builders collate configs do;
before them only MCore's older ``seq_length % 2*CP`` assertion held).

Eras (``git log -S`` on MB's ``src``, first-parent main), newest first:

* ``data/builders`` collate configs (``DirectHFSFTDatasetConfig`` e577829e1 2026-07-09, with a
  required declarative ``source``; ``MockVLMSFTDatasetConfig`` 8896e9027 2026-07-14):
  ``ConfigContainer.validate`` writes ``in_batch_packing_pad_to_multiple_of`` with in-batch
  packing on, else raises the dataset's ``pad_to_multiple_of`` to the lcm with the multiple.
* dataset providers with ``in_batch_packing_pad_to_multiple_of`` (``HFConversationDatasetProvider``,
  ``MockVLMConversationProvider``; 814ad79af 2026-06-24 to 2026-07-09): ``validate`` writes the
  in-batch multiple only; the collate ``pad_to_multiple_of`` is not aligned to CP/SP there (that
  came with the builders configs), so ``in_batch=False`` is untestable.
* ``training/vlm_step.get_batch`` (af2f35814 2026-01-29 to 2026-06-24): no collate-time
  multiple; every step packs with the multiple computed from the step's CP/TP groups
  (``2*CP``; lcm with ``CP*TP`` under SP from aba4fb2bf 2026-03-24). The multiple is read from
  MB's output: rows of one real token are each padded to exactly one multiple. Acceptance is
  ``validate`` with in-batch packing on. ``in_batch=False`` and an evaluation CP (no single
  collate-time multiple) are untestable there.
* before 2026-01-29 MB had no in-batch packing and no collate padding multiple: untestable.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType, SimpleNamespace

import torch

from harness import features
from harness.errors import NotHere
from harness.suite.adapters import Candidate, Operation, accepts, field_names, load_module, module_source, symbol
from harness.suite.adapters.config import (
    PackingConfigSpec,
    _dataset,
    _kwargs_for,
    build_container,
    in_batch_flag,
    refusal,
    run_validate,
    tiny_gpt_provider,
)
from harness.suite.adapters.rules import ConfigOutcome
from harness.suite.standins.cuda import cpu_cuda_calls

FIELD = "in_batch_packing_pad_to_multiple_of"
# (module, class, validate also aligns the collate pad_to_multiple_of when in-batch packing is off)
COLLATE_CONFIGS = (
    ("megatron.bridge.data.builders.mock_vlm_sft", "MockVLMSFTDatasetConfig", True),
    ("megatron.bridge.data.builders.direct_hf_sft", "DirectHFSFTDatasetConfig", True),
    ("megatron.bridge.data.hf_datasets.provider", "HFConversationDatasetProvider", False),
    ("megatron.bridge.data.vlm_datasets.mock_provider", "MockVLMConversationProvider", False),
)


def validate_layout(
    cfg: ModuleType,
    dataset: object,
    cp: int,
    tp: int,
    sp: bool,
    seq_length: int,
    in_batch: bool,
    eval_cp: int | None,
    pp: int = 1,
) -> ConfigOutcome:
    """MB's ``ConfigContainer.validate`` of ``dataset`` in a CP x TP (SP) x PP layout (its outcome;
    the dataset config is finalised in place: the collate multiples and widths MB chooses)."""
    model = tiny_gpt_provider(seq_length, cp, tp, sp, per_token_loss=True, pp=pp)
    container = build_container(
        cfg,
        model,
        dataset,
        global_batch_size=32,
        micro_batch_size=4 if in_batch else 1,
        dist_extra={"eval_context_parallel_size": eval_cp} if eval_cp is not None else None,
    )
    return run_validate(cfg, container, cp * tp * pp * 4)  # DP 4 keeps the global batch divisible


def _declared_source(ds_cls: object) -> dict[str, object]:
    """A placeholder data source where the config declares one.

    ``DirectHFSFTDatasetConfig`` (from e577829e1, 2026-07-09) requires a declarative
    ``source: HFDatasetSourceConfig`` that its ``validate()`` checks; a custom path that is never
    loaded satisfies it (no dataset is built here).
    """
    if "source" not in field_names(ds_cls):
        return {}
    source_cls = symbol("megatron.bridge.data.sources.hf", "HFDatasetSourceConfig")
    return {"source": source_cls(path_or_dataset="harness/none")}


def _collate_config(module: str, name: str, aligns_collate: bool) -> Callable[[], Callable[..., ConfigOutcome]]:
    def probe() -> Callable[..., ConfigOutcome]:
        ds_cls = symbol(module, name)
        if FIELD not in field_names(ds_cls):
            raise NotHere(f"{name} has no {FIELD}")
        cfg = load_module("megatron.bridge.training.config")
        source = _declared_source(ds_cls)

        def call(
            cp: int,
            tp: int = 1,
            sp: bool = False,
            *,
            in_batch: bool = True,
            seq_length: int = 1680,
            eval_cp: int | None = None,
            pad_to_multiple_of: int = 1,
        ) -> ConfigOutcome:
            if not in_batch and not aligns_collate:
                raise features.missing(
                    "collate-cp-multiple",
                    f"{name} era: validate does not align the collate pad_to_multiple_of to CP/SP",
                )
            dataset = ds_cls(
                **_kwargs_for(
                    ds_cls,
                    {
                        "seq_length": seq_length,
                        "hf_processor_path": "harness/none",
                        "maker_name": "harness_none",
                        "enable_in_batch_packing": in_batch,
                        "pad_to_multiple_of": pad_to_multiple_of,
                        **source,
                    },
                )
            )
            outcome = validate_layout(cfg, dataset, cp, tp, sp, seq_length, in_batch, eval_cp)
            outcome["seq_length_rule"] = aligns_collate
            field = FIELD if in_batch else "pad_to_multiple_of"
            outcome["multiple"] = int(getattr(dataset, field)) if outcome["accepted"] else None
            return outcome

        return call

    return probe


def _step_multiple(get_batch: Callable[..., tuple[torch.Tensor, ...]], flag: str, cp: int, tp: int, sp: bool) -> int:
    """The multiple ``vlm_step.get_batch`` packs with under CP=cp, TP=tp (fake groups, no collectives).

    Two rows of one real token each: packing pads each to exactly one multiple, so the packed
    row holds two multiples.
    """
    rows, width = 2, 4
    tokens = torch.zeros((rows, width), dtype=torch.long)
    tokens[:, 0] = torch.tensor([7, 9])
    labels = torch.full((rows, width), -100, dtype=torch.long)
    batch = {
        "tokens": tokens,
        "labels": labels,
        "loss_mask": torch.zeros((rows, width)),
        "position_ids": torch.zeros((rows, width), dtype=torch.long),
        "attention_mask": (tokens != 0).long(),
        "visual_inputs": None,
    }
    group = lambda size: SimpleNamespace(rank=lambda: 0, size=lambda: size)  # noqa: E731
    pgs = SimpleNamespace(pp=group(1), cp=group(cp), tp=group(tp))
    cfg = SimpleNamespace(
        dataset=SimpleNamespace(**{flag: True, "skip_getting_attention_mask_from_dataset": True}),
        model=SimpleNamespace(
            sequence_parallel=sp,
            seq_length=4096,
            pipeline_model_parallel_size=1,
            context_parallel_size=cp,
            tensor_model_parallel_size=tp,
        ),
    )
    with cpu_cuda_calls():
        out = get_batch(iter([batch]), cfg, pg_collection=pgs)
    packed = out[0]
    total = int(packed.numel())
    if total % rows:
        raise AssertionError(
            f"vlm_step.get_batch packed {rows} one-token rows into {total} slots, "
            "not a whole number of alignment multiples per row"
        )
    return total // rows


def _vlm_step_probe() -> Callable[..., ConfigOutcome]:
    module = "megatron.bridge.training.vlm_step"
    source = module_source(module)
    if source is None or "def pack_batch_sequences" not in source:
        raise NotHere("training/vlm_step has no pack_batch_sequences (no in-batch packing in vlm_step)")
    get_batch = symbol(module, "get_batch")
    if not accepts(get_batch, "pg_collection"):
        raise NotHere("vlm_step.get_batch takes no pg_collection")
    cfg = load_module("megatron.bridge.training.config")

    def call(
        cp: int,
        tp: int = 1,
        sp: bool = False,
        *,
        in_batch: bool = True,
        seq_length: int = 1680,
        eval_cp: int | None = None,
        pad_to_multiple_of: int = 1,
    ) -> ConfigOutcome:
        if not in_batch:
            raise features.missing(
                "collate-cp-multiple", "training/vlm_step era: no collate pad_to_multiple_of aligned to CP/SP"
            )
        if eval_cp is not None:
            raise features.missing(
                "collate-cp-multiple",
                "training/vlm_step era: no collate-time multiple to serve an evaluation CP; "
                "get_batch pads each step for the CP group it runs under",
            )
        flag = in_batch_flag()
        dataset = _dataset(PackingConfigSpec(seq_length=seq_length), cfg)
        setattr(dataset, flag, True)
        outcome = validate_layout(cfg, dataset, cp, tp, sp, seq_length, True, None)
        outcome["seq_length_rule"] = False
        outcome["multiple"] = _step_multiple(get_batch, flag, cp, tp, sp) if outcome["accepted"] else None
        return outcome

    return call


collate_padding_multiple = Operation(
    "collate_padding_multiple",
    [
        *(
            Candidate(f"{m.replace('megatron.bridge.', '')}.{c} + ConfigContainer.validate", _collate_config(m, c, a))
            for m, c, a in COLLATE_CONFIGS
        ),
        Candidate("training/vlm_step.get_batch (2026-01-29 to 2026-06-24)", _vlm_step_probe),
    ],
    before="no CP/SP padding multiple before in-batch packing",
    feature="in-batch-packing",
)


def packing_multiple(outcome: ConfigOutcome, layout: str = "a valid layout") -> int:
    """The multiple MB chose for ``layout``, which it accepted. Every layout a case asks this of is
    valid, so MB refusing it is a finding (``refuses-valid-config``), with MB's message."""
    from harness.records.impact import Impact, fail

    multiple = outcome.get("multiple")
    if not outcome["accepted"] or multiple is None:
        raise fail(Impact.REFUSES_VALID_CONFIG, f"MB refused {layout}: {refusal(outcome)}")
    return multiple
