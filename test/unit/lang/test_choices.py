"""Select's decision rules, and how a choice's tokens are found in prompt logprobs."""

import math

from radixlm.lang.backend.base import ids_by_position, tokens_after_prefix
from radixlm.lang.choices import (
    greedy_token_selection, token_length_normalized, unconditional_likelihood_normalized,
)


def test_token_length_normalized_picks_best_average() -> None:
    d = token_length_normalized(choices=["a", "b", "c"], input_token_logprobs=[[-1.0, -3.0], [-1.5], [-0.5, -4.0]])
    assert d.decision == "b"
    assert d.meta_info["normalized_prompt_logprobs"] == [-2.0, -1.5, -2.25]


def test_greedy_token_selection_uses_first_token_then_breaks_ties() -> None:
    d = greedy_token_selection(choices=["x", "y"], input_token_logprobs=[[-0.1, -9.0], [-0.2, -0.1]])
    assert d.decision == "x"  # best first token, though its average is worse
    tie = greedy_token_selection(choices=["x", "y"], input_token_logprobs=[[-0.5, -2.0], [-0.5, -1.0]])
    assert tie.decision == "y"
    # a shorter choice is padded with its own average when compared with a longer one
    padded = greedy_token_selection(choices=["Paris", "Paris!"], input_token_logprobs=[[-0.5], [-0.5, -0.7]])
    assert padded.decision == "Paris"


def test_unconditional_likelihood_normalized_discounts_prior() -> None:
    d = unconditional_likelihood_normalized(
        choices=["common", "apt"], input_token_logprobs=[[-1.0], [-1.2]],
        unconditional_token_logprobs=[[-0.5], [-3.0]])
    assert d.decision == "apt"
    assert math.isclose(d.meta_info["scores"][1], 1.8)


def _meta(prompt_tokens: int, start: int, ids: list[int], logprobs: list) -> dict:
    assert prompt_tokens - start == len(ids)
    return {"prompt_tokens": prompt_tokens, "input_token_logprobs": [[lp, t, None] for lp, t in zip(logprobs, ids)]}


def test_choice_tokens_start_after_the_prefix() -> None:
    prefix = _meta(10, 8, [5, 6], [-0.1, -0.2])
    choice = _meta(12, 8, [5, 6, 7, 8], [-0.1, -0.2, -1.0, -2.0])
    assert tokens_after_prefix(choice, ids_by_position(prefix), 10) == [-1.0, -2.0]


def test_choice_merging_with_the_prefix_end_is_scored_from_the_merge() -> None:
    prefix = _meta(10, 8, [5, 6], [-0.1, -0.2])
    merged = _meta(11, 8, [5, 99, 7], [-0.1, -3.0, -1.0])  # the prefix's last token merged into 99
    assert tokens_after_prefix(merged, ids_by_position(prefix), 10) == [-3.0, -1.0]


def test_empty_prefix_scores_every_token_with_a_logprob() -> None:
    choice = _meta(3, 0, [1, 2, 3], [None, -1.0, -2.0])
    assert tokens_after_prefix(choice, {}, 0) == [-1.0, -2.0]
