"""A real Qwen2.5-VL processor written at test time: no download, deterministic, tiny.

MB's VLM paths pick their collate by the processor's class name (``Qwen2_5_VLProcessor`` ->
``models/qwen_vl/data/collate_fn.qwen2_5_collate_fn``) and let it render the chat template,
expand each image into its grid of ``<|image_pad|>`` tokens and read the assistant spans from
ChatML markers. A stand-in would bypass all of that, so this module writes transformers' own
``Qwen2_5_VLProcessor`` into a directory that ``AutoProcessor.from_pretrained`` loads, as a
user's local processor: the offline tokenizer of :mod:`harness.suite.oracle.tokenizer` plus Qwen's
vision tokens, Qwen2-VL's image processor (14-pixel patches merged 2 x 2, so a 56 x 56 image is
4 placeholders and a 112 x 56 one 8), and a ChatML template in Qwen's layout
(``<|im_start|>role\\n ... <|im_end|>\\n``, an image part as
``<|vision_start|><|image_pad|><|vision_end|>``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness.suite.oracle import tokenizer

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
PATCH, MERGE = 14, 2  # Qwen2-VL's patch size and spatial merge: one placeholder per 28 x 28 pixels

# Qwen's ChatML layout; an image part renders as the one placeholder the processor expands
CHAT_TEMPLATE = (
    "{% for m in messages %}" + tokenizer.TURN_START + "{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}" + VISION_START + IMAGE_PAD + VISION_END + ""
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    + tokenizer.TURN_END
    + "\n{% endfor %}"
    "{% if add_generation_prompt %}" + tokenizer.TURN_START + "assistant\n{% endif %}"
)

_WRITTEN: dict[int, Path] = {}


def write_processor_dir(max_pixels: int = 112 * 112) -> Path:
    """Write the processor (tokenizer, image and video processors, template); return its directory.

    ``max_pixels``: the image processor's own bound (MB's collate passes the task encoder's
    ``min_pixels`` / ``max_pixels`` on each call, which win). Written once per process.
    """
    if max_pixels in _WRITTEN and (_WRITTEN[max_pixels] / "processor_config.json").is_file():
        return _WRITTEN[max_pixels]
    import transformers
    from transformers import AutoTokenizer, Qwen2_5_VLProcessor, Qwen2VLImageProcessor

    video_processor_cls = transformers.Qwen2VLVideoProcessor  # type: ignore[attr-defined]  # exported lazily

    tok = AutoTokenizer.from_pretrained(str(tokenizer.write_tokenizer_dir()))
    tok.add_special_tokens(
        {"additional_special_tokens": [tokenizer.TURN_START, tokenizer.TURN_END, tokenizer.EOD, *VISION_TOKENS]}
    )
    side = PATCH * MERGE
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=side * side, max_pixels=max_pixels),
        tokenizer=tok,
        video_processor=video_processor_cls(),
        chat_template=CHAT_TEMPLATE,
    )
    out = Path(tempfile.mkdtemp(prefix="harness-qwen-vl-processor-"))
    processor.save_pretrained(str(out))
    _WRITTEN[max_pixels] = out
    return out


def placeholders(width: int, height: int) -> int:
    """How many ``<|image_pad|>`` tokens an image of this size (multiples of 28) becomes."""
    side = PATCH * MERGE
    return (width // side) * (height // side)
