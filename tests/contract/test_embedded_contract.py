"""The search/reference contract on the embedded runtime (the Kafka suite runs the same one)."""

from __future__ import annotations

from pathlib import Path

import orjson
from contract import answers, check_expectations, contract_corpus

from streams.facade import Recall


def test_embedded_runtime_honours_the_contract(tmp_path: Path) -> None:
    files = contract_corpus(tmp_path / "corpus")
    with Recall.open(tmp_path / "data") as recall:
        report = recall.ingest(files)
        assert report.rejected == 0
        result = answers(recall)
    check_expectations(result)


def test_answers_are_byte_identical_across_shard_counts_and_reopen(tmp_path: Path) -> None:
    files = contract_corpus(tmp_path / "corpus")
    outputs = []
    for shards in (1, 3, 8):
        with Recall.open(tmp_path / f"data-{shards}", shards=shards) as recall:
            recall.ingest(files)
            outputs.append(orjson.dumps(answers(recall)))
    with Recall.open(tmp_path / "data-8", shards=8) as recall:
        outputs.append(orjson.dumps(answers(recall)))
    # cursors differ per index (they are signed by each index's key); everything else must not
    def strip(raw: bytes) -> object:
        return orjson.loads(raw)
    assert strip(outputs[0]) == strip(outputs[1]) == strip(outputs[2]) == strip(outputs[3])
