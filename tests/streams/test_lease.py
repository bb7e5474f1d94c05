"""The job lease of streams.runtime.kafka.rebuild: renewed in the background, handed back on release."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from streams.runtime.kafka import rebuild
from streams.runtime.kafka.fleet import Lineup


def test_release_during_a_renewal_whose_client_swallows_cancellation_returns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka's `AIOKafkaClient.close` awaits a task of its own under
    `suppress(CancelledError)`: a renewal cancelled there went on renewing, and the job that
    awaited it after its swap hung forever. Here every publish ends the same way."""
    published: list[Lineup] = []
    renewing = asyncio.Event()

    async def publish_lineup(bootstrap: str, prefix: str, lineup: Lineup) -> None:
        published.append(lineup)
        if lineup.job is not None and len(published) > 1:
            renewing.set()
        inner = asyncio.create_task(asyncio.sleep(0.05))  # the client's own task
        with contextlib.suppress(asyncio.CancelledError):
            await inner

    async def read_lineup(bootstrap: str, prefix: str) -> Lineup:
        return published[-1]

    monkeypatch.setattr(rebuild, "publish_lineup", publish_lineup)
    monkeypatch.setattr(rebuild, "read_lineup", read_lineup)

    async def scenario() -> None:
        lease = rebuild._Lease("127.0.0.1:9", "p", "reindex", Lineup(), lease_s=0.06)
        await lease.acquire()
        await asyncio.wait_for(renewing.wait(), 5)  # a renewal is publishing now
        await asyncio.wait_for(lease.release(Lineup(live=2)), 5)
        handed_back = len(published)
        await asyncio.sleep(0.2)  # no renewal after the release
        assert len(published) == handed_back
        assert published[-1] == Lineup(live=2) and published[-1].job is None

    # in a thread: a lease that never stops renewing also hangs asyncio.run's shutdown
    failures: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the lease's release never returned"
    assert failures == []
