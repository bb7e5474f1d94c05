"""Agent tools, HTTP edge: the bearer token — created once, stored owner-only, checked per request."""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from streams.facade import private_dir

TOKEN_FILE = "mcp-token"

Scope = dict[str, Any]
Receive = Any
Send = Any


def load_or_create_token(data_dir: Path, name: str = TOKEN_FILE) -> tuple[str, Path]:
    """The token under the data dir; created with mode 0600 (O_EXCL, so two servers starting at
    once agree on one token). A file left with wider permissions is tightened first. `name`:
    the file (`recall ui` keeps its own token beside the MCP server's)."""
    directory = private_dir(Path(data_dir))
    path = directory / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token, path
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token, path


class BearerGate:
    """ASGI wrapper: an HTTP request without `Authorization: Bearer <token>` gets 401 before it
    reaches the MCP app. Lifespan events pass through untouched."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http":
            presented = next((value for name, value in scope.get("headers", [])
                              if name.lower() == b"authorization"), b"")
            # Constant-time comparison: the token must not leak through response timing.
            if not hmac.compare_digest(presented, self.expected):
                body = b'{"error":"unauthorized","message":"missing or wrong bearer token"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="recall-mcp"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
