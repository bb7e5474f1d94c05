"""The `recall ui` tests' corpus: the demo samples, a session of hostile text, a CJK session and
one parked (dead-letter) line, ingested into an embedded data dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from streams.facade import Recall
from streams.faces.cli.demo import sample_dir

HOSTILE_SESSION = "hostile-2025-12-02"
CJK_SESSION = "cjk-2025-12-03"
#: Each would run script, add an element or break out of an attribute if it were not escaped.
HOSTILE_TEXTS = (
    "<script>window.__pwned = 1</script> look at this",
    "\"><img src=x onerror=\"window.__pwned = 2\"> attribute breaker",
    "'><svg onload=window.__pwned=3> and <b>bold markup</b> and &amp; entity",
    "right-to-left \u202egnp.exe\u202c override and \u2067isolate\u2069 marks",
)
HOSTILE_TITLE = "<script>window.__pwned = 4</script>\u202e title"
CJK_TEXT = "我们在会话搜索功能里发现了一个错误：搜索结果的排序不对。"
DEMO_SESSIONS = ("ci-billing-2025-11-24", "ci-followup-2025-12-01",
                 "docs-quickstart-2025-11-25")


def _message(seq: int, role: str, text: str, time: int) -> dict[str, Any]:
    if role == "user":
        data: dict[str, Any] = {"id": f"msg-{seq}", "role": "user", "source": {"kind": "user"},
                                "content": [{"type": "text", "text": text}]}
        return {"type": "user/message", "seq": seq, "time": time, "data": data,
                "surfaceOp": "append"}
    data = {"turn": 0, "step": 0, "message": {"id": f"asst-{seq}", "role": "assistant",
                                              "content": [{"type": "text", "text": text}]}}
    return {"type": "assistant/message", "seq": seq, "time": time, "data": data,
            "surfaceOp": "append"}


def _log(path: Path, header: dict[str, Any], events: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in [header, *events]) + b"\n")
    return path


def write_logs(root: Path, *, broken: bool = True) -> Path:
    """The hostile and CJK logs (and one unparseable line) under root/logs."""
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = 1764691200000
    hostile = [{"type": "session/title", "seq": 0, "time": start, "data": {"title": HOSTILE_TITLE}}]
    hostile += [_message(i + 1, "user" if i % 2 == 0 else "assistant", text, start + 1000 * i)
                for i, text in enumerate(HOSTILE_TEXTS)]
    _log(logs / "hostile.jsonl", {"type": "session", "version": 0, "id": HOSTILE_SESSION,
                                  "createdAt": start, "cwd": "/home/dev/<evil> \"dir\""},
         hostile)
    cjk_start = start + 86_400_000
    _log(logs / "cjk.jsonl", {"type": "session", "version": 0, "id": CJK_SESSION,
                              "createdAt": cjk_start, "cwd": "/home/dev/搜索"},
         [_message(0, "user", CJK_TEXT, cjk_start),
          _message(1, "assistant", "排序问题已经修复。", cjk_start + 1000)])
    if broken:
        (logs / "broken.jsonl").write_bytes(b"<not json> \xff\n")
    return logs


def build(root: Path) -> Path:
    """Write the extra logs and ingest them with the demo samples into root/data."""
    logs = write_logs(root)
    data = root / "data"
    with Recall.open(data) as recall:
        recall.ingest([sample_dir(), logs])
    return data
