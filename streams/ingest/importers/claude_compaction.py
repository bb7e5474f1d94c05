"""Ingest edge: Claude Code compaction records → PROTOCOL §1.3 compaction and tool-result pruning events."""

from __future__ import annotations

from typing import Any

from streams.ingest.importers import compaction
from streams.ingest.importers.claude_blocks import as_blocks, result_text, user_block
from streams.ingest.importers.claude_route import PREFIX
from streams.ingest.importers.common import Emitter, LineMapper, SourceLine
from streams.ingest.importers.compaction import Pending
from streams.ingest.importers.turns import TurnClock

#: What Claude Code puts in place of a microcompacted tool result.
CLEARED = "[Old tool result content cleared]"


class CompactionMixin(LineMapper):
    """Compaction handling of the session mapper; the state lives on the mapper."""

    em: Emitter
    time: int
    clock: TurnClock
    results: dict[str, int]
    last_surface: int | None
    pending: Pending | None
    model: str

    def _compact_start(self, line: SourceLine, value: dict[str, Any]) -> None:
        if self.pending is not None:
            self._close_pending(line, "a second compact boundary arrived before the summary")
        found = value.get("compactMetadata")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        cid = f"{PREFIX}:{value.get('uuid', line.number)}"
        turn = None if meta.get("trigger") == "manual" else self.clock.turn
        self.pending = compaction.begin(self.em, line, self.time, cid, turn, meta=meta)

    def _compact_summary(self, line: SourceLine, value: dict[str, Any]) -> None:
        pending = self.pending or compaction.unstarted(
            self.em, f"{PREFIX}:{value.get('uuid', line.number)}", self.clock.turn)
        self.pending = None
        message = value.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        seq = compaction.summarize(
            self.em, line, self.time, pending, summary=result_text(content),
            content=[user_block(b) for b in as_blocks(content)],
            checkpoint_id=str(value.get("uuid", f"line-{line.number}")),
            token_count=int(pending.meta.get("preTokens") or 0), provider="anthropic",
            model=self.model, extra={"trigger": pending.meta.get("trigger")})
        if seq is not None:
            self.last_surface = seq

    def _close_pending(self, line: SourceLine, error: str) -> None:
        assert self.pending is not None
        compaction.end(self.em, line, self.time, self.pending, error=error)
        self.pending = None

    def _microcompact(self, line: SourceLine, value: dict[str, Any]) -> None:
        """Each listed tool result still on the surface is rewritten to the cleared placeholder:
        `compaction/prune`, then a tool/result replacing exactly that result (PROTOCOL §1.3)."""
        self._log_only(line, f"{PREFIX}/system", {})
        meta = value.get("microcompactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        ids = [i for i in meta.get("compactedToolIds") or [] if isinstance(i, str)]
        nodes = set(self.em.nodes())
        found = [(i, self.results[i]) for i in ids if self.results.get(i) in nodes]
        sizes = [len(result_text(self._result_part(seq).get("content"))) for _, seq in found]
        saved = int(meta.get("tokensSaved") or 0)
        cid = f"{PREFIX}:{value.get('uuid', line.number)}"
        for (call_id, seq), size in zip(found, sizes, strict=True):
            # The source measures only the total; share it out by each result's length.
            tokens = saved * size // sum(sizes) if sum(sizes) else 0
            self._log_only(line, "compaction/prune", {
                "compactionId": cid, "toolCallId": call_id,
                "shadowedRange": {"start": seq, "end": seq}, "shadowedSeqs": [seq],
                "shadowedTokenCount": tokens})
            self._rewrite_result(line, call_id, seq)

    def _result_part(self, seq: int) -> dict[str, Any]:
        part = self.em.events[seq]["data"]["message"]["content"][0]
        return part if isinstance(part, dict) else {}

    def _rewrite_result(self, line: SourceLine, call_id: str, seq: int) -> None:
        data = self.em.events[seq]["data"]
        message = data["message"]
        part = {**message["content"][0], "content": CLEARED}
        rewritten = {**data, "message": {**message, "content": [part, *message["content"][1:]]}}
        op = {"op": "replace", "start": seq, "end": seq}
        new = self.em.emit(line, "tool/result", self.time, rewritten, op=op, sources=[seq],
                           with_raw=False)
        if new is not None:
            self.results[call_id] = new
            if self.last_surface == seq:
                self.last_surface = new
