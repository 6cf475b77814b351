"""radixlm: a fast LLM serving runtime with a frontend language (public names follow SGLang).

Public names are imported lazily so that `import radixlm` stays light (no torch).
"""

import importlib

_LAZY_EXPORTS: dict[str, str] = {}  # public name -> module that defines it

# >>> lang exports (owner: lang helper; edit only inside this block) >>>
_LAZY_EXPORTS.update({name: "radixlm.lang" for name in (
    "function", "gen", "select", "system", "user", "assistant", "system_begin", "system_end",
    "user_begin", "user_end", "assistant_begin", "assistant_end", "set_default_backend",
    "get_default_backend", "flush_cache", "RuntimeEndpoint", "EngineBackend", "ProgramState",
    "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
)})
# <<< lang exports <<<

# >>> serving exports (owner: serving helper; edit only inside this block) >>>
_LAZY_EXPORTS.update({"Engine": "radixlm.entrypoints.engine", "ServerArgs": "radixlm.server_args"})
# <<< serving exports <<<


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        value = getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'radixlm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY_EXPORTS))
