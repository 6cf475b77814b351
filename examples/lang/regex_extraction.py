"""Regex-constrained extraction: fields generated under a regex (needs the server's `regex`
sampling parameter, from structured output).

    python examples/lang/regex_extraction.py [--url http://127.0.0.1:30000]
"""

import radixlm as rl

# Fields and the regex each value must match.
FIELDS = {
    "name": r"[A-Z][a-z]+ [A-Z][a-z]+",
    "age": r"[1-9][0-9]?",
    "email": r"[a-z]+@[a-z]+\.(com|org)",
}

TEXT = "Contact: Alice Smith is 34 years old; write to alice@example.com for details."


@rl.function
def extract(s, text: str) -> None:
    s += "Extract the person's details from the text.\nText: " + text + "\n"
    for field, regex in FIELDS.items():
        s += f"{field}: " + rl.gen(field, max_tokens=24, regex=regex, temperature=0) + "\n"


def main(backend):
    state = extract.run(text=TEXT, backend=backend)
    for field in FIELDS:
        print(f"{field}: {state[field]}")
    return state


if __name__ == "__main__":
    from common import run_example

    run_example(main, __doc__)
