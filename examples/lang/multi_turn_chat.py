"""A multi-turn chat through the model's chat template, streamed as it is generated.

    python examples/lang/multi_turn_chat.py [--url http://127.0.0.1:30000]
"""

import radixlm as rl


@rl.function
def multi_turn_chat(s, question_1: str, question_2: str) -> None:
    s += rl.system("You are a helpful assistant. Answer in one short sentence.")
    s += rl.user(question_1)
    s += rl.assistant(rl.gen("answer_1", max_tokens=48, temperature=0))
    with s.user():
        s += question_2
    s += rl.assistant(rl.gen("answer_2", max_tokens=48, temperature=0))


def main(backend):
    state = multi_turn_chat.run(question_1="What is the capital of France?",
                                question_2="And what is a famous tower there?", backend=backend, stream=True)
    for chunk in state.text_iter():
        print(chunk, end="", flush=True)
    print()
    for m in state.messages():
        print(f"[{m['role']}] {m['content']}")
    return state


if __name__ == "__main__":
    from common import run_example

    run_example(main, __doc__)
