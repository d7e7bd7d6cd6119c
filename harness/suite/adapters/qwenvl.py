"""Qwen2.5-VL's own model, tiny, on the CPU: what it hands its language model for a packed micro-batch.

Operation ``qwen25_vl_model(token_ids, *, vocab_size, seed)``: MB's ``Qwen25VLModel`` (its real
vision tower, transformers' ``Qwen2_5_VisionTransformerPretrainedModel`` at a tiny size, its image
splice and its multimodal rotary positions) around a recorded language model, wrapped so MB's
``vlm_step.forward_step`` can call it as training does.

Why this model: under in-batch packing MB's step hands Qwen2.5-VL one THD row, and the model itself
turns it back into logical rows to compute each sample's MRoPE positions (``[3, rows, S]``, HF's
``get_rope_index``: temporal, height and width positions for image tokens) and scatters them into
the packed row (``unpack_mcore_thd_tensor_for_position_ids`` / ``repack_mcore_thd_position_ids``).
What attention then sees of a sample is its positions relative to its own first token and its
input embeddings (text, with the vision tower's output spliced in at its image placeholders).

Why the language model is recorded (a double, named in every result): those two are decided before
the language model runs, and its THD attention and MB's loss over it are the GPT path's, judged by
the step cases with the tiny GPTModel. The double keeps MB's contract with the model: an
``embedding`` that maps ids to ``[s, b, h]``, and a forward that returns a per-token loss. That
loss is a fixed function of each token's input embedding and label, so MB's loss function totals
show a token embedded or labelled differently, or counted where it should not be.

Era: MB's THD position preparation in the model (59ae409f5, 2026-06-29, feature
``qwen-vl-thd-positions``); before it the model computed positions over the packed row as one
sequence (each sample shifted by a constant, which rotary attention does not see).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.suite import standins
from harness.suite.adapters import Candidate, NotHere, Operation, module_source, step, symbol

HIDDEN = 32  # the language model's width, which the vision tower's merger projects to
STANDIN_LANGUAGE_MODEL = "Qwen2.5-VL's language model recorded (positions and embeddings it is handed)"


@dataclass(frozen=True)
class VisionTokens:
    """The processor's ids the model reads off its config (placeholders of images and videos)."""

    image: int
    video: int
    vision_start: int


class _Embedding(torch.nn.Module):
    """The language model's word embedding as MCore's: ids ``[b, s]`` -> ``[s, b, h]``."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab_size, HIDDEN)

    def forward(self, input_ids: torch.Tensor, position_ids: object = None) -> torch.Tensor:
        return self.word_embeddings(input_ids).transpose(0, 1).contiguous()


class RecordedLanguageModel(torch.nn.Module):
    """Stands for the language model: records its call, returns a per-token loss ``[b, s]`` that is a
    fixed function of the token's input embedding and its label."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embedding = _Embedding(vocab_size)
        self.probe = torch.nn.Parameter(torch.randn(HIDDEN) / HIDDEN, requires_grad=False)
        self.calls: list[dict[str, object]] = []

    def shared_embedding_or_output_weight(self) -> torch.Tensor:
        return self.embedding.word_embeddings.weight

    def set_input_tensor(self, input_tensor: object) -> None:
        pass

    def forward(self, **kwargs: object) -> torch.Tensor:
        standins.record(STANDIN_LANGUAGE_MODEL)
        self.calls.append({k: step.snapshot(step.plain(v)) for k, v in kwargs.items()})
        hidden = step.plain(kwargs["decoder_input"]).float()  # [s, b, h]
        loss = 1.0 + (hidden * self.probe).sum(-1).transpose(0, 1).abs().contiguous()  # [b, s], positive
        labels = kwargs.get("labels")
        if labels is not None:
            labels = step.plain(labels)
            loss = loss + 1e-3 * (labels.reshape(loss.shape).float() % 97)
        return loss


class QwenVLRecordingModel(step.RecordingModel):
    """What ``vlm_step`` calls: records its arguments and runs MB's ``Qwen25VLModel`` unchanged.

    ``module`` is the real model, as a DDP or Float16Module wrapper's is: MB's step filters the
    visual keyword arguments by that forward's signature, as in training."""

    def __init__(self, qwen: torch.nn.Module, language: RecordedLanguageModel) -> None:
        super().__init__(qwen)
        self.module = qwen
        self.language = language

    def forward(self, **kwargs: object) -> object:
        self.calls.append({k: step.snapshot(v) for k, v in kwargs.items()})
        self.language.calls.clear()
        output = self.gpt(**step.plain(kwargs))
        token_loss = output[0] if isinstance(output, tuple) else output
        self.logits.append(token_loss.detach().float().unsqueeze(-1).clone())  # [b, s, 1]: what "logits" there are
        return output

    @property
    def language_call(self) -> dict[str, Any]:
        """The language model's keyword arguments at the last step (one call per step)."""
        if len(self.language.calls) != 1:
            raise AssertionError(f"the model called its language model {len(self.language.calls)} times, not once")
        return self.language.calls[0]


def _vision_config() -> object:
    cfg = symbol("transformers.models.qwen2_5_vl.configuration_qwen2_5_vl", "Qwen2_5_VLVisionConfig")
    # the processor's patches (14 pixels, 2 frames, merged 2 x 2); one full-attention block
    return cfg(
        depth=1,
        hidden_size=16,
        intermediate_size=32,
        num_heads=2,
        in_channels=3,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        tokens_per_second=2,
        window_size=112,
        out_hidden_size=HIDDEN,
        fullatt_block_indexes=[0],
    )


def _thd_positions_probe() -> Callable[..., QwenVLRecordingModel]:
    name = "megatron.bridge.models.qwen_vl.modeling_qwen25_vl"
    source = module_source(name)
    if source is None:
        raise NotHere(f"no module {name}")
    if "unpack_mcore_thd_tensor_for_position_ids" not in source:
        raise NotHere("Qwen25VLModel computes its positions over the packed row (no THD position preparation)")
    model_cls = symbol(name, "Qwen25VLModel")
    provider_cls = symbol("megatron.bridge.models.qwen_vl.qwen25_vl_provider", "Qwen25VLModelProvider")

    def build(tokens: VisionTokens, *, vocab_size: int, seed: int = 1234) -> QwenVLRecordingModel:
        from harness.suite.adapters import forward

        forward.init_cpu_parallel(seed)
        language = RecordedLanguageModel(vocab_size, seed)
        known = {f.name for f in dataclasses.fields(provider_cls)}
        given = {
            "num_layers": 1,
            "hidden_size": HIDDEN,
            "num_attention_heads": 4,
            "ffn_hidden_size": 2 * HIDDEN,
            "vocab_size": vocab_size,
            "seq_length": forward.MAX_POS,
            "vision_config": _vision_config(),
            "image_token_id": tokens.image,
            "video_token_id": tokens.video,
            "vision_start_token_id": tokens.vision_start,
            "bf16": False,
            "params_dtype": torch.float32,
        }
        provider = provider_cls(**{k: v for k, v in given.items() if k in known})
        # the language model MB's provider would build is the double (see the module docstring)
        object.__setattr__(provider, "provide_language_model", lambda **_: language)
        torch.manual_seed(seed)
        with forward.pinned_to_cpu():
            qwen = model_cls(provider, pre_process=True, post_process=True)
        qwen.eval()
        return QwenVLRecordingModel(qwen, language)

    return build


qwen25_vl_model = Operation(
    "qwen25_vl_model",
    [Candidate("models/qwen_vl Qwen25VLModel with THD positions (59ae409f5+)", _thd_positions_probe)],
    before="Qwen25VLModel computed MRoPE over the packed row as one sequence",
    feature="qwen-vl-thd-positions",
)
