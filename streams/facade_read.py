"""The read path of `recall search` and `recall sessions` as a short-lived process runs them:
the live index generation opened for reading and the operations `Recall` runs over it, with
the light settings of streams/core/envsettings.py (no pydantic, no runtime).

It answers only when opening the index is a plain read: the data dir and its live generation
exist and are private, no write is pending, and the redaction rules' fingerprint is kept for
exactly these settings. Otherwise `open_reader` returns None and the caller takes the full path
(`Recall.open`), which creates, recovers, migrates or reports what it finds.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streams.core.envsettings import LightSettings

if TYPE_CHECKING:
    from indexer import ShardSet
    from indexer.reads import SessionReads


def index_build_progress(shard: int, done: int, total: int) -> None:
    """Progress of an index build a request needs first (the substring index), on stderr."""
    if done == total or done % 50_000 < 5_000:
        print(f"recall: building the substring index: shard {shard}: {done}/{total} documents",
              file=sys.stderr, flush=True)


class Reader:
    """`Recall`'s read operations over one open generation (closed with `close`)."""

    def __init__(self, shards: ShardSet, query: SessionReads) -> None:
        self._shards = shards
        self._query = query

    def query(self) -> SessionReads:
        return self._query

    def call(self, op: str, args: Mapping[str, Any]) -> Any:
        from streams.service.operations import dispatch

        return dispatch(self, op, args)  # type: ignore[arg-type]  # the read operations only

    def search_sessions(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """As `Recall.search_sessions(request=request)`."""
        from streams.requests import build_request

        return dict(self.call("search_sessions", {"request": build_request(None, request)}))

    def list_sessions(self, *, cwd: str | None = None, agent: str | None = None,
                      title: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """As `Recall.list_sessions(cwd=, agent=, title=, limit=)`."""
        from streams.service.operations import listing_args

        return list(self.call("list_sessions", listing_args(cwd=cwd, agent=agent, title=title,
                                                            limit=limit)))

    def close(self) -> None:
        close = getattr(self._query, "close", None)  # (the query service's search lanes)
        if close is not None:
            close()
        self._shards.close()


def _private_dir(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) and not mode & 0o077


def open_reader(settings: LightSettings, *, search: bool = True) -> Reader | None:
    """A reader of the live generation, or None when opening it is more than a plain read.
    Without `search` it answers the session reads only (a listing), and the search modules
    (ranking, snippets, cursors, vectors) stay unloaded."""
    data = settings.data_dir
    root = os.path.join(data, "index")
    pending = os.path.exists(os.path.join(data, "index-pending"))
    if pending or not _private_dir(data) or not _private_dir(root):
        return None
    from indexer import ShardSet
    from indexer.routing import shard_file_name
    from streams.core.indexconfig import index_config, kept_redaction_fingerprint
    from streams.runtime.embedded.generations import live_generation

    name = live_generation(root)
    if name is None:
        return None
    live = os.path.join(root, name)
    if not _private_dir(live) or not all(os.path.exists(os.path.join(live, shard_file_name(i)))
                                         for i in range(settings.shards)):
        return None
    fingerprint = kept_redaction_fingerprint(settings)  # type: ignore[arg-type]
    if fingerprint is None:
        return None
    try:
        shards = ShardSet(live, index_config(settings, fingerprint),  # type: ignore[arg-type]
                          key_dir=root, read_only=True)
    except Exception:  # damaged, outdated, another config: the full path says what and acts
        return None
    if not search:
        from indexer.reads import SessionReads

        return Reader(shards, SessionReads(shards, shards.config))
    from indexer import QueryService

    # one search per process: its lanes need no kept pool
    return Reader(shards, QueryService(shards, progress=index_build_progress,
                                       keep_threads=False))
