"""GenerateReqInput -> validated TokenizedGenerateReqInput(s).

A request is single (one prompt, n == 1) or a batch (a list of prompts, or n > 1). Batches
expand prompt-major: prompt 0 samples 0..n-1, then prompt 1, ... Every error is a
ValueError whose message names the offending parameter.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from radixlm.constrained import validate_sampling_params_grammar
from radixlm.managers.io_struct import GenerateReqInput, TokenizedGenerateReqInput
from radixlm.sampling.sampling_params import SamplingParams


@dataclass
class ExpandedRequest:
    reqs: list[TokenizedGenerateReqInput]  # prompt-major, n per prompt
    is_batch: bool
    num_prompts: int
    n: int
    return_text_in_logprobs: bool


def _per_prompt(value: Any, num: int, name: str) -> list:
    if isinstance(value, list):
        if len(value) != num:
            raise ValueError(f"{name} has {len(value)} entries but there are {num} prompts")
        return value
    return [value] * num


def _prompts(obj: GenerateReqInput, tokenizer: Any) -> tuple[list[list[int]], bool]:
    if (obj.text is None) == (obj.input_ids is None):
        raise ValueError("exactly one of text and input_ids must be given")
    if obj.text is not None:
        texts = obj.text if isinstance(obj.text, list) else [obj.text]
        for t in texts:
            if not isinstance(t, str):
                raise ValueError(f"text must be a string or a list of strings, got {type(t).__name__}")
            if not t:
                raise ValueError("text: the prompt is empty")
        return [tokenizer.encode(t) for t in texts], isinstance(obj.text, list)
    ids = obj.input_ids
    if not isinstance(ids, list):
        raise ValueError("input_ids must be a list of ints or a list of lists of ints")
    is_batch = bool(ids) and isinstance(ids[0], list)
    batch = ids if is_batch else [ids]
    for seq in batch:
        if not isinstance(seq, list) or not seq:
            raise ValueError("input_ids: the prompt is empty")
        if set(map(type, seq)) != {int}:  # not bool (an int subclass) and the like; one C-level pass
            raise ValueError("input_ids must contain only ints")
    return [list(s) for s in batch], is_batch


def _check_lengths(ids: list[int], params: SamplingParams, context_len: int, vocab_size: int) -> None:
    if len(ids) >= context_len:
        raise ValueError(f"the input ({len(ids)} tokens) is longer than the model's context length "
                         f"({context_len} tokens)")
    if len(ids) + params.max_new_tokens > context_len:
        raise ValueError(f"the input ({len(ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) is longer "
                         f"than the model's context length ({context_len} tokens)")
    if min(ids) >= 0 and max(ids) < vocab_size:  # C-level passes; the offending id is looked up only on error
        return
    bad = next((t for t in ids if t < 0 or t >= vocab_size), None)
    if bad is not None:
        raise ValueError(f"input_ids contains token id {bad}, outside the vocabulary (size {vocab_size})")


def expand_request(obj: GenerateReqInput, tokenizer: Any, context_len: int, vocab_size: int,
                   grammar_backend: str = "xgrammar") -> ExpandedRequest:
    prompts, is_batch = _prompts(obj, tokenizer)
    num = len(prompts)
    raw_params = obj.sampling_params
    if raw_params is not None and not isinstance(raw_params, (dict, list)):
        raise ValueError("sampling_params must be a dict or a list of dicts")
    params_list = [SamplingParams.from_dict(p) for p in _per_prompt(raw_params, num, "sampling_params")]
    for p in params_list:
        p.verify(vocab_size)
        validate_sampling_params_grammar(p, backend=grammar_backend)  # a parse only; the compile is the scheduler's
    ns = {p.n for p in params_list}
    if len(ns) > 1:
        raise ValueError("n must be the same for every prompt of a batch")
    n = ns.pop()
    rids = _per_prompt(obj.rid, num, "rid") if obj.rid is not None else [None] * num
    return_logprob = _per_prompt(obj.return_logprob, num, "return_logprob")
    start_lens = _per_prompt(obj.logprob_start_len, num, "logprob_start_len")
    top_nums = _per_prompt(obj.top_logprobs_num, num, "top_logprobs_num")
    salts = _per_prompt(obj.cache_salt, num, "cache_salt")
    reasoning = _per_prompt(obj.require_reasoning, num, "require_reasoning")
    if not all(isinstance(r, bool) for r in reasoning):
        raise ValueError(f"require_reasoning must be a bool (or one per prompt), got {obj.require_reasoning!r}")
    reqs: list[TokenizedGenerateReqInput] = []
    for i, (ids, params) in enumerate(zip(prompts, params_list)):
        _check_lengths(ids, params, context_len, vocab_size)
        if not isinstance(top_nums[i], int) or top_nums[i] < 0:
            raise ValueError(f"top_logprobs_num must be a non-negative int, got {top_nums[i]!r}")
        if not isinstance(start_lens[i], int) or start_lens[i] >= len(ids):
            raise ValueError(f"logprob_start_len ({start_lens[i]}) must be < the input length ({len(ids)})")
        base_rid = rids[i] or uuid.uuid4().hex
        for k in range(n):
            seed = None if params.seed is None else params.seed + k
            sample_params = dataclasses.replace(params, n=1, seed=seed).normalize()
            reqs.append(TokenizedGenerateReqInput(
                rid=base_rid if n == 1 else f"{base_rid}-{k}", input_ids=ids, sampling_params=sample_params,
                stream=obj.stream, return_logprob=bool(return_logprob[i]), logprob_start_len=start_lens[i],
                top_logprobs_num=top_nums[i], cache_salt=salts[i], require_reasoning=reasoning[i]))
    return ExpandedRequest(reqs, is_batch or n > 1, num, n, obj.return_text_in_logprobs)


def prefill_only(req: TokenizedGenerateReqInput) -> TokenizedGenerateReqInput:
    """The shared prefill of n samples: the prompt with max_new_tokens=0 (fills the radix cache)."""
    params = dataclasses.replace(req.sampling_params, max_new_tokens=0, min_new_tokens=0)
    return TokenizedGenerateReqInput(rid=f"{req.rid}-prefill-{uuid.uuid4().hex[:8]}", input_ids=req.input_ids,
                                     sampling_params=params, cache_salt=req.cache_salt)


def first_of_each_prompt(expanded: ExpandedRequest) -> list[TokenizedGenerateReqInput]:
    return [expanded.reqs[i * expanded.n] for i in range(expanded.num_prompts)]


def unknown_request_keys(kwargs: dict) -> Optional[str]:
    names = {f.name for f in dataclasses.fields(GenerateReqInput)}
    bad = sorted(set(kwargs) - names)
    return ", ".join(bad) if bad else None
