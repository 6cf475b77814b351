"""A `select` classifier: every label is scored in one batched request from prompt logprobs.

    python examples/lang/select_classifier.py [--url http://127.0.0.1:30000]
"""

import radixlm as rl

LABELS = ["positive", "negative"]

REVIEWS = [
    "I loved this movie, the acting was wonderful.",
    "Terrible food and rude staff. Never again.",
    "What a great day at the beach with friends!",
    "The product broke after one day, awful quality.",
]


@rl.function
def classify(s, review: str, method=rl.token_length_normalized) -> None:
    s += rl.user(f"Is the sentiment of this review positive or negative?\nReview: {review}")
    s += rl.assistant("Sentiment: " + rl.select("sentiment", choices=LABELS, choices_method=method))


def main(backend) -> list:
    states = classify.run_batch([{"review": r} for r in REVIEWS], backend=backend)
    for review, state in zip(REVIEWS, states):
        scores = state.get_meta_info("sentiment")["normalized_prompt_logprobs"]
        print(f"{state['sentiment']:9s} {[round(x, 3) for x in scores]}  {review}")
    return states


if __name__ == "__main__":
    from common import run_example

    run_example(main, __doc__)
