"""Benchmark corpus: deterministic generated sessions with a Zipf vocabulary and compactions."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any

WORDS = 8000


@functools.cache  # every generator and query mix of a seed shares one (never mutated)
def vocabulary(seed: int = 42) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < WORDS:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(words)


class TextGen:
    """Zipf-distributed words (rank r has weight 1/r), like docs/ENGINE-NOTES.md's FTS5 measurements."""

    def __init__(self, seed: int = 42) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(seed)
        weights = [1.0 / (r + 1) for r in range(len(self.words))]
        total = sum(weights)
        acc = 0.0
        self.cum = []
        for w in weights:
            acc += w / total
            self.cum.append(acc)

    def word(self) -> str:
        import bisect
        return self.words[min(bisect.bisect(self.cum, self.rng.random()), len(self.words) - 1)]

    def text(self, n: int) -> str:
        return " ".join(self.word() for _ in range(n))


def session_events(session_id: str, n: int, gen: TextGen, *, t0: int = 1_700_000_000_000,
                   compact_at: int = 300) -> Iterator[dict[str, Any]]:
    """n events: turns of user → assistant → tool call/result, compacting the surface to a
    checkpoint whenever it holds `compact_at` nodes (as an agent near its context limit does)."""
    nodes: list[int] = []
    seq = 0
    turn = 0

    def ev(kind: str, data: Any, op: Any = None, cited: list[int] | None = None) -> dict[str, Any]:
        nonlocal seq
        e: dict[str, Any] = {"type": kind, "seq": seq, "time": t0 + seq * 1000, "data": data}
        if op is not None:
            e["surfaceOp"] = op
        if cited is not None:
            e["sourceEventSeqs"] = cited
        seq += 1
        return e

    while seq < n:
        if len(nodes) >= compact_at and n - seq >= 4:
            keep = nodes[-4:]
            shadow = nodes[:-4]
            start = seq
            yield ev("compaction/start", {"compactionId": f"c{seq}", "turn": None})
            summary = seq
            yield ev("compaction/summary", {"compactionId": f"c{start}", "summary": gen.text(40),
                                            "shadowedRange": {"start": shadow[0], "end": shadow[-1]},
                                            "shadowedSeqs": shadow, "shadowedTokenCount": 9000,
                                            "provider": "p", "model": "m"})
            cp = seq
            yield ev("user/message", {"id": f"m{seq}", "role": "user",
                                      "source": {"kind": "plugin", "plugin": "compact",
                                                 "compactionId": f"c{start}"},
                                      "content": [{"type": "text", "text": gen.text(60)}]},
                     {"op": "replace", "start": shadow[0], "end": shadow[-1]},
                     [start, summary, *shadow])
            nodes = [cp, *keep]
            yield ev("compaction/end", {"compactionId": f"c{start}", "turn": None})
            continue
        step = seq % 7
        if step == 0:
            yield ev("turn/start", {"turn": turn})
        elif step == 1:
            nodes.append(seq)
            yield ev("user/message", {"id": f"m{seq}", "role": "user", "source": {"kind": "user"},
                                      "content": [{"type": "text", "text": gen.text(20)}]}, "append")
        elif step == 2:
            nodes.append(seq)
            yield ev("assistant/message", {"turn": turn, "step": 0, "message": {
                "id": f"a{seq}", "role": "assistant",
                "content": [{"type": "text", "text": gen.text(30)}]}}, "append")
        elif step == 3:
            yield ev("tool/call", {"turn": turn, "step": 0, "callId": f"c{seq}", "name": "bash",
                                   "arguments": {"command": gen.text(4)}})
        elif step == 4:
            nodes.append(seq)
            yield ev("tool/result", {"turn": turn, "step": 0, "message": {
                "id": f"t{seq}", "role": "tool",
                "content": [{"type": "tool-result", "toolCallId": f"c{seq - 1}",
                             "content": gen.text(25), "isError": False}]}}, "append")
        elif step == 5:
            nodes.append(seq)
            yield ev("assistant/message", {"turn": turn, "step": 1, "message": {
                "id": f"a{seq}", "role": "assistant",
                "content": [{"type": "text", "text": gen.text(25)}]}}, "append")
        else:
            turn += 1
            yield ev("turn/end", {"turn": turn - 1, "reason": "completed"})
