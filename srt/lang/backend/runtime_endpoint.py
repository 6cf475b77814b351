"""`RuntimeEndpoint`: a backend over a running server's native HTTP endpoints."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Iterator, Optional

from radixlm.lang.backend.base import BaseBackend, Response
from radixlm.lang.chat_template import ChatTemplate, from_tokenizer, get_chat_template, match_chat_template


class RuntimeEndpoint(BaseBackend):
    """Talks to `/generate`, `/get_model_info` and `/flush_cache` of a radixlm server.

    The chat template is the server tokenizer's own when its folder is readable from
    here, else the registered one matching the model path, else `chat_template=` wins.
    """

    def __init__(self, base_url: str, api_key: Optional[str] = None, chat_template: Optional[str] = None,
                 timeout_s: float = 600.0) -> None:
        super().__init__()
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.chat_template_name = chat_template
        self.model_info = self._request("GET", "/get_model_info")

    # ---- transport ----
    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, method: str, path: str, body: Optional[dict[str, Any]]):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=self._headers())
        try:
            return urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise RuntimeError(f"{method} {path} failed with HTTP {e.code}: {detail}") from None

    def _request(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> Any:
        with self._open(method, path, body) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def generate_raw(self, payload: dict[str, Any]) -> Response:
        return self._request("POST", "/generate", payload)

    def generate_raw_stream(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        with self._open("POST", "/generate", {**payload, "stream": True}) as resp:
            for raw_line in resp:
                line = raw_line.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"/generate stream failed: {chunk['error']}")
                yield chunk

    def flush_cache(self) -> bool:
        """False when the server refuses (it flushes only while idle)."""
        try:
            with self._open("POST", "/flush_cache", None) as resp:
                return 200 <= resp.status < 300
        except RuntimeError:
            return False

    # ---- chat template ----
    def load_chat_template(self) -> ChatTemplate:
        if self.chat_template_name:
            return get_chat_template(self.chat_template_name)
        tokenizer_path = self.model_info.get("tokenizer_path") or self.model_info.get("model_path") or ""
        if tokenizer_path and os.path.isdir(tokenizer_path):
            from transformers import AutoTokenizer  # heavy; only when the folder is local

            template = from_tokenizer(AutoTokenizer.from_pretrained(tokenizer_path), name=tokenizer_path)
            if template is not None:
                return template
        return match_chat_template(self.model_info.get("model_path") or tokenizer_path)
