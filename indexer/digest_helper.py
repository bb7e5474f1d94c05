"""Storage and read side: the digest helper process (`python -m indexer.digest_helper`).

indexer/digester.py starts and feeds these processes; this module is what runs in one. Apart
from it, so the digest (which calls the digester) and the helper's loop (which calls the
digest) import each other in one direction only.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from indexer.digest import shard_file_digests
from projections.codec import dumps, loads


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The helper's loop: a JSON path per line in, `{"ok": digests}` or `{"error": text}` out."""
    for line in stdin:
        try:
            reply: dict[str, Any] = {"ok": shard_file_digests(str(loads(line)))}
        except Exception as exc:  # the caller redoes the shard itself and raises it there
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        stdout.write(dumps(reply) + b"\n")
        stdout.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
