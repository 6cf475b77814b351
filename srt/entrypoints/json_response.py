"""The server's JSON response class: bodies serialized by orjson.

FastAPI deprecates its own `ORJSONResponse` (it prefers typed routes, which ours are not: they
return plain dicts and pydantic dumps), so the server keeps the orjson path in its own class.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class JSONResponse(Response):
    """`application/json` from any value orjson can serialize (non-string dict keys and numpy included)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
