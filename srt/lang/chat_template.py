"""Chat templates as role prefixes and suffixes, so a program can open and close roles.

A template comes from the model's tokenizer when it has one (`from_renderer` probes the
tokenizer's Jinja template with sentinel messages), else from the registry by name or
by model path (ChatML, Llama-3 instruct, a plain default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from radixlm.lang.ir import ROLES


@dataclass(frozen=True)
class ChatTemplate:
    name: str
    role_prefix_and_suffix: dict[str, tuple[str, str]]
    default_system_prompt: Optional[str] = None  # None: no system turn unless the program adds one
    begin_of_text: str = ""  # emitted before the first role of a conversation
    stop_str: tuple[str, ...] = field(default_factory=tuple)

    def prefix(self, role: str) -> str:
        return self._pair(role)[0]

    def suffix(self, role: str) -> str:
        return self._pair(role)[1]

    def _pair(self, role: str) -> tuple[str, str]:
        if role not in self.role_prefix_and_suffix:
            raise ValueError(f"chat template {self.name!r} has no role {role!r}")
        return self.role_prefix_and_suffix[role]

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
        """The conversation as the model sees it (used to check templates against tokenizers)."""
        out = self.begin_of_text
        if messages and messages[0]["role"] != "system" and self.default_system_prompt is not None:
            out += self.prefix("system") + self.default_system_prompt + self.suffix("system")
        for m in messages:
            out += self.prefix(m["role"]) + m["content"] + self.suffix(m["role"])
        return out + (self.prefix("assistant") if add_generation_prompt else "")


_REGISTRY: dict[str, ChatTemplate] = {}
_MATCHERS: list[tuple[str, str]] = []  # (substring of a lowercased model path, template name)


def register_chat_template(template: ChatTemplate, model_path_substrings: tuple[str, ...] = ()) -> None:
    _REGISTRY[template.name] = template
    _MATCHERS.extend((s, template.name) for s in model_path_substrings)


def get_chat_template(name: str) -> ChatTemplate:
    if name not in _REGISTRY:
        raise ValueError(f"unknown chat template {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def chat_template_names() -> list[str]:
    return sorted(_REGISTRY)


def match_chat_template(model_path: str) -> ChatTemplate:
    """The registered template whose pattern appears in `model_path`, else "default"."""
    lowered = model_path.lower()
    for substring, name in _MATCHERS:
        if substring in lowered:
            return _REGISTRY[name]
    return _REGISTRY["default"]


register_chat_template(ChatTemplate(
    name="default",
    role_prefix_and_suffix={"system": ("", "\n"), "user": ("User: ", "\n"), "assistant": ("Assistant: ", "\n")},
))
register_chat_template(ChatTemplate(
    name="chatml",
    role_prefix_and_suffix={r: (f"<|im_start|>{r}\n", "<|im_end|>\n") for r in ROLES},
    stop_str=("<|im_end|>",),
), model_path_substrings=("qwen", "chatml"))
register_chat_template(ChatTemplate(
    name="smollm2",
    role_prefix_and_suffix={r: (f"<|im_start|>{r}\n", "<|im_end|>\n") for r in ROLES},
    default_system_prompt="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    stop_str=("<|im_end|>",),
), model_path_substrings=("smollm",))
register_chat_template(ChatTemplate(
    name="llama-3-instruct",
    role_prefix_and_suffix={r: (f"<|start_header_id|>{r}<|end_header_id|>\n\n", "<|eot_id|>") for r in ROLES},
    begin_of_text="<|begin_of_text|>",
    stop_str=("<|eot_id|>",),
), model_path_substrings=("llama-3", "llama3"))


# Sentinels without whitespace: templates may trim message content.
_SENTINEL = {"system": "RADIXLMSYSTEM7", "user": "RADIXLMUSER7", "assistant": "RADIXLMASSISTANT7"}

Renderer = Callable[[list[dict[str, str]], bool], str]


def from_renderer(render: Renderer, name: str, bos_token: Optional[str] = None,
                  stop_str: tuple[str, ...] = ()) -> ChatTemplate:
    """Derive role prefixes/suffixes by rendering sentinel conversations.

    `render(messages, add_generation_prompt)` is typically the tokenizer's
    `apply_chat_template(..., tokenize=False)`. Raises ValueError when the template
    does not render a system/user/assistant conversation as concatenated turns.
    """
    convo: list[dict[str, str]] = []
    pairs: dict[str, tuple[str, str]] = {}
    rendered_before = ""
    for role in ROLES:
        convo.append({"role": role, "content": _SENTINEL[role]})
        rendered = render(list(convo), False)
        if not rendered.startswith(rendered_before) or rendered.count(_SENTINEL[role]) != 1:
            raise ValueError(f"chat template {name!r} does not render turns by concatenation")
        turn = rendered[len(rendered_before):]
        prefix, suffix = turn.split(_SENTINEL[role])
        pairs[role] = (prefix, suffix)
        rendered_before = rendered
    begin = ""
    # A BOS that opens only the first turn (Llama-3) is begin-of-text; ChatML's BOS opens every turn.
    if bos_token and pairs["system"][0].startswith(bos_token) and not pairs["user"][0].startswith(bos_token):
        begin = bos_token
        pairs["system"] = (pairs["system"][0][len(bos_token):], pairs["system"][1])
    default_system = _default_system_prompt(render, pairs, begin)
    return ChatTemplate(name, pairs, default_system, begin, tuple(stop_str))


def _default_system_prompt(render: Renderer, pairs: dict[str, tuple[str, str]], begin: str) -> Optional[str]:
    """The system turn the template inserts when a conversation starts without one."""
    user_turn = pairs["user"][0] + _SENTINEL["user"]
    rendered = render([{"role": "user", "content": _SENTINEL["user"]}], False)
    head = rendered[: rendered.index(user_turn)]
    head = head[len(begin):] if head.startswith(begin) else head
    sys_prefix, sys_suffix = pairs["system"]
    if head and head.startswith(sys_prefix) and head.endswith(sys_suffix) and len(head) >= len(sys_prefix) + len(sys_suffix):
        return head[len(sys_prefix): len(head) - len(sys_suffix)]
    return None


def from_tokenizer(tokenizer, name: str = "tokenizer") -> Optional[ChatTemplate]:
    """The tokenizer's own template as a ChatTemplate, or None if it has none usable."""
    if not getattr(tokenizer, "chat_template", None):
        return None

    def render(messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    eos = getattr(tokenizer, "eos_token", None)
    try:
        return from_renderer(render, name, getattr(tokenizer, "bos_token", None), (eos,) if eos else ())
    except Exception:  # a template that raises on system turns, or interleaves turns
        return None
