"""`/v1/models`, `/v1/tokenize` and `/v1/detokenize`: answers from the tokenizer and config alone."""

from __future__ import annotations

from typing import Any

from radixlm.entrypoints.openai.protocol import DetokenizeRequest, ModelCard, ModelList, TokenizeRequest
from radixlm.entrypoints.openai.serving_base import OpenAIError, check_model


class OpenAIServingTokenize:
    def __init__(self, tokenizer_manager: Any) -> None:
        self.tokenizer_manager = tokenizer_manager

    def model_card(self) -> ModelCard:
        tm = self.tokenizer_manager
        return ModelCard(id=tm.served_model_name, root=tm.server_args.model_path or tm.served_model_name,
                         max_model_len=tm.context_len)

    def models(self) -> ModelList:
        return ModelList(data=[self.model_card()])

    def model(self, model: str) -> ModelCard:
        check_model(model, self.tokenizer_manager.served_model_name)
        return self.model_card()

    def tokenize(self, req: TokenizeRequest) -> dict:
        if req.model is not None:
            check_model(req.model, self.tokenizer_manager.served_model_name)
        tokenizer = self.tokenizer_manager.tokenizer
        encode = lambda text: tokenizer.encode(text, add_special_tokens=req.add_special_tokens)  # noqa: E731
        tokens: Any
        if isinstance(req.prompt, str):
            tokens = encode(req.prompt)
            count: Any = len(tokens)
        else:
            tokens = [encode(p) for p in req.prompt]
            count = [len(t) for t in tokens]
        return {"tokens": tokens, "count": count, "max_model_len": self.tokenizer_manager.context_len}

    def detokenize(self, req: DetokenizeRequest) -> dict:
        if req.model is not None:
            check_model(req.model, self.tokenizer_manager.served_model_name)
        tokenizer = self.tokenizer_manager.tokenizer
        vocab = len(tokenizer)
        batch = bool(req.tokens) and isinstance(req.tokens[0], list)
        rows = req.tokens if batch else [req.tokens]
        if any(not 0 <= t < vocab for row in rows for t in row):
            raise OpenAIError(f"token ids must be in [0, {vocab})", 400, "tokens")
        texts = [tokenizer.decode(row) for row in rows]
        return {"text": texts if batch else texts[0]}
