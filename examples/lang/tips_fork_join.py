"""Fork-join: the shared prefix is prefilled once, two branches expand a tip each in
parallel, and `join()` gathers their results into the parent as a list.

    python examples/lang/tips_fork_join.py [--url http://127.0.0.1:30000]
"""

import radixlm as rl


@rl.function
def tips(s, topic: str) -> None:
    s += f"Here are two tips for {topic}: 1. Balanced diet. 2. Regular exercise.\n\n"
    forks = s.fork(2)
    for i, branch in enumerate(forks):
        branch += f"Now, expand tip {i + 1} into a short paragraph:\n"
        branch += rl.gen("detailed_tip", max_tokens=48, stop="\n\n", temperature=0)
    forks.join()
    s += "Tip 1: " + s["detailed_tip"][0] + "\nTip 2: " + s["detailed_tip"][1] + "\n"
    s += "In summary," + rl.gen("summary", max_tokens=32, stop="\n\n", temperature=0)


def main(backend):
    state = tips.run(topic="staying healthy", backend=backend)
    print(state.text())
    for i, meta in enumerate(state.get_meta_info("detailed_tip")):
        print(f"branch {i}: prompt_tokens={meta['prompt_tokens']} cached_tokens={meta['cached_tokens']}")
    return state


if __name__ == "__main__":
    from common import run_example

    run_example(main, __doc__)
