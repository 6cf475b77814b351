"""`EngineBackend`: programs run against an in-process `radixlm.Engine`.

`Engine.generate` may be called from many threads at once (it submits to the engine's
own event loop), so fork branches and run_batch items reach the scheduler concurrently
and are batched there, as they would be over HTTP.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from radixlm.lang.backend.base import BaseBackend, Response
from radixlm.lang.chat_template import ChatTemplate, from_tokenizer, get_chat_template, match_chat_template


class EngineBackend(BaseBackend):
    def __init__(self, engine: Any = None, chat_template: Optional[str] = None, **engine_kwargs: Any) -> None:
        """Wrap `engine`, or start one with `Engine(**engine_kwargs)` (shut down by `shutdown()`)."""
        super().__init__()
        self._owns_engine = engine is None
        if engine is None:
            from radixlm.entrypoints.engine import Engine  # heavy: torch, model loading

            engine = Engine(**engine_kwargs)
        self.engine = engine
        self.chat_template_name = chat_template

    def generate_raw(self, payload: dict[str, Any]) -> Response:
        args = {k: v for k, v in payload.items() if k != "text"}
        return self.engine.generate(prompt=payload["text"], **args)

    def generate_raw_stream(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The engine streams increments; the language reads cumulative text like HTTP's."""
        args = {k: v for k, v in payload.items() if k not in ("text", "stream")}
        text = ""
        for chunk in self.engine.generate(prompt=payload["text"], stream=True, **args):
            text += chunk.get("text", "")
            yield {**chunk, "text": text}

    def flush_cache(self) -> bool:
        return bool(self.engine.flush_cache())

    def load_chat_template(self) -> ChatTemplate:
        if self.chat_template_name:
            return get_chat_template(self.chat_template_name)
        tokenizer = self.engine.tokenizer_manager.tokenizer
        template = from_tokenizer(tokenizer, name="engine")
        return template or match_chat_template(str(getattr(tokenizer, "name_or_path", "")))

    def shutdown(self) -> None:
        if self._owns_engine:
            self.engine.shutdown()
