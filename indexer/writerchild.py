"""Storage and read side: the writer process's side of indexer/writerproc.py
(`python -m indexer.writerchild`, started by `WriterProcess`): opens the shards it is told to
and applies each group of records it is handed, answering each before it reads the next."""

from __future__ import annotations

import os
import signal
import sys
from typing import IO

from indexer.pipeline import use_bulk_gc
from indexer.shardset import ShardSet
from indexer.writerproc import decode_records, error_frame, receive_frame, send_frame


def _serve(requests: IO[bytes], answers: IO[bytes]) -> int:
    use_bulk_gc()  # bulk work alone in this process, as the writer thread's ingest
    shards: ShardSet | None = None
    try:
        while True:
            try:
                request = receive_frame(requests)
            except EOFError:
                return 0
            try:
                if request[0] == "open":
                    _, root, config, key_dir = request
                    shards = ShardSet(root, config, key_dir=key_dir)
                    send_frame(answers, ("ok", None))
                elif request[0] == "write":
                    assert shards is not None
                    send_frame(answers, ("ok", shards.write_batch(decode_records(request[1]), request[2])))
                else:
                    send_frame(answers, ("ok", None))
                    return 0
            except Exception as exc:  # answered: the parent raises it
                send_frame(answers, ("error", error_frame(exc)))
    finally:
        if shards is not None:
            shards.close()


def main() -> int:
    # Ctrl-C reaches the whole process group: the parent stops and closes the pipe, and this
    # process ends at the end of its input, after the write in progress (never mid-write).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Frames go over the original stdout; anything printed goes to stderr instead.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return _serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    sys.exit(main())
