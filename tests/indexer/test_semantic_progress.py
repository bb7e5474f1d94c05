"""The meaning model's one-off table distillation tells its progress (tokens done of all) to
the report a face installs, and `prepare_meaning_model` distills only where no table is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer import semantic
from streams import facade


class _Tokenizer:
    """A vocabulary of `size` ids with BERT's specials and "the"."""

    def __init__(self, size: int) -> None:
        self.size = size

    def get_vocab_size(self) -> int:
        return self.size

    def token_to_id(self, token: str) -> int:
        return {"[CLS]": 1, "[SEP]": 2, "the": 3}[token]


class _Session:
    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def run(self, _: Any, feeds: dict[str, Any]) -> list[Any]:
        ids = feeds["input_ids"].astype(np.float32)
        # HIDDEN values per position, distinct per token: a table of full rank
        return [np.sin(ids[..., None] * (np.arange(HIDDEN) + 1) * 0.37)]


class _Ort:
    InferenceSession = _Session

    class SessionOptions:
        pass


HIDDEN = semantic.DIMENSION + 8


def test_distilling_tells_the_tokens_done_of_all(monkeypatch: pytest.MonkeyPatch) -> None:
    size = 3 * semantic.DISTILL_BATCH + 17
    told: list[tuple[int, int]] = []
    semantic.report_distilling(lambda done, total: told.append((done, total)))
    try:
        table = semantic.distill(np, _Ort(), Path("model.onnx"), _Tokenizer(size))
    finally:
        semantic.report_distilling(None)
    assert table.shape == (size, semantic.DIMENSION)
    assert [t for _, t in told] == [size] * 4
    assert [d for d, _ in told] == [semantic.DISTILL_BATCH * k for k in (1, 2, 3)] + [size]
    told.clear()
    semantic.distill(np, _Ort(), Path("model.onnx"), _Tokenizer(size))
    assert told == []  # (no report installed: nothing told)


def test_preparing_the_model_distills_only_without_a_stored_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[Any] = []

    def load() -> None:
        report = semantic._distill_report
        assert report is not None
        report(1, 2)
        report(2, 2)
        loads.append(report)

    monkeypatch.setattr(semantic, "load_embedder", load)
    monkeypatch.setattr(semantic, "table_stored", lambda: True)
    told: list[tuple[int, int]] = []
    assert facade.prepare_meaning_model(lambda d, t: told.append((d, t))) is False
    assert loads == [] and told == []
    monkeypatch.setattr(semantic, "table_stored", lambda: False)
    assert facade.prepare_meaning_model(lambda d, t: told.append((d, t))) is True
    assert told == [(1, 2), (2, 2)]
    assert semantic._distill_report is None  # (the report is uninstalled afterwards)
