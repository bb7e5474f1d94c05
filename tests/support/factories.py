"""Test factories: valid native events and sessions with overrides (shared by every test tier)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def header(session_id: str = "s1", created_at: int = 1_700_000_000_000, **extra: Any) -> dict[str, Any]:
    return {"type": "session", "version": 0, "id": session_id, "createdAt": created_at, **extra}


def text_blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def user(seq: int, text: str, *, time: int | None = None, op: Any = "append",
         cited: list[int] | None = None, kind: str = "user", **source: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "user/message", "seq": seq, "time": 1000 + seq if time is None else time,
        "data": {"id": f"m{seq}", "role": "user", "source": {"kind": kind, **source},
                 "content": text_blocks(text)},
        "surfaceOp": op,
    }
    if cited is not None:
        event["sourceEventSeqs"] = cited
    return event


def assistant(seq: int, text: str, *, time: int | None = None, op: Any = "append",
              cited: list[int] | None = None, reasoning: str | None = None) -> dict[str, Any]:
    content = ([{"type": "reasoning", "text": reasoning}] if reasoning else []) + (
        text_blocks(text) if text else [])
    event: dict[str, Any] = {
        "type": "assistant/message", "seq": seq, "time": 1000 + seq if time is None else time,
        "data": {"turn": 0, "step": 0,
                 "message": {"id": f"a{seq}", "role": "assistant", "content": content}},
        "surfaceOp": op,
    }
    if cited is not None:
        event["sourceEventSeqs"] = cited
    return event


def tool_result(seq: int, output: str, *, call_id: str = "c1", time: int | None = None,
                op: Any = "append", cited: list[int] | None = None, is_error: bool = False,
                error: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "turn": 0, "step": 0,
        "message": {"id": f"t{seq if op == 'append' else 'r'}", "role": "tool",
                    "content": [{"type": "tool-result", "toolCallId": call_id,
                                 "content": output, "isError": is_error}]},
    }
    if error is not None:
        data["error"] = error
    event: dict[str, Any] = {"type": "tool/result", "seq": seq,
                             "time": 1000 + seq if time is None else time, "data": data,
                             "surfaceOp": op}
    if cited is not None:
        event["sourceEventSeqs"] = cited
    return event


def log_only(seq: int, kind: str = "turn/start", data: Any = None, *,
             time: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 1000 + seq if time is None else time,
            "data": {} if data is None else data, **extra}


def replace(start: int, end: int) -> dict[str, Any]:
    return {"op": "replace", "start": start, "end": end}


def checkpoint(seq: int, text: str, start: int, end: int, cited: list[int]) -> dict[str, Any]:
    """A compact checkpoint: the replacement user/message of PROTOCOL §1.3."""
    return user(seq, text, op=replace(start, end), cited=cited, kind="plugin", plugin="compact",
                compactionId="c1")


def fleet(sessions: int, events: int, *, prefix: str = "fleet") -> dict[str, list[dict[str, Any]]]:
    """A generated fleet: session id → [header, event 0, …] with shared and unique words."""
    out = {}
    for s in range(sessions):
        sid = f"{prefix}-{s:03d}"
        lines = [header(sid, cwd=f"/w/{s % 3}", created_at=1_700_000_000_000 + s)]
        lines += [(user if i % 2 == 0 else assistant)(i, f"fleet {s} event {i} needle{i % 7}")
                  for i in range(events)]
        out[sid] = lines
    return out


def write_fleet(directory: Path, logs: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """One JSONL file per session of `fleet(...)`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, lines in enumerate(logs.values()):
        path = directory / f"s{n:03d}.jsonl"
        path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
        paths.append(path)
    return paths
