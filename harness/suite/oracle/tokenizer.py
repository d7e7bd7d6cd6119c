"""A real Hugging Face tokenizer written at test time: no download, deterministic, tiny.

MB's SFT code reads a tokenizer's special ids (``eos_id``, ``eod``, ``pad_id``, ``bos_id``),
tokenises text and renders chat templates through it; a stand-in that only carries ids would
bypass all of that. This module writes a genuine ``tokenizers`` word-level model plus a
``transformers`` tokenizer config (with a chat template whose ``{% generation %}`` block marks
assistant turns, as MB's chat preprocessing requires) into a directory, which MB then loads with
its own tokenizer builder (``HuggingFaceTokenizer``), exactly as a user's local tokenizer.

Special tokens appear in text the way real data carries them: a literal ``</s>`` in an answer is
the EOS id inside content, ``<pad>`` is the pad id inside content, ``<|im_end|>`` ends a turn.

:func:`with_distinct_eod` is the one named test double: HF-backed tokenizers report ``eod ==
eos_id``, but MB's packing pads with ``tokenizer.eod`` in one place and masks by
``tokenizer.eos_id`` in another, and Megatron's tokenizer interface allows the two to differ
(``eod_id``, e.g. SentencePiece models with an ``<eod>`` piece). It is the real tokenizer with
only ``eod`` answered by the id of ``<|endoftext|>``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
TURN_START, TURN_END, EOD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIALS = (PAD, BOS, EOS, UNK, TURN_START, TURN_END, EOD)
WORDS = tuple(f"w{i}" for i in range(160)) + ("system", "user", "assistant", "Q:", "A:")
MARKERS = tuple(f"id{i}" for i in range(400))  # one per example: segments are identifiable by content
VOCAB_SIZE = len(SPECIALS) + len(WORDS) + len(MARKERS)

# Qwen/ChatML-like template; {% generation %} marks the tokens MB's chat path may train on.
CHAT_TEMPLATE = (
    "{% for m in messages %}" + TURN_START + " {{ m['role'] }} "
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }} " + TURN_END + "{% endgeneration %}"
    "{% else %}{{ m['content'] }} " + TURN_END + "{% endif %} {% endfor %}"
    "{% if add_generation_prompt %}" + TURN_START + " assistant {% endif %}"
)

# The same conversation under another template (a user's own ``TokenizerConfig.chat_template``):
# each role name is followed by "Q:", so every turn renders to other tokens.
OTHER_CHAT_TEMPLATE = CHAT_TEMPLATE.replace("{{ m['role'] }} ", "{{ m['role'] }} Q: ")

_WRITTEN: dict[str, Path] = {}


def vocab(other_ids: bool = False) -> dict[str, int]:
    """Token -> id. ``other_ids``: a second tokenizer over the same text, its content tokens under
    other ids (the specials keep theirs), as when a user switches to another model's tokenizer."""
    content = WORDS + MARKERS
    return {tok: i for i, tok in enumerate(SPECIALS + (content[::-1] if other_ids else content))}


def write_tokenizer_dir(path: Path | None = None, *, pad_is_eos: bool = False, other_ids: bool = False) -> Path:
    """Write the tokenizer (``tokenizer.json``, ``tokenizer_config.json``...) and return its directory.

    Written once per process unless ``path`` is given; the files depend on nothing but this module.
    ``pad_is_eos``: the tokenizer pads with its EOS (Qwen2's base tokenizers, GPT-2 style recipes
    that set ``pad_token = eos_token``), so the pad id collides with EOD. ``other_ids``: see
    :func:`vocab` (written to a directory of its own, as another model's tokenizer is).
    """
    key = (
        (str(path) if path is not None else "")
        + ("#pad-is-eos" if pad_is_eos else "")
        + ("#other-ids" if other_ids else "")
    )
    if key in _WRITTEN and (_WRITTEN[key] / "tokenizer.json").is_file():
        return _WRITTEN[key]
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="harness-tokenizer-"))
    out.mkdir(parents=True, exist_ok=True)
    model = Tokenizer(models.WordLevel(vocab=vocab(other_ids), unk_token=UNK))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=model,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS if pad_is_eos else PAD,
        unk_token=UNK,
        additional_special_tokens=[TURN_START, TURN_END, EOD],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    (out / "harness-tokenizer.json").write_text(json.dumps({"vocab_size": VOCAB_SIZE, "eod": EOD}))
    _WRITTEN[key] = out
    return out


def with_distinct_eod(tok: object) -> object:
    """``tok`` re-classed so that ``eod`` is ``<|endoftext|>`` and everything else is unchanged.

    The result is an instance of a subclass of ``tok``'s own class sharing its state, so MB code
    that inspects the tokenizer's type or attributes sees the real tokenizer.
    """
    cls = type(tok)
    sub = _DISTINCT_EOD.get(cls)
    if sub is None:
        eod_id = vocab()[EOD]
        sub = type(
            f"{cls.__name__}WithDistinctEod",
            (cls,),
            {
                "eod": property(lambda self: eod_id),
                "__module__": __name__,
                "__doc__": f"{cls.__name__} whose eod is {EOD} (id {eod_id}), not eos_id: {STANDIN_DISTINCT_EOD}",
            },
        )
        _DISTINCT_EOD[cls] = sub
    new: object = object.__new__(sub)
    new.__dict__.update(tok.__dict__)
    return new


STANDIN_DISTINCT_EOD = "tokenizer with eod != eos_id (the real tokenizer re-classed to answer eod differently)"
_DISTINCT_EOD: dict[type, type] = {}


def special_ids(tok: object) -> dict[str, int | None]:
    """The ids MB's packing code may read, as this tokenizer reports them."""
    out: dict[str, int | None] = {}
    for name in ("eos_id", "eod", "pad_id", "bos_id"):
        try:
            value = getattr(tok, name)
        except Exception:  # a tokenizer without the attribute (era differences)
            value = None
        out[name] = int(value) if value is not None else None
    return out
