"""The registry of ingested sources is saved during a run after SAVE_EVERY_FILES files, then, as
it grows, after a fixed share of the files done: a long run saves it a number of times that
grows with the logarithm of its file count (each save writes the whole registry), and a killed
run repeats at most that share of its files. What a run saves mid-way is what the finished run
holds for those files."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streams.facade import Recall
from streams.ingest import edge
from streams.ingest.edge import SAVE_EVERY_FILES, SAVE_GROWTH, save_due


def _schedule(files: int) -> list[int]:
    saves, saved = [], 0
    for done in range(1, files + 1):
        if save_due(done, saved):
            saves.append(done)
            saved = done
    return saves


def test_saves_come_every_few_hundred_files_then_at_a_growing_interval() -> None:
    saves = _schedule(100_000)
    assert saves[:10] == [SAVE_EVERY_FILES * k for k in range(1, 11)]
    gaps = [b - a for a, b in zip([0, *saves], [*saves, 100_000], strict=True)]
    done_before = [0, *saves]
    # never more than the larger of the floor and the share of what was done
    assert all(gap <= max(SAVE_EVERY_FILES, int(done * SAVE_GROWTH)) + 1
               for gap, done in zip(gaps, done_before, strict=True))
    assert len(saves) < 70  # every 200 files: 500 saves, the later ones of a large registry
    assert len(_schedule(1_000)) == 5


def test_a_run_saves_its_registry_on_the_way(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"s{i:02d}.jsonl").write_bytes(
            b'{"type":"session","version":0,"id":"s%02d","createdAt":1,"cwd":"/"}\n'
            b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":0}}\n' % i)
    monkeypatch.setattr(edge, "SAVE_EVERY_FILES", 3)
    seen: list[dict[str, object]] = []
    with Recall.open(tmp_path / "data") as recall:
        ingestor = recall.backend.runtime.ingestor
        save = ingestor._save_registry

        def saving() -> None:
            save()
            seen.append(orjson.loads(ingestor.registry_path.read_bytes()))

        monkeypatch.setattr(ingestor, "_save_registry", saving)
        assert recall.ingest([corpus]).events_added == 12
    assert [len(s) for s in seen] == [3, 6, 9, 12, 12]  # the last: the run's end
    final = seen[-1]
    assert all(final[k] == v for s in seen for k, v in s.items())
