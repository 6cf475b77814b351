"""How `select` picks a choice from the choices' token logprobs (SGLang's three methods).

Each method receives, per choice, the logprobs of the choice's own tokens given the
prompt (and, when it asks for them, given a neutral context instead of the prompt).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ChoicesDecision:
    decision: str
    meta_info: dict[str, Any] = field(default_factory=dict)


def mean_logprob(logprobs: list[float]) -> float:
    """Average token logprob; an empty choice (no scored tokens) scores 0."""
    return sum(logprobs) / len(logprobs) if logprobs else 0.0


def argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: values[i])


class ChoicesSamplingMethod(ABC):
    """A rule mapping choices' token logprobs to one decision."""

    requires_unconditional_logprobs: bool = False

    @abstractmethod
    def __call__(
        self,
        *,
        choices: list[str],
        input_token_logprobs: list[list[float]],
        unconditional_token_logprobs: Optional[list[list[float]]] = None,
    ) -> ChoicesDecision: ...


class TokenLengthNormalized(ChoicesSamplingMethod):
    """Pick the choice with the highest average logprob over its tokens (the default)."""

    def __call__(self, *, choices, input_token_logprobs, unconditional_token_logprobs=None):
        scores = [mean_logprob(lp) for lp in input_token_logprobs]
        return ChoicesDecision(choices[argmax(scores)], {"normalized_prompt_logprobs": scores})


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Pick by the first token's logprob; on a tie, compare the next token, and so on.

    A choice shorter than the longest is extended with its own average logprob, so a
    prefix of a longer choice competes with the longer choice at every position.
    """

    def __call__(self, *, choices, input_token_logprobs, unconditional_token_logprobs=None):
        width = max((len(lp) for lp in input_token_logprobs), default=0)
        rows = [lp + [mean_logprob(lp)] * (width - len(lp)) for lp in input_token_logprobs]
        alive = list(range(len(choices)))
        for pos in range(width):
            best = max(rows[i][pos] for i in alive)
            alive = [i for i in alive if rows[i][pos] == best]
            if len(alive) == 1:
                break
        scores = [mean_logprob(lp) for lp in input_token_logprobs]
        return ChoicesDecision(choices[alive[0]], {"normalized_prompt_logprobs": scores})


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """Pick by average logprob given the prompt minus average logprob given a neutral context.

    This discounts choices that are likely regardless of the question; it costs one
    more batched request for the unconditional logprobs.
    """

    requires_unconditional_logprobs = True

    def __call__(self, *, choices, input_token_logprobs, unconditional_token_logprobs=None):
        if unconditional_token_logprobs is None:
            raise ValueError("unconditional_likelihood_normalized needs unconditional_token_logprobs")
        cond = [mean_logprob(lp) for lp in input_token_logprobs]
        uncond = [mean_logprob(lp) for lp in unconditional_token_logprobs]
        scores = [c - u for c, u in zip(cond, uncond)]
        meta = {"normalized_prompt_logprobs": cond, "normalized_unconditional_logprobs": uncond,
                "scores": scores}
        return ChoicesDecision(choices[argmax(scores)], meta)


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()

# The neutral context for unconditional likelihoods (EleutherAI's choice).
UNCONDITIONAL_PREFIX = "Answer:"
