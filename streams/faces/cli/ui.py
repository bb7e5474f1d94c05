"""Entry point for people: `recall ui` serves the web pages (streams/ui) on a local port."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import click

from projections.codec import dumps
from projections.errors import RECALL_IO_ERROR, MissingExtra, RecallError, UsageError
from streams.core.settings import Settings
from streams.faces.cli.common import TEXT, json_option, open_recall

UI_TOKEN_FILE = "ui-token"


def require_extra() -> None:
    """The `ui` extra's libraries, or a clear error saying how to install them."""
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtra("ui", str(exc.name)) from None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one the kernel picks)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise RecallError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                          code=RECALL_IO_ERROR,
                          hint="pick another --port, or --host 127.0.0.1") from None
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    """How `host` appears in the URL (and so in the Host header a browser sends)."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"[{host}]" if ":" in host else host


def page_url(host: str, port: int, token: str | None) -> str:
    """The URL to open: a wildcard address is shown as this machine's name."""
    return f"http://{url_host(host)}:{port}/" + (f"?token={token}" if token else "")


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, type=TEXT,
              help="Address to listen on (off loopback the access token cannot be turned off).")
@click.option("--no-token", "no_token", is_flag=True,
              help="Serve loopback without the access token: only on a machine no one else "
                   "uses (otherwise any local user can read every session).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0,
              help="Port to listen on (default: a free one).")
@json_option
@click.pass_context
def ui(ctx: click.Context, host: str, port: int, no_token: bool, as_json: bool) -> None:
    """Browse sessions, search with highlights and preview references in a web browser.

    \b
    Prints a ready-to-open URL, then serves until Ctrl-C. The URL carries an access token
    (kept in <data dir>/ui-token; the first visit turns it into an HttpOnly cookie): the port
    is open to every user of the machine, the data dir is not. Works on the embedded runtime
    and, with RECALL_BROKER, over Kafka (the dead-letters page then points at the topic).
    """
    require_extra()
    import uvicorn

    from streams.faces.ui.app import create_app, is_loopback

    settings: Settings = ctx.obj
    data_dir = Path(settings.data_dir)
    loopback = is_loopback(host)
    token: str | None = None
    if no_token and not loopback:
        raise UsageError(f"--no-token serves loopback only, not {host}",
                         hint="leave out --no-token, or listen on 127.0.0.1")
    if not no_token:
        from streams.faces.mcp.bearer import load_or_create_token

        token, _ = load_or_create_token(data_dir, UI_TOKEN_FILE)
    sock = bind(host, port)
    bound_port = int(sock.getsockname()[1])
    url = page_url(host, bound_port, token)
    with open_recall(ctx) as recall:
        app = create_app(recall, token=token, loopback=loopback, hosts=[host, url_host(host)],
                         data_dir=None if settings.broker else data_dir)
        info: dict[str, Any] = {"url": url, "host": host, "port": bound_port,
                                "tokenRequired": token is not None}
        if as_json:
            sys.stdout.write(dumps(info).decode() + "\n")
        else:
            sys.stdout.write(f"recall ui: open {url}  (Ctrl-C stops it)\n")
        sys.stdout.flush()
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
