"""The store's deferred fsyncs: appends made with `durable=False` start an fsync of their file at
once (on the store's fsync threads), and `sync()` returns only when every file appended before
the call is durable, including a file appended to again while its early fsync was running
(that fsync began before the second write, so it cannot cover it). A failed early fsync is
raised by the next `sync()`. The cache of session states keeps only the sessions used last."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from projections.fold import SurfaceState
from streams.core import store as store_module
from streams.core.store import SessionStore


def _header(sid: str) -> dict[str, Any]:
    return {"type": "session", "version": 0, "id": sid, "createdAt": 1}


def _event(seq: int) -> dict[str, Any]:
    return {"type": "turn/start", "seq": seq, "time": seq + 1, "data": {}}


def _state(n: int) -> SurfaceState:
    return SurfaceState(next_seq=n)


def test_sync_covers_an_append_made_while_the_files_early_fsync_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path / "store")
    path = store.path_of("s")
    real_fsync = os.fsync
    first_started, second_written = threading.Event(), threading.Event()
    synced: list[bytes] = []  # the file's bytes as each fsync of it began

    def fsync(fd: int) -> None:
        data = Path(f"/proc/self/fd/{fd}").resolve().read_bytes()
        if not synced:
            first_started.set()
            assert second_written.wait(10)  # the second append lands while this one runs
        synced.append(data)
        real_fsync(fd)

    monkeypatch.setattr(store_module.os, "fsync", fsync)
    store.append(_header("s"), [_event(0)], _state(1), durable=False)
    assert first_started.wait(10)
    store.append(_header("s"), [_event(1)], _state(2), durable=False)
    second_written.set()
    store.sync()
    assert not store._unsynced
    # the early fsync of the first append began before the second one was written; another
    # fsync, begun after it, covers every byte of the file
    assert len(synced) == 2 and path.read_bytes() in synced


def test_sync_returns_at_once_when_early_fsyncs_covered_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path / "store")
    for i in range(20):
        store.append(_header(f"s{i}"), [_event(0)], _state(1), durable=False)
    store.sync()
    calls: list[int] = []
    monkeypatch.setattr(store_module.os, "fsync", lambda fd: calls.append(fd))
    store.sync()
    assert calls == [] and not store._unsynced


def test_a_failed_early_fsync_is_raised_by_the_next_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path / "store")

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store_module.os, "fsync", failing)
    store.append(_header("s"), [_event(0)], _state(1), durable=False)
    with pytest.raises(OSError, match="Input/output error"):
        store.sync()


def test_the_state_cache_keeps_the_sessions_used_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "CACHED_SESSIONS", 3)
    store = SessionStore(tmp_path / "store")
    for i in range(5):
        store.append(_header(f"s{i}"), [_event(0)], _state(1), durable=False)
    store.sync()
    assert list(store._cache) == ["s2", "s3", "s4"]
    # an evicted session reads back from its file, state and all
    loaded = store.load("s0")
    assert loaded is not None and loaded.state.next_seq == 1
    assert list(store._cache) == ["s3", "s4", "s0"]
    store.append(_header("s0"), [_event(1)], _state(2), durable=False)
    assert store.load("s0") is loaded and loaded.state.next_seq == 2
