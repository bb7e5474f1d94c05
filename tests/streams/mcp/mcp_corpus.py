"""Test corpus for the agent tools: the bundled samples plus crafted sessions in two workspaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ALPHA = "/work/alpha"
BETA = "/work/beta"
T0 = 1_764_000_000_000  # 2025-11-24T16:00:00.000Z
SAMPLES = Path(__file__).resolve().parents[3] / "streams" / "samples"


def header(session_id: str, cwd: str | None, *, created: int, parent: str | None = None
           ) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "session", "version": 0, "id": session_id, "createdAt": created}
    if cwd is not None:
        out["cwd"] = cwd
    if parent is not None:
        out["parentSession"] = parent
    return out


def message(kind: str, seq: int, time: int, text: str) -> dict[str, Any]:
    if kind == "user":
        data: dict[str, Any] = {"id": f"u{seq}", "role": "user", "source": {"kind": "user"},
                                "content": [{"type": "text", "text": text}]}
        return {"type": "user/message", "seq": seq, "time": time, "data": data,
                "surfaceOp": "append"}
    data = {"turn": 0, "step": 0, "message": {"id": f"a{seq}", "role": "assistant",
                                              "content": [{"type": "text", "text": text}]}}
    return {"type": "assistant/message", "seq": seq, "time": time, "data": data,
            "surfaceOp": "append"}


def log_only(kind: str, seq: int, time: int, data: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": time, "data": data or {}}


def simple(session_id: str, cwd: str | None, created: int, texts: list[str], *,
           parent: str | None = None, title: str | None = None) -> list[dict[str, Any]]:
    """A finished one-turn session: optional title, then one user/assistant pair per text."""
    lines: list[dict[str, Any]] = [header(session_id, cwd, created=created, parent=parent)]
    seq, t = 0, created + 10
    if title is not None:
        lines.append(log_only("session/title", seq, t, {"title": title}))
        seq += 1
    lines.append(log_only("turn/start", seq, t + 1, {"turn": 0}))
    seq += 1
    for n, text in enumerate(texts):
        role = "user" if n % 2 == 0 else "assistant"
        lines.append(message(role, seq, t + 10 + seq, text))
        seq += 1
    lines.append(log_only("turn/end", seq, t + 100, {"turn": 0, "reason": "completed"}))
    return lines


def caller_session() -> list[dict[str, Any]]:
    """`alpha-root`, the caller: a finished step, then the active step (which must stay out of
    its own event search)."""
    created = T0
    events = [header("alpha-root", ALPHA, created=created),
              log_only("session/title", 0, created + 1, {"title": "Alpha widget pipeline"}),
              log_only("turn/start", 1, created + 2, {"turn": 0}),
              log_only("step/start", 2, created + 3, {"turn": 0, "step": 0}),
              message("user", 3, created + 4, "Deploy the widget pipeline to staging."),
              message("assistant", 4, created + 5, "The widget pipeline is deployed."),
              log_only("step/end", 5, created + 6, {"turn": 0, "step": 0}),
              log_only("step/start", 6, created + 7, {"turn": 0, "step": 1}),
              message("user", 7, created + 8, "Which widget did we deploy earlier?")]
    return events


def sessions() -> dict[str, list[dict[str, Any]]]:
    day = 86_400_000
    return {
        "alpha-root": caller_session(),
        "alpha-child": simple("alpha-child", ALPHA, T0 + day, [
            "Widget follow-up: add a retry to the widget deploy.", "Retry added."],
            parent="alpha-root", title="Widget retry"),
        "alpha-grandchild": simple("alpha-grandchild", ALPHA, T0 + 2 * day, [
            "Widget metrics dashboard please.", "Dashboard added."], parent="alpha-child"),
        "alpha-orphan": simple("alpha-orphan", ALPHA, T0 + 3 * day, [
            "Widget orphan work after a fork.", "Done."], parent="beta-secret"),
        "alpha-lost": simple("alpha-lost", ALPHA, T0 + 4 * day, [
            "Widget lost parent work.", "Done."], parent="ghost-missing"),
        "beta-secret": simple("beta-secret", BETA, T0 + 5 * day, [
            "Widget secret in the beta workspace.", "Noted."], title="Beta secret plan"),
        "beta-child": simple("beta-child", BETA, T0 + 6 * day, [
            "Widget beta child of alpha.", "Noted."], parent="alpha-root"),
        # Same workspace by meaning, different by bytes: a tampered header must not pass.
        "alpha-tampered": simple("alpha-tampered", ALPHA + "/.", T0 + 7 * day, [
            "Widget tampered workspace.", "Noted."]),
        "nocwd-session": simple("nocwd-session", None, T0 + 8 * day, [
            "Widget without any workspace.", "Noted."]),
    }


def write_corpus(directory: Path) -> list[Path]:
    """Crafted sessions as native JSONL files, plus the bundled samples."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for session_id, lines in sessions().items():
        path = directory / f"{session_id}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        paths.append(path)
    return [*paths, *sorted(SAMPLES.glob("*.jsonl"))]
