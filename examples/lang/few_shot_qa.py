"""Few-shot question answering: 16 questions share one few-shot prefix, computed once.

    python examples/lang/few_shot_qa.py [--url http://127.0.0.1:30000]
"""

import radixlm as rl

FEW_SHOT = (
    "Answer each question with one word.\n"
    "Q: What is the capital of France?\nA: Paris\n"
    "Q: What color is the sky on a clear day?\nA: Blue\n"
    "Q: How many legs does a spider have?\nA: Eight\n"
    "Q: What do bees make?\nA: Honey\n"
)

QUESTIONS = [
    "What is the capital of Italy?", "What color is grass?", "How many days are in a week?",
    "What animal barks?", "What is frozen water called?", "What is the opposite of hot?",
    "What do cows drink?", "What is the capital of Spain?", "How many wheels does a bicycle have?",
    "What color is snow?", "What planet do we live on?", "What is the largest ocean?",
    "What do you call a baby cat?", "What gas do we breathe?", "What is two plus two?",
    "What is the capital of Japan?",
]


@rl.function
def few_shot_qa(s, question: str) -> None:
    s += FEW_SHOT
    s += "Q: " + question + "\nA:" + rl.gen("answer", max_tokens=8, stop="\n", temperature=0)


def main(backend) -> list:
    states = few_shot_qa.run_batch([{"question": q} for q in QUESTIONS], backend=backend, progress_bar=True)
    for q, state in zip(QUESTIONS, states):
        meta = state.get_meta_info("answer") or {}
        print(f"{q:45s} -> {state['answer'].strip()!r:20s} cached_tokens={meta.get('cached_tokens')}")
    return states


if __name__ == "__main__":
    from common import run_example

    run_example(main, __doc__)
