"""Tokenizer loading."""

from __future__ import annotations

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from radixlm.model_loader.resolve import resolve_model_dir


def get_tokenizer(model_dir_or_tokenizer_path: str | None, trust_remote_code: bool = False) -> PreTrainedTokenizerFast:
    """Load the fast tokenizer of a model folder (a `.gguf` or None resolves like --model-path)."""
    folder = resolve_model_dir(model_dir_or_tokenizer_path)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise TypeError(f"{folder} has no fast tokenizer (tokenizer.json); got {type(tokenizer).__name__}")
    return tokenizer
