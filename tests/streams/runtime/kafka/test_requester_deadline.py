"""Unit: a request whose send cannot complete (its partition has no leader while a broker is
down) ends at its deadline with RECALL_REQUEST_TIMEOUT, not when the producer gives up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from streams.runtime.kafka.rpc import Requester, RequestTimeout


class _LeaderlessProducer:
    """A producer whose sends wait for a partition leader that does not come back."""

    async def send_and_wait(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(3600)


@pytest.mark.parametrize("hop_s", [None, 0.05])
def test_a_send_waiting_for_a_lost_leader_ends_at_the_deadline(hop_s: float | None) -> None:
    requester = Requester("127.0.0.1:9", "p.replies", 4, producer=_LeaderlessProducer())  # type: ignore[arg-type]

    async def ask() -> None:
        deadline = time.time() + 0.3
        if hop_s is None:
            await requester.request("p.requests", "search", {}, deadline=deadline)
        else:
            await requester.request_retrying("p.requests", "search", {}, deadline=deadline,
                                             hop_s=hop_s)

    started = time.monotonic()
    with pytest.raises(RequestTimeout) as info:
        asyncio.run(ask())
    assert info.value.code == "RECALL_REQUEST_TIMEOUT"
    assert time.monotonic() - started < 2.0
    assert requester._pending == {}  # nothing left waiting for a reply
