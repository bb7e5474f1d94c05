"""The seam's item 11 (streams.runtime.kafka.seam): a consumer's position reset whose ListOffsets
meets stale metadata (a moved leader, an unknown partition, a closed connection) asks for
metadata before it fails as before, so aiokafka's next retry goes to the new leader; other
errors and answers leave the metadata alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.errors import (
    KafkaConnectionError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from aiokafka.structs import TopicPartition

from streams.runtime.kafka import seam


class _Client:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked = 0

    def force_metadata_update(self) -> None:
        self.asked += 1

    async def send(self, node_id: Any, request: Any) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _Offsets:
    """A ListOffsets v1 answer for partition 0 of `topic` with `code`."""

    API_VERSION = 1

    def __init__(self, topic: str, code: int) -> None:
        self.topics = [(topic, [(0, code, -1, 42)])]


def _reset(answer: Any) -> tuple[Any, int]:
    seam.install()
    fetcher = Fetcher.__new__(Fetcher)  # (only what _proc_offset_request reads)
    client = fetcher._client = _Client(answer)
    fetcher._isolation_level = 0

    async def run() -> Any:
        try:
            return await fetcher._proc_offset_request(0, {"t": [(0, -1)]})
        except Exception as exc:  # the error the reset path logs and retries
            return exc

    return asyncio.run(run()), client.asked


@pytest.mark.parametrize("answer", [_Offsets("t", NotLeaderForPartitionError.errno),
                                    KafkaConnectionError("closed")])
def test_a_reset_that_meets_stale_metadata_asks_for_it_and_fails_as_before(answer: Any) -> None:
    outcome, asked = _reset(answer)
    assert isinstance(outcome, NotLeaderForPartitionError | KafkaConnectionError)
    assert asked == 1


@pytest.mark.parametrize("answer", [_Offsets("t", TopicAuthorizationFailedError.errno),
                                    RequestTimedOutError()])
def test_other_failures_leave_the_metadata_alone(answer: Any) -> None:
    outcome, asked = _reset(answer)
    assert isinstance(outcome, TopicAuthorizationFailedError | RequestTimedOutError)
    assert asked == 0


def test_an_answer_is_the_offsets_as_aiokafka_reads_them() -> None:
    outcome, asked = _reset(_Offsets("t", 0))
    assert outcome == {TopicPartition("t", 0): (42, -1)} and asked == 0
