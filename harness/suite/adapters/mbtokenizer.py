"""MB's tokenizer builder on a local Hugging Face tokenizer directory, per era.

``load_tokenizer(directory, chat_template=None)`` (an era adapter; see :mod:`harness.suite.adapters`)
builds the tokenizer as ``TokenizerConfig(tokenizer_type="HuggingFaceTokenizer",
tokenizer_model=directory)`` does in a recipe (:mod:`harness.suite.oracle.tokenizer` writes the
directory), with the user's own chat template where the era's config takes one. Apart from the
SFT builder (:mod:`harness.suite.adapters.sft`) because every data path's cases take a tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.suite.adapters import Candidate, Operation, Untestable, accepts, symbol


def _tokenizer_probe(config_module: str) -> Callable[[], Callable[..., object]]:
    def probe() -> Callable[..., object]:
        cfg_cls = symbol(config_module, "TokenizerConfig")
        build = symbol("megatron.bridge.training.tokenizers.tokenizer", "build_tokenizer")

        # 2025 eras: build_tokenizer(config, make_vocab_size_divisible_by, tensor_model_parallel_size)
        extra = {
            k: v
            for k, v in (("make_vocab_size_divisible_by", 128), ("tensor_model_parallel_size", 1))
            if accepts(build, k)
        }

        def call(directory: Path, chat_template: str | None = None) -> object:
            """MB's tokenizer over ``directory``; ``chat_template``: the user's own template, set
            where the era's ``TokenizerConfig`` takes one (``chat_template``, else the Hugging Face
            kwargs), instead of the one the directory ships."""
            kwargs: dict[str, object] = {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(directory)}
            template = Path(directory) / "chat_template.jinja"
            if chat_template is None and template.is_file():
                shipped: str | None = template.read_text()
            else:
                shipped = chat_template
            if chat_template is not None and accepts(cfg_cls, "chat_template"):
                kwargs["chat_template"] = chat_template
            elif shipped is not None and accepts(cfg_cls, "hf_tokenizer_kwargs"):
                # Late-2025 eras build MCore's tokenizer, whose Hugging Face wrapper calls
                # AutoTokenizer.from_pretrained(chat_template=None) unless the template is named,
                # dropping the one the directory ships: every chat case raised there, so a chat fix
                # of that era could not show. The same template, named where both the legacy and
                # MCore tokenizers read it.
                kwargs["hf_tokenizer_kwargs"] = {"chat_template": shipped}
            elif chat_template is not None:
                raise Untestable("TokenizerConfig takes no chat template of the user's own in this era")
            return build(cfg_cls(**kwargs), **extra)

        return call

    return probe


load_tokenizer = Operation(
    "load_tokenizer",
    [
        Candidate(
            "training/tokenizers/config.TokenizerConfig", _tokenizer_probe("megatron.bridge.training.tokenizers.config")
        ),
        Candidate("training/config.TokenizerConfig", _tokenizer_probe("megatron.bridge.training.config")),
    ],
)
