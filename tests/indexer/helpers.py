"""Builders of index records from small native sessions, shared by the indexer tests."""

from __future__ import annotations

from typing import Any

from projections.fold import SurfaceState
from projections.records import EventRecord, HeaderRecord, IndexRecord, fold_records


def header(sid: str, created: int = 1000, **extra: Any) -> dict[str, Any]:
    return {"type": "session", "version": 0, "id": sid, "createdAt": created, "cwd": "/w", **extra}


def user(seq: int, text: str, time: int | None = None, op: Any = "append",
         cites: list[int] | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"type": "user/message", "seq": seq, "time": 1000 + seq if time is None else time,
                          "data": {"id": f"u{seq}", "role": "user", "source": {"kind": "user"},
                                   "content": [{"type": "text", "text": text}]},
                          "surfaceOp": op}
    if cites is not None:
        ev["sourceEventSeqs"] = cites
    return ev


def assistant(seq: int, text: str, time: int | None = None) -> dict[str, Any]:
    return {"type": "assistant/message", "seq": seq, "time": 1000 + seq if time is None else time,
            "data": {"turn": 0, "step": 0, "message": {"id": f"a{seq}", "role": "assistant",
                                                       "content": [{"type": "text", "text": text}]}},
            "surfaceOp": "append"}


def structural(seq: int, kind: str = "turn/start", time: int | None = None) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 1000 + seq if time is None else time, "data": {}}


def session_records(sid: str, events: list[dict[str, Any]], created: int = 1000,
                    **extra: Any) -> list[IndexRecord]:
    _, records = fold_records(sid, SurfaceState(), events)
    out: list[IndexRecord] = [HeaderRecord(sid, header(sid, created, **extra))]
    out.extend(records)
    return out


def texts_session(sid: str, texts: list[str], created: int = 1000,
                  times: list[int] | None = None, **extra: Any) -> list[IndexRecord]:
    """A session whose events are user messages carrying `texts`, one per seq."""
    events = [user(i, t, None if times is None else times[i]) for i, t in enumerate(texts)]
    return session_records(sid, events, created, **extra)


def event_records(sid: str, state: SurfaceState,
                  events: list[dict[str, Any]]) -> tuple[SurfaceState, list[EventRecord]]:
    return fold_records(sid, state, events)


def shortlist_small(monkeypatch: Any) -> list[int]:
    """Sizes only a large index reaches, on a small one: the dense search shortlists a few
    vectors (SHORTLIST 4) and fuses shallowly. Returns the shortlist sizes scored, in order."""
    from indexer import dense

    monkeypatch.setattr(dense, "SHORTLIST", 4)
    monkeypatch.setattr(dense, "OVERSAMPLE", 1)
    monkeypatch.setattr(dense, "DENSE_MIN", 1)
    monkeypatch.setattr(dense, "FUSE_DEPTH", 1)
    shortlisted: list[int] = []
    real = dense._ShardVectors.scores_of

    def spy(self: Any, picked: Any, query: Any) -> Any:
        shortlisted.append(len(picked))
        return real(self, picked, query)

    monkeypatch.setattr(dense._ShardVectors, "scores_of", spy)
    return shortlisted
