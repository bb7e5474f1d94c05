"""Ingest edge: recover a Gemini CLI session's workspace (cwd), which its files store only as a
SHA-256 hash of the project root.

Honest by construction: a directory is taken only when its SHA-256 equals the file's
`projectHash`. Candidates come, in order, from the `.project_root` marker Gemini CLI (with
per-project slugs) writes beside the `chats/` folder, the document's `directories`, then absolute
paths in tool arguments, in tool outputs, and in message text. When none verifies, the session
has no cwd (it is still searchable, but no workspace-scoped MCP caller sees it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePath
from typing import Any

#: Absolute POSIX paths and Windows drive paths inside free text.
_ABSOLUTE = re.compile(r"(?<![\w.~/])(/[^\s\"'`<>|;,(){}\[\]*?]+|[A-Za-z]:\\[^\s\"'`<>|;,*?]+)")
_MARKER = ".project_root"
_MARKER_MAX_BYTES = 4096


def project_hash(root: str) -> str:
    return hashlib.sha256(root.encode("utf-8")).hexdigest()


def _ancestors(path: str) -> Iterator[str]:
    """The path and each parent, longest first ("/a/b/c" → /a/b/c, /a/b, /a)."""
    windows = len(path) > 2 and path[1] == ":"
    sep = "\\" if windows else "/"
    parts = [p for p in path.rstrip(sep).split(sep) if p]
    start = 1 if windows else 0
    for end in range(len(parts), start, -1):
        head = sep.join(parts[:end])
        yield head if windows else f"/{head}"


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def verify(expected: str, candidates: Iterable[str]) -> str | None:
    """The first candidate directory (or ancestor of a candidate path) hashing to `expected`."""
    tried: set[str] = set()
    for text in candidates:
        for found in _ABSOLUTE.findall(text):
            for root in _ancestors(found):
                if root in tried:
                    break  # its ancestors were tried too
                tried.add(root)
                if project_hash(root) == expected:
                    return root
    return None


def marker_root(source_name: str) -> str | None:
    """The project root Gemini CLI recorded in `<project dir>/.project_root`, when the chat file
    sits in `<project dir>/chats/` on this machine."""
    path = PurePath(source_name)
    if path.parent.name != "chats":
        return None
    marker = Path(path.parent.parent, _MARKER)
    try:
        with marker.open("rb") as f:
            text = f.read(_MARKER_MAX_BYTES).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def recover_cwd(expected: Any, source_name: str, directories: Any,
                calls: list[dict[str, Any]], texts: list[Any]) -> str | None:
    """The verified workspace of a session (see the module docstring), or None."""
    marker = marker_root(source_name)
    if not isinstance(expected, str) or len(expected) != 64:
        return None  # nothing to verify against: an unverified guess would be dishonest
    if marker and project_hash(marker) == expected:
        return marker
    listed = [d for d in directories if isinstance(d, str)] if isinstance(directories, list) \
        else []
    found = verify(expected, listed)
    if found is None:
        found = verify(expected, (s for call in calls for s in _strings(call.get("args"))))
    if found is None:
        found = verify(expected, (s for call in calls
                                  for s in _strings([call.get("result"),
                                                     call.get("resultDisplay")])))
    if found is None:
        found = verify(expected, _strings(texts))
    return found
