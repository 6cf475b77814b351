"""The frontend language: programs over a state whose generations share cached prefixes.

    import radixlm as rl

    @rl.function
    def qa(s, question):
        s += rl.user(question)
        s += rl.assistant(rl.gen("answer", max_tokens=64))

    rl.set_default_backend(rl.RuntimeEndpoint("http://127.0.0.1:30000"))
    print(qa.run(question="What is 2+2?")["answer"])
"""

from radixlm.lang.api import (
    assistant, assistant_begin, assistant_end, flush_cache, function, gen, get_default_backend, select,
    set_default_backend, system, system_begin, system_end, user, user_begin, user_end,
)
from radixlm.lang.backend.base import BaseBackend
from radixlm.lang.backend.runtime_endpoint import RuntimeEndpoint
from radixlm.lang.chat_template import ChatTemplate, get_chat_template, register_chat_template
from radixlm.lang.choices import (
    ChoicesDecision, ChoicesSamplingMethod, greedy_token_selection, token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixlm.lang.interpreter import ProgramError
from radixlm.lang.program import SglFunction
from radixlm.lang.state import ProgramState, ProgramStateGroup


def __getattr__(name: str):
    if name == "EngineBackend":  # keeps torch out of `import radixlm.lang`
        from radixlm.lang.backend.engine_backend import EngineBackend

        return EngineBackend
    raise AttributeError(name)


__all__ = [
    "function", "gen", "select", "system", "user", "assistant", "system_begin", "system_end",
    "user_begin", "user_end", "assistant_begin", "assistant_end", "set_default_backend",
    "get_default_backend", "flush_cache", "RuntimeEndpoint", "EngineBackend", "BaseBackend",
    "ChatTemplate", "get_chat_template", "register_chat_template", "ChoicesDecision",
    "ChoicesSamplingMethod", "token_length_normalized", "greedy_token_selection",
    "unconditional_likelihood_normalized", "ProgramError", "SglFunction", "ProgramState",
    "ProgramStateGroup",
]
