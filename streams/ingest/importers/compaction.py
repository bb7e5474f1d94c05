"""Ingest edge: the compaction sequence every importer writes (PROTOCOL §1.3).

An agent's compaction becomes `compaction/start`, `compaction/summary` (what it shadows), the
checkpoint `user/message` that replaces the shadowed run of the surface (citing the start, the
summary and the shadowed events), and `compaction/end`. What is shadowed is the run of the
surface that was current when the compaction started; messages that arrived while the summary
was being written stay current after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.ingest.importers.common import Emitter, SourceLine


@dataclass(slots=True)
class Pending:
    """A compaction that started (`compaction/start` at `start_seq`, None when there was none
    or it was parked) and waits for its summary; `span` is the surface at its start."""

    compaction_id: str
    start_seq: int | None
    span: list[int]
    turn: int | None
    meta: dict[str, Any] = field(default_factory=dict)


def unstarted(em: Emitter, compaction_id: str, turn: int | None) -> Pending:
    """A summary without a start record: it shadows the whole current surface."""
    return Pending(compaction_id, None, list(em.nodes()), turn)


def begin(em: Emitter, line: SourceLine, time: int, compaction_id: str, turn: int | None, *,
          meta: dict[str, Any] | None = None, key: str | None = None) -> Pending:
    """`compaction/start`; the surface as it stands is what the summary will shadow."""
    seq = em.emit(line, "compaction/start", time, {"compactionId": compaction_id, "turn": turn},
                  key=key)
    return Pending(compaction_id, seq, list(em.nodes()), turn, meta or {})


def shadowed_run(em: Emitter, pending: Pending) -> list[int]:
    """The contiguous run of the current surface from the first to the last event that was on
    it when the compaction started (what the checkpoint replaces)."""
    nodes = em.nodes()
    before = set(pending.span)
    span = [s for s in nodes if s in before]
    return nodes[nodes.index(span[0]):nodes.index(span[-1]) + 1] if span else []


def summarize(em: Emitter, line: SourceLine, time: int, pending: Pending, *, summary: str,
              content: list[Any], checkpoint_id: str, token_count: int, provider: str,
              model: str, extra: Mapping[str, Any] | None = None,
              shadowed: list[int] | None = None, key: str | None = None) -> int | None:
    """`compaction/summary`, the checkpoint `user/message` (`content`) replacing the shadowed
    run, and `compaction/end`; the checkpoint's seq (None when it was parked).

    `extra`: further fields of the summary event (e.g. the trigger). `key`: the whole-document
    piece the events came from (the checkpoint and end then take `<key>/checkpoint` and
    `<key>/end`, without the record's raw, which the summary carries)."""
    if shadowed is None:
        shadowed = shadowed_run(em, pending)
    summary_seq = em.emit(line, "compaction/summary", time, {
        "compactionId": pending.compaction_id, "summary": summary,
        "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]} if shadowed else None,
        "shadowedSeqs": shadowed, "shadowedTokenCount": token_count, "provider": provider,
        "model": model, **(extra or {})}, key=key)
    cited = [s for s in (pending.start_seq, summary_seq) if s is not None] + shadowed
    op: Any = {"op": "replace", "start": shadowed[0], "end": shadowed[-1]} if shadowed \
        else "append"
    keyed = key is not None
    seq = em.emit(line, "user/message", time, {
        "id": checkpoint_id, "role": "user",
        "source": {"kind": "plugin", "plugin": "compact",
                   "compactionId": pending.compaction_id},
        "content": content}, op=op, sources=cited or None,
        key=f"{key}/checkpoint" if keyed else None, with_raw=not keyed)
    end(em, line, time, pending, key=f"{key}/end" if keyed else None)
    return seq


def end(em: Emitter, line: SourceLine, time: int, pending: Pending, *,
        error: str | None = None, key: str | None = None) -> None:
    """`compaction/end` (with `error` when the compaction failed or was abandoned)."""
    data: dict[str, Any] = {"compactionId": pending.compaction_id, "turn": pending.turn}
    if error is not None:
        data["error"] = error
    em.emit(line, "compaction/end", time, data, key=key, with_raw=key is None)
