"""`/v1/completions`: prompt(s) -> GenerateReqInput -> CompletionResponse or an SSE stream."""

from __future__ import annotations

import dataclasses
from typing import Any, AsyncIterator, Optional

from radixlm.entrypoints.openai.protocol import (
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse, CompletionStreamResponse,
)
from radixlm.entrypoints.openai.serving_base import (
    OpenAIError, OpenAIServingBase, build_usage, check_context_length, check_max_tokens, check_model,
    check_stream_options, chunk_usage, finish_reason, new_rid, sampling_params, sse, sse_stream, stream_usage,
    token_text,
)
from radixlm.managers.io_struct import GenerateReqInput

MAX_LOGPROBS = 20


@dataclasses.dataclass
class CompletionPlan:
    """The request after validation: tokenized prompts and the generate call to make."""

    request: CompletionRequest
    rid: str
    prompt_ids: list[list[int]]
    prompt_texts: list[str]
    obj: GenerateReqInput


def token_logprob_entries(entries: list, tops: Optional[list], tokenizer: Any) -> list[tuple]:
    """(logprob, token_id, text|None) tuples + top lists -> (token text, logprob, {text: logprob} | None)."""
    rows = []
    for i, (logprob, token_id, text) in enumerate(entries):
        top = tops[i] if tops is not None and i < len(tops) else None
        top_dict = None if top is None else {token_text(t, tt, tokenizer): lp for lp, t, tt in top}
        rows.append((token_text(token_id, text, tokenizer), logprob, top_dict))
    return rows


class OpenAIServingCompletion(OpenAIServingBase):
    # ---- request -> plan --------------------------------------------------------------

    def plan(self, req: CompletionRequest) -> CompletionPlan:
        check_model(req.model, self.served_model_name)
        check_stream_options(req)
        if req.suffix:
            raise OpenAIError("suffix is not supported", 400, "suffix")
        if req.best_of is not None and req.best_of != req.n:
            raise OpenAIError("best_of must equal n (best-of sampling is not supported)", 400, "best_of")
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_LOGPROBS:
            raise OpenAIError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {req.logprobs}", 400, "logprobs")
        prompt_ids = self.tokenize_prompts(req.prompt)
        max_new = req.max_tokens
        check_max_tokens(max_new)
        for ids in prompt_ids:
            check_context_length(len(ids), max_new, self.context_len)
        if max_new is None:
            max_new = self.context_len - max(len(ids) for ids in prompt_ids)
        rid = new_rid(req)
        batch = len(prompt_ids) > 1
        obj = GenerateReqInput(
            input_ids=prompt_ids if batch else prompt_ids[0],
            sampling_params=sampling_params(req, max_new, self.tokenizer_manager.server_args.grammar_backend),
            rid=[f"{rid}-{i}" for i in range(len(prompt_ids))] if batch else rid,
            return_logprob=req.logprobs is not None,
            logprob_start_len=0 if req.echo and req.logprobs is not None else -1,
            top_logprobs_num=req.logprobs or 0,
            return_text_in_logprobs=True,
            stream=req.stream,
            cache_salt=[req.cache_salt] * len(prompt_ids) if batch else req.cache_salt,
        )
        texts = [self.tokenizer.decode(ids) for ids in prompt_ids] if req.echo else [""] * len(prompt_ids)
        return CompletionPlan(req, rid, prompt_ids, texts, obj)

    def tokenize_prompts(self, prompt: Any) -> list[list[int]]:
        if isinstance(prompt, str):
            prompts: list = [prompt]
        elif prompt and all(isinstance(p, int) for p in prompt):
            prompts = [list(prompt)]
        else:
            prompts = list(prompt)
        if not prompts:
            raise OpenAIError("prompt must not be empty", 400, "prompt")
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        if any(len(x) == 0 for x in ids):
            raise OpenAIError("prompt must not be empty", 400, "prompt")
        vocab = len(self.tokenizer)
        if any(not 0 <= t < vocab for x in ids for t in x):
            raise OpenAIError(f"prompt token ids must be in [0, {vocab})", 400, "prompt")
        return ids

    # ---- outputs -> response ------------------------------------------------------------

    def response(self, plan: CompletionPlan, outputs: list[dict]) -> CompletionResponse:
        n = plan.request.n
        choices = []
        for index, out in enumerate(outputs):
            reason, matched = finish_reason(out["meta_info"])
            text = plan.prompt_texts[index // n] + out["text"]
            choices.append(CompletionChoice(index=index, text=text, finish_reason=reason, matched_stop=matched,
                                            logprobs=self.logprobs(plan, out, 0, 0, echo=True)))
        return CompletionResponse(id=f"cmpl-{plan.rid}", model=plan.request.model, choices=choices,
                                  usage=build_usage(outputs, n))

    def logprobs(self, plan: CompletionPlan, out: dict, sent: int, offset: int,
                 echo: bool) -> Optional[CompletionLogprobs]:
        """Logprobs of output tokens from `sent` on (plus the prompt's when echoing)."""
        if plan.request.logprobs is None:
            return None
        meta = out["meta_info"]
        rows = []
        if echo and plan.request.echo:
            rows += token_logprob_entries(meta.get("input_token_logprobs") or [],
                                          meta.get("input_top_logprobs"), self.tokenizer)
        rows += token_logprob_entries((meta.get("output_token_logprobs") or [])[sent:],
                                      (meta.get("output_top_logprobs") or [])[sent:], self.tokenizer)
        result = CompletionLogprobs()
        for text, logprob, top in rows:
            result.tokens.append(text)
            result.token_logprobs.append(logprob)
            result.top_logprobs.append(top)
            result.text_offset.append(offset)
            offset += len(text)
        return result

    # ---- streaming ------------------------------------------------------------------------

    def stream(self, plan: CompletionPlan, first: dict, stream: AsyncIterator) -> AsyncIterator[bytes]:
        state = _StreamState()

        def usage_chunk() -> Optional[bytes]:
            usage = stream_usage(plan.request, state.last)
            return usage and sse(CompletionStreamResponse(
                id=f"cmpl-{plan.rid}", model=plan.request.model, choices=[], usage=usage))

        return sse_stream(self.tokenizer_manager, first, stream, lambda out: self.chunks(plan, state, out),
                          usage_chunk, plan.obj.rid)

    def chunks(self, plan: CompletionPlan, state: "_StreamState", out: dict) -> list[bytes]:
        index = out.get("index", 0)
        state.last[index] = out
        prefix = ""
        if index not in state.text_len:
            state.text_len[index] = state.tokens_sent[index] = state.offset[index] = 0
            prefix = plan.prompt_texts[index // plan.request.n]
        delta = prefix + out["text"][state.text_len[index]:]
        logprobs = self.logprobs(plan, out, state.tokens_sent[index], state.offset[index], echo=bool(prefix))
        reason, matched = finish_reason(out["meta_info"])
        if logprobs is not None:
            state.offset[index] += sum(len(t) for t in logprobs.tokens)
        state.text_len[index] = len(out["text"])
        state.tokens_sent[index] = len(out["meta_info"].get("output_token_logprobs") or [])
        if not (delta or reason or (logprobs and logprobs.tokens)):
            return []
        choice = CompletionChoice(index=index, text=delta, logprobs=logprobs, finish_reason=reason,
                                  matched_stop=matched)
        return [sse(CompletionStreamResponse(id=f"cmpl-{plan.rid}", model=plan.request.model, choices=[choice],
                                             usage=chunk_usage(plan.request, out)))]


@dataclasses.dataclass
class _StreamState:
    text_len: dict[int, int] = dataclasses.field(default_factory=dict)
    tokens_sent: dict[int, int] = dataclasses.field(default_factory=dict)
    offset: dict[int, int] = dataclasses.field(default_factory=dict)
    last: dict[int, dict] = dataclasses.field(default_factory=dict)
