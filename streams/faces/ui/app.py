"""Presentation edge for people: the `recall ui` web app — Starlette routes rendering jinja2
templates (autoescaped) over the `Recall` facade, so it answers alike on both runtimes.

Every page is a GET of plain HTML that works without JavaScript; the one write (appending a
reference to a session recall writes) is a POST carrying the page's anti-forgery token. Off
loopback every request needs the access token (a bearer header, or a cookie set from the
`?token=` of the printed URL).
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from projections.errors import (
    RECALL_AMBIGUOUS_SESSION,
    RECALL_INTERNAL_ERROR,
    RECALL_NOT_WRITER,
    RECALL_QUERY_TOO_LONG,
    RECALL_USAGE,
    SESSION_QUERY_EVENT_NOT_FOUND,
    SESSION_QUERY_INVALID_CURSOR,
    SESSION_QUERY_SESSION_NOT_FOUND,
    SESSION_QUERY_STALE_CURSOR,
    SESSION_REFERENCE_BUDGET_EXCEEDED,
    SESSION_REFERENCE_SELF_REFERENCE,
    SESSION_REFERENCE_TOO_MANY,
    RecallError,
)
from streams.facade import match_count_implementation, search_request
from streams.faces.ui import pages
from streams.faces.views import strip_raw

log = logging.getLogger("recall.ui")

HERE = Path(__file__).parent
TOKEN_COOKIE = "recall_ui_token"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
#: Scripts and styles come only from this server; no inline script can run even if some text
#: escaped the templates' escaping.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
_NOT_FOUND = frozenset({SESSION_QUERY_SESSION_NOT_FOUND, SESSION_QUERY_EVENT_NOT_FOUND})
_NOT_FOUND_HINT = ("the Sessions page lists every session (filter it by title, agent or "
                   "directory); a unique prefix of an id will do")
#: What the request asked for wrongly (beside every *INVALID* code): 400, not a server fault.
_BAD_REQUEST = frozenset({SESSION_REFERENCE_SELF_REFERENCE, SESSION_REFERENCE_TOO_MANY,
                          SESSION_REFERENCE_BUDGET_EXCEEDED, RECALL_QUERY_TOO_LONG,
                          RECALL_AMBIGUOUS_SESSION, RECALL_USAGE})
#: What this server cannot do in its present state (an index without vectors, an extra not
#: installed): 409, the request was fine and the error page says how to enable it.
_UNAVAILABLE = frozenset({"RECALL_SEMANTIC_UNAVAILABLE", "RECALL_MISSING_EXTRA"})


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class TokenGate:
    """ASGI wrapper: without the token, 401 (no page, no static file). The token arrives as
    `Authorization: Bearer`, as the cookie a first `?token=` visit sets, or as that `?token=`
    itself (answered by a redirect that drops it from the address bar)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _presented(self, scope: Scope) -> tuple[bool, bool]:
        """(authorized, came in the query string)."""
        request = Request(scope)
        bearer = request.headers.get("authorization", "")
        if bearer.startswith("Bearer ") and hmac.compare_digest(bearer[7:].encode(), self.token):
            return True, False
        cookie = request.cookies.get(TOKEN_COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self.token):
            return True, False
        query = request.query_params.get("token", "")
        if query and hmac.compare_digest(query.encode(), self.token):
            return True, True
        return False, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ok, in_query = self._presented(scope)
        if not ok:
            response: Response = HTMLResponse(
                "<!doctype html><title>recall ui</title><p>401: open the URL `recall ui` "
                "printed (it carries the access token).</p>", status_code=401,
                headers={"www-authenticate": 'Bearer realm="recall-ui"', **SECURITY_HEADERS})
        elif in_query:
            kept = [(k, v) for k, v in Request(scope).query_params.multi_items() if k != "token"]
            response = RedirectResponse(scope["path"] + (f"?{urlencode(kept)}" if kept else ""),
                                        status_code=303)
            response.set_cookie(TOKEN_COOKIE, self.token.decode(), httponly=True,
                                samesite="strict", path="/")
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)


def url_for(path: str, *pairs: tuple[str, Any], **params: Any) -> str:
    """A link: the path and its query arguments (None and '' left out), encoded."""
    items = [(k, v) for k, v in pairs] + list(params.items())
    kept = [(k, str(v)) for k, v in items if v is not None and v != ""]
    return path + (f"?{urlencode(kept)}" if kept else "")


def session_url(session_id: str, seq: int | None = None, **params: Any) -> str:
    """A session's page; with `seq`, the transcript page holding that event, scrolled to it."""
    link = url_for("/session", id=session_id, at=seq, **params)
    return link + (f"#seq-{seq}" if seq is not None else "")


def event_url(session_id: str, seq: int, **params: Any) -> str:
    return url_for("/event", id=session_id, seq=seq, **params)


class PageError(RecallError):
    """A request the page cannot answer: shown as an error page with this status (any other
    RecallError gets the status its code means, at the same edge)."""

    def __init__(self, status: int, code: str, message: str, hint: str = "") -> None:
        super().__init__(message, code=code, hint=hint)
        self.status = status


def _int(value: str | None, name: str, *, default: int | None = None, low: int = 0) -> int:
    if value is None or value == "":
        if default is None:
            raise PageError(400, RECALL_USAGE, f"{name} is required")
        return default
    try:
        number = int(value)
    except ValueError:
        raise PageError(400, RECALL_USAGE, f"{name} must be a whole number") from None
    if number < low:
        raise PageError(400, RECALL_USAGE, f"{name} must be at least {low}")
    return number


class UiApp:
    """The pages over one `Recall`. Facade calls are serialized: the embedded backend's
    shards are one set of connections, and a person's browser sends few requests at once."""

    def __init__(self, recall: Any, *, data_dir: Path | None = None) -> None:
        self.recall = recall
        self.data_dir = data_dir
        self.lock = threading.Lock()
        self.csrf = secrets.token_urlsafe(32)
        # The templates ship with the package and never change under a running server: no
        # freshness check per use (a transcript page includes one per entry), and all compiled
        # here, so the first request of each page does not pay for it.
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                               undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                               auto_reload=False)
        self.env.globals.update(url=url_for, session_url=session_url, event_url=event_url)
        for name in self.env.list_templates(extensions=["html"]):
            self.env.get_template(name)

    # --- plumbing -------------------------------------------------------------------------------

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("nav", "")
        context.setdefault("match_count", match_count_implementation())
        html = self.env.get_template(name).render(csrf=self.csrf, **context)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def page(self, handler: Callable[[Request], Response]
             ) -> Callable[[Request], Awaitable[Response]]:
        """An endpoint: a posted form is read first, then the sync handler runs in a worker
        thread holding the facade lock; failures become the error page."""
        async def endpoint(request: Request) -> Response:
            if request.method == "POST":
                form = await request.form()
                request.state.form = {
                    key: [str(v) for v in form.getlist(key)] if key in ("source", "label")
                    else str(form.get(key) or "") for key in form}
            return await anyio.to_thread.run_sync(run, request)

        def run(request: Request) -> Response:
            try:
                with self.lock:
                    return handler(request)
            except RecallError as exc:
                status = exc.status if isinstance(exc, PageError) else 404 \
                    if exc.code in _NOT_FOUND else 400 if "INVALID" in exc.code \
                    or exc.code in _BAD_REQUEST else 409 if exc.code == RECALL_NOT_WRITER \
                    or exc.code in _UNAVAILABLE \
                    else 500
                # The CLI's next step (`recall sessions`) means nothing to a browser user.
                hint = _NOT_FOUND_HINT if exc.code in _NOT_FOUND else pages.line(exc.hint)
                return self.render("error.html", status, code=exc.code,
                                   message=pages.line(exc.message), hint=hint)
            except Exception:
                log.exception("recall ui: a page failed")
                return self.render("error.html", 500, code=RECALL_INTERNAL_ERROR,
                                   message="the page failed unexpectedly",
                                   hint="see the server's log")
        return endpoint

    def no_page(self, request: Request, exc: Exception) -> Response:
        """A URL no page answers: the error page, with the way back, never a bare text."""
        return self.render("error.html", 404, code=RECALL_USAGE, message="no such page",
                           hint="open the Sessions page, or search from the box above")

    def routes(self) -> list[Route | Mount]:
        return [Route("/", self.page(self.sessions)),
                Route("/favicon.ico", lambda _: RedirectResponse("/static/favicon.svg", 308)),
                Route("/session", self.page(self.session)),
                Route("/search", self.page(self.search)),
                Route("/event", self.page(self.event)),
                Route("/reference", self.page(self.reference), methods=["GET", "POST"]),
                Route("/substring-index", self.page(self.build_substring), methods=["POST"]),
                Route("/dead-letters", self.page(self.dead_letters)),
                Route("/dead-letters/raw", self.page(self.dead_letter_raw)),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]

    # --- pages ----------------------------------------------------------------------------------

    def sessions(self, request: Request) -> Response:
        """The sessions, newest first, filtered by cwd (and below), agent and title text."""
        params = request.query_params
        cwd, agent, text = (params.get(k, "").strip() for k in ("cwd", "agent", "title"))
        page = _int(params.get("page"), "page", default=1, low=1)
        offset = (page - 1) * pages.SESSIONS_PAGE
        records = self.recall.list_sessions(cwd=cwd or None, agent=agent or None,
                                            title=text or None,
                                            limit=offset + pages.SESSIONS_PAGE + 1)
        shown = records[offset:offset + pages.SESSIONS_PAGE]
        args = {"cwd": cwd, "agent": agent, "title": text}
        return self.render("sessions.html", rows=[pages.session_row(r) for r in shown],
                           args=args, page=page,
                           more=len(records) > offset + pages.SESSIONS_PAGE, nav="sessions")

    def _header(self, session_id: str) -> dict[str, Any] | None:
        found = self.recall.filter_sessions([{"kind": "id", "values": [session_id]}])
        return dict(found[0]) if found else None

    def session(self, request: Request) -> Response:
        """A transcript with every event's surface, or (view=surface) the model's surface."""
        params = request.query_params
        wanted = params.get("id", "")
        if not wanted:
            raise PageError(400, RECALL_USAGE, "name the session: /session?id=…")
        session_id = self.recall.resolve_session(wanted)
        surface_only = params.get("view") == "surface"
        wanted_page = _int(params.get("page"), "page", default=1, low=1)
        at = _int(params["at"], "at") if params.get("at") else None
        record = self._header(session_id) or {}
        lineage = pages.lineage(self.recall.trace_session(session_id))
        if surface_only:
            answer = self.recall.read_surface(session_id)
            entries = pages.surface_entries(answer)
            counts = pages.surface_counts(entries)
            header = answer["session"]
            page, page_count = pages.page_of(entries, wanted_page, at)
            first = (page - 1) * pages.TRANSCRIPT_PAGE
            entries, total = entries[first:first + pages.TRANSCRIPT_PAGE], len(entries)
        else:
            # one page of the transcript, found in the index: a long session's page costs what
            # a short one's does
            answer = self.recall.read_transcript(session_id, page=wanted_page, at=at,
                                                 limit=pages.TRANSCRIPT_PAGE)
            entries, counts = pages.transcript_page(answer), dict(answer["counts"])
            header, total = answer["session"], int(answer["total"])
            page, page_count, first = (int(answer[k]) for k in ("page", "pages", "first"))
        return self.render("session.html", session_id=session_id,
                           title=pages.session_row({"header": header, **record}).title,
                           header=header, cwd=pages.line(header.get("cwd") or "-"),
                           agent=pages.line(record.get("agent") or "-"),
                           live=bool(record.get("live")), writes=pages.writes(header),
                           parent=header.get("parentSession"), entries=entries,
                           total=total, first=first, page=page, pages=page_count,
                           surface_only=surface_only, counts=counts, lineage=lineage,
                           nav="sessions")

    def _search_form(self, request: Request) -> pages.SearchForm:
        params = request.query_params
        return pages.SearchForm(
            query=params.get("q", ""), session=params.get("session", "").strip(),
            surfaces=tuple(s for s in params.getlist("surface")
                           if s in ("current", "shadowed", "log-only")),
            types=tuple(part for value in params.getlist("type")
                        for part in value.replace(",", " ").split()),
            cwd=params.get("cwd", "").strip(), agent=params.get("agent", "").strip(),
            since=params.get("since", "").strip(), until=params.get("until", "").strip(),
            no_injected=params.get("no_injected") == "1",
            substring=params.get("substring") == "1", semantic=params.get("semantic") == "1",
            cursor=params.get("cursor", ""))

    def search_page(self, form: pages.SearchForm) -> dict[str, Any]:
        """Run the search the form asks for: `{hits, next, notice, within}` (a stale cursor
        restarts from the first page, with a notice)."""
        try:
            options = pages.search_options(form)
        except ValueError:
            raise PageError(400, RECALL_USAGE, "since/until must be ISO dates "
                            "(2025-11-24 or 2025-11-24T10:00)") from None
        request = search_request(options)
        notice = ""
        within = options.session_id is not None

        def run(req: dict[str, Any]) -> dict[str, Any]:
            if within:
                return dict(self.recall.search_events(request=req))
            return dict(self.recall.search_sessions(request=req))
        try:
            answer = run(request)
        except RecallError as exc:
            if exc.code not in (SESSION_QUERY_STALE_CURSOR, SESSION_QUERY_INVALID_CURSOR) \
                    or "cursor" not in request:
                raise
            request.pop("cursor")
            answer = run(request)
            notice = ("The index changed since that page (or the link was not a valid "
                      "cursor): the search restarted from the first page.")
        hits = (pages.event_hits if within else pages.session_hits)(
            answer, form.query, substring=form.substring)
        return {"hits": hits, "next": answer.get("nextCursor"), "notice": notice,
                "within": within, "session": answer.get("session")}

    def search(self, request: Request) -> Response:
        form = self._search_form(request)
        result: dict[str, Any] = {"hits": [], "next": None, "notice": "", "within": False,
                                  "session": None}
        needs_build = ""
        if form.query.strip():
            if form.substring and not self.recall.substring_ready():
                # A GET changes nothing (a page elsewhere can make the browser send one): the
                # build is offered as a POST of its own, with the anti-forgery token.
                needs_build = url_for("/search", *form.link_args())
            else:
                result = self.search_page(form)
        return self.render("search.html", form=form, nav="search", needs_build=needs_build,
                           **result)

    def build_substring(self, request: Request) -> Response:
        """POST: extend the index for substring search, then back to the search that asked."""
        form: dict[str, Any] = request.state.form
        self._check_form(form, "press the button on the search page again")
        self.recall.build_substring_index()
        back = str(form.get("next", ""))
        return RedirectResponse(back if back.startswith("/search?") else "/search",
                                status_code=303, headers=SECURITY_HEADERS)

    def _check_form(self, form: Mapping[str, Any], hint: str) -> None:
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), self.csrf.encode()):
            raise PageError(403, RECALL_USAGE, "the form is stale or did not come from this "
                            "page", hint)

    def event(self, request: Request) -> Response:
        """One event: its content, neighbours, trace; the raw JSON on demand."""
        params = request.query_params
        session_id = self.recall.resolve_session(params.get("id", "") or "-")
        seq = _int(params.get("seq"), "seq")
        with_raw = params.get("raw") == "1"
        read = self.recall.read_event(session_id, seq, before=pages.NEIGHBOURS,
                                      after=pages.NEIGHBOURS)
        trace = self.recall.trace_event(session_id, seq)
        raw = read["event"]["event"] if with_raw else strip_raw(read["event"]["event"])
        return self.render("event.html", session_id=session_id, seq=seq,
                           entries=pages.window(read), trace=trace,
                           raw=pages.raw_json(raw), with_raw=with_raw, nav="sessions")

    def reference(self, request: Request) -> Response:
        """Preview a reference (a dry run): the wrapped context exactly as delivered, bytes of
        the budget, truncation; POST appends it where recall writes the target."""
        if request.method == "POST":
            return self._append_reference(request)
        params = request.query_params
        return self._reference_page(params.get("target", "").strip(), params.getlist("source"),
                                    params.getlist("label"), params.get("message", ""))

    def _reference_args(self, sources: list[str], labels: list[str]
                        ) -> list[dict[str, Any]]:
        refs = []
        for index, source in enumerate(sources[:pages.REFERENCE_SOURCES]):
            if not source.strip():
                continue
            ref: dict[str, Any] = {"sessionId": self.recall.resolve_session(source.strip())}
            label = labels[index].strip() if index < len(labels) else ""
            if label:
                ref["label"] = label
            refs.append(ref)
        return refs

    def _reference_page(self, target: str, sources: list[str], labels: list[str],
                        message: str, appended: Mapping[str, Any] | None = None,
                        status: int = 200) -> Response:
        choices = [pages.session_row(r) for r in self.recall.list_sessions(limit=200)]
        filled = (sources + [""] * pages.REFERENCE_SOURCES)[:pages.REFERENCE_SOURCES]
        named = (labels + [""] * pages.REFERENCE_SOURCES)[:pages.REFERENCE_SOURCES]
        context: dict[str, Any] = {"target": target, "sources": filled, "labels": named,
                                   "message": message, "choices": choices, "result": None,
                                   "appended": appended, "nav": "reference"}
        if target:
            target_id = self.recall.resolve_session(target)
            result = self.recall.prepare_reference(
                target_id, message, references=self._reference_args(sources, labels),
                dry_run=True)
            header = self._header(target_id)
            context.update(
                target_id=target_id, result=result, text=pages.context_text(result),
                readable="".join(str(b.get("text", "")) for b in result.get("content") or []
                                 if isinstance(b, dict)),
                uses=pages.source_uses(result),
                budget=self.recall.settings.max_reference_bytes,
                can_append=pages.writes((header or {}).get("header")),
                messages_json=pages.raw_json(result.get("messages") or []))
        return self.render("reference.html", status, **context)

    def _append_reference(self, request: Request) -> Response:
        form: dict[str, Any] = request.state.form
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), self.csrf.encode()):
            raise PageError(403, RECALL_USAGE, "the form is stale or did not come from this "
                            "page", "reload the preview and press append again")
        target = str(form.get("target", "")).strip()
        sources = [str(s) for s in form.get("source", [])]
        labels = [str(x) for x in form.get("label", [])]
        message = str(form.get("message", ""))
        target_id = self.recall.resolve_session(target)
        header = self._header(target_id)
        if not pages.writes((header or {}).get("header")):
            raise PageError(409, RECALL_NOT_WRITER, f"session {target_id} is written by an "
                            "outside source; recall does not append to it",
                            "copy the context and deliver it through the agent")
        result = self.recall.prepare_reference(
            target_id, message, references=self._reference_args(sources, labels))
        return self._reference_page(target, sources, labels, message, appended=result)

    def dead_letters(self, request: Request) -> Response:
        """Rejected input, why, and its original bytes (over Kafka: the dead-letter topic)."""
        items = self.recall.dead_letters()
        return self.render("dead_letters.html", items=pages.parked(items, self.recall.redact_text),
                           nav="dead")

    def dead_letter_raw(self, request: Request) -> Response:
        """One parked record's original bytes, as a download (never rendered in the page)."""
        number = _int(request.query_params.get("n"), "n")
        items = self.recall.dead_letters()
        if number >= len(items) or not items[number].get("bytes"):
            raise PageError(404, RECALL_USAGE, f"no parked bytes numbered {number}",
                            "open the dead-letters page again")
        try:
            raw = base64.b64decode(str(items[number]["bytes"]), validate=True)
        except ValueError:
            raw = str(items[number]["bytes"]).encode()
        return Response(raw, media_type="application/octet-stream", headers={
            **SECURITY_HEADERS,
            "content-disposition": f'attachment; filename="dead-letter-{number}.bin"'})


def create_app(recall: Any, *, token: str | None = None, loopback: bool = True,
               data_dir: Path | None = None, hosts: Sequence[str] = ()) -> ASGIApp:
    """The ASGI app. With `token`, nothing is served without it (another local user cannot
    read the pages: `recall ui` sets one unless told not to). On loopback only loopback Host
    headers are served, `hosts` (the address listened on) among them: a web page elsewhere
    cannot rebind a name to 127.0.0.1 and read these pages."""
    ui = UiApp(recall, data_dir=data_dir)
    allowed = list(dict.fromkeys([*LOOPBACK_HOSTS, *hosts]))
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed)] if loopback else []
    app: ASGIApp = Starlette(routes=ui.routes(), middleware=middleware,
                             exception_handlers={404: ui.no_page})
    app.state.ui = ui  # type: ignore[attr-defined]
    if token is not None:
        app = TokenGate(app, token)
    return app

