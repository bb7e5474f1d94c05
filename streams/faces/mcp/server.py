"""Agent tools, MCP edge: `recall mcp` — the PROTOCOL §6 tools over stdio or streamable HTTP."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server import Server, ServerRequestContext

from streams.facade import Recall
from streams.faces.mcp.auth import Caller
from streams.faces.mcp.errors import TIMED_OUT, ToolError
from streams.faces.mcp.live import RunningSession, no_caller
from streams.faces.mcp.tools import DESCRIPTIONS, EXCLUSIVE, INSTRUCTIONS, SessionTools

log = logging.getLogger("recall.mcp")

DEFAULT_SEARCH_TIMEOUT_MS = 30_000
ROOTS_TIMEOUT_S = 5.0
_READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                   idempotent_hint=True, open_world_hint=False)


@dataclass(frozen=True)
class ServerOptions:
    """Identity and limits of one server process. The caller identity is configuration, never
    something a tool argument could claim."""

    session_id: str | None = None
    cwd: str | None = None
    max_search_results: int = 100
    search_timeout_ms: int = DEFAULT_SEARCH_TIMEOUT_MS
    #: Without a session id: the caller is the session a `recall hook` reported most recently
    #: for the workspace (streams/faces/mcp/live.py).
    session_from_hooks: bool = False
    data_dir: Path | None = None


def normalize_cwd(path: str | None) -> str | None:
    """Absolute, without a trailing slash: header cwds are written that way."""
    if path is None or not path.strip():
        return None
    return os.path.abspath(os.path.expanduser(path))


def root_to_cwd(roots: types.ListRootsResult) -> str | None:
    """The first `file://` root the client declared, as a local path."""
    for root in roots.roots:
        parsed = urlparse(str(root.uri))
        if parsed.scheme == "file" and parsed.path:
            return normalize_cwd(unquote(parsed.path))
    return None


async def client_root(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Ask the client for its roots when it declared the capability; any failure (no back
    channel, timeout, bad answer) simply means 'no workspace'."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.roots is None:
        return None
    try:
        with anyio.fail_after(ROOTS_TIMEOUT_S), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots are deprecated upstream, still the signal
            roots = await ctx.session.list_roots()
    except Exception as exc:
        log.warning("client roots unavailable: %s", type(exc).__name__)
        return None
    return root_to_cwd(roots)


class ToolServer:
    """The MCP server around a `SessionTools` layer. Tool calls run one at a time in a worker
    thread (the embedded index is one SQLite connection per shard), exclusive ones under the
    search timeout."""

    def __init__(self, recall: Recall, options: ServerOptions) -> None:
        self.options = options
        self.tools = SessionTools(recall, max_search_results=options.max_search_results)
        self.running = RunningSession(recall, options.data_dir)
        self.limiter = anyio.CapacityLimiter(1)
        self.server: Server[Any] = Server(
            "session-recall", version="0.1.0", instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=name, description=DESCRIPTIONS[name],
                       input_schema=self.tools.schema(name),
                       annotations=_READ_ONLY)
            for name in self.tools.names()])

    async def caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        """The configured cwd; else the client's first `file://` root, but only if it agrees
        with the caller's own stored header: a root naming another directory than the header's
        cwd is ignored (no workspace), so a client can never widen its own workspace."""
        cwd = self.options.cwd
        if self.options.session_id is None and self.options.session_from_hooks:
            session_id, where = self.running.from_hooks(cwd)
            return Caller(session_id, where)
        if cwd is None:
            cwd = await client_root(ctx)
            if cwd is not None and self.options.session_id is not None:
                stored, own = await anyio.to_thread.run_sync(self._own_cwd,
                                                             limiter=self.limiter)
                if stored and own != cwd:
                    log.warning("client root ignored: it is not the caller's recorded cwd")
                    cwd = None
        return Caller(self.options.session_id, cwd)

    def startup_note(self) -> str | None:
        """Said on stderr at start-up when no tool call could know its caller yet."""
        if self.options.session_id is not None:
            return None
        if self.options.session_from_hooks:
            session_id, where = self.running.from_hooks(self.options.cwd)
            if session_id is not None:
                return None
            return f"no caller yet: {no_caller(True, where)}"
        return f"no caller: {no_caller(False, None)}"

    def _own_cwd(self) -> tuple[bool, str | None]:
        """(stored?, cwd) of the caller's own session header."""
        session_id = self.options.session_id
        try:
            found = self.tools.recall.filter_sessions([{"kind": "id", "values": [session_id]}])
        except Exception as exc:  # unreadable index: trust no root; the tool call reports it
            log.warning("caller's header unavailable: %s", type(exc).__name__)
            return True, None
        for record in found:
            header = record.get("header") or {}
            if header.get("id") == session_id:
                cwd = header.get("cwd")
                return True, cwd if isinstance(cwd, str) else None
        return False, None

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        caller = await self.caller(ctx)
        name, arguments = params.name, dict(params.arguments or {})
        if caller.session_id is None:
            text = (f"Error: session query tools need the calling agent's session; "
                    f"{no_caller(self.options.session_from_hooks, caller.cwd)}.")
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                        is_error=True)
        missing = await anyio.to_thread.run_sync(self._running, name, arguments,
                                                 caller.session_id, limiter=self.limiter)
        if missing is not None:
            return types.CallToolResult(content=[types.TextContent(type="text", text=missing)],
                                        is_error=True)
        try:
            if name in EXCLUSIVE:
                with anyio.fail_after(self.options.search_timeout_ms / 1000):
                    answer = await self._run(name, arguments, caller)
            else:
                answer = await self._run(name, arguments, caller)
            text, is_error = answer.text, answer.is_error
        except TimeoutError:
            text, is_error = ToolError(TIMED_OUT).render(), True
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=is_error)

    def _running(self, name: str, arguments: dict[str, Any], session_id: str) -> str | None:
        """Ingest the caller's grown transcript first; say clearly if its session is missing."""
        self.running.refresh(session_id)
        return self.running.missing(name, arguments, session_id)

    async def _run(self, name: str, arguments: dict[str, Any], caller: Caller) -> Any:
        # abandon_on_cancel: a timed-out search finishes in the background; the caller is free.
        return await anyio.to_thread.run_sync(self.tools.call, name, arguments, caller,
                                              abandon_on_cancel=True, limiter=self.limiter)

    async def serve_stdio(self) -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream,
                                  self.server.create_initialization_options())

    async def serve_http(self, host: str, port: int, token: str) -> None:
        import uvicorn

        from streams.faces.mcp.bearer import BearerGate

        app = BearerGate(self.server.streamable_http_app(host=host), token)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                lifespan="on")
        await uvicorn.Server(config).serve()


def parse_http(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or just `PORT` (bound to 127.0.0.1)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http expects HOST:PORT, got {value!r}")
    return host, int(port)


def serve(recall: Recall, options: ServerOptions, *, http: str | None = None,
          data_dir: Path | None = None) -> None:
    """Run until the client disconnects (stdio) or the process is stopped (HTTP)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="recall mcp: %(levelname)s %(message)s")
    server = ToolServer(recall, options)
    note = server.startup_note()
    if note is not None:
        print(f"recall mcp: {note}", file=sys.stderr, flush=True)
    if http is None:
        anyio.run(server.serve_stdio)
        return
    from streams.faces.mcp.bearer import load_or_create_token

    host, port = parse_http(http)
    token, path = load_or_create_token(data_dir or Path(recall.settings.data_dir))
    print(f"recall mcp: listening on http://{host}:{port}/mcp", file=sys.stderr)
    print(f"recall mcp: bearer token {token} (stored in {path})", file=sys.stderr, flush=True)
    anyio.run(server.serve_http, host, port, token)
