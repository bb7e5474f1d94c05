"""Transport: the one seam onto faust's and aiokafka's internals (patches, private attributes).

Everything else in `streams` uses faust and aiokafka through their public API and this module's
small interface. Each reliance below names what it touches, why, and the test that breaks when
the library changes it (tests/integration/test_kafka_seam.py runs them against the installed
library and the real brokers).

Contract (what callers may rely on once `install()` ran in the process):
1. Idle consumers wait: a fetch that brings no records is followed by a pause, so that the
   fetch round trip lasts at least `min(fetch_max_wait_ms, IDLE_FETCH_WAIT_MS)`. A broker that
   long-polls (Kafka, tansu) already waited and gets no extra pause; noida-db answers an empty
   fetch at once and would otherwise be asked thousands of times a second.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

#: Ceiling of the client-side pause after an empty fetch, in ms. It bounds the latency an idle
#: consumer adds to a hop (measured: one idle consumer on noida-db sent 4–5k fetches/s and
#: burned ~0.85 core without it; ENGINE.md, pipeline profile).
IDLE_FETCH_WAIT_MS = 50

_installed = False
_fetch = Fetcher._proc_fetch_request


async def _fetch_waiting(self: Any, assignment: Any, node_id: Any, request: Any) -> bool:
    # Fetcher._proc_fetch_request (private): returns True when it buffered records. The fetch
    # routine sends no new request to a node while this task runs, so sleeping here is the
    # long poll the broker did not do.
    started = time.monotonic()
    found: bool = await _fetch(self, assignment, node_id, request)
    if not found:
        wait = min(self._fetch_max_wait_ms, IDLE_FETCH_WAIT_MS) / 1000
        left = wait - (time.monotonic() - started)
        if left > 0:
            try:
                await asyncio.sleep(left)
            except asyncio.CancelledError:
                return False  # as the original: a cancelled fetch's result is of no interest
    return found


def install() -> None:
    """Apply the process-wide behaviours of the contract (idempotent)."""
    global _installed
    if _installed:
        return
    Fetcher._proc_fetch_request = _fetch_waiting
    _installed = True
