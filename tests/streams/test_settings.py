"""Settings: every value they accept is one the layers below accept too."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from streams.core.settings import Settings
from streams.runtime.embedded.runtime import index_config


def test_the_lowest_accepted_settings_make_a_valid_index_config(tmp_path: Path) -> None:
    lowest = Settings(data_dir=tmp_path, shards=1, default_limit=1, max_limit=1,
                      snippet_chars=1, read_window_max=0, snapshot_retention_s=1)
    config = index_config(lowest)
    assert (config.shards, config.snapshot_retention_s) == (1, 1)


@pytest.mark.parametrize("field", ["shards", "default_limit", "max_limit", "snippet_chars",
                                   "snapshot_retention_s"])
def test_a_value_below_what_the_index_accepts_is_refused_as_a_setting(
        tmp_path: Path, field: str) -> None:
    with pytest.raises(ValidationError):
        Settings(data_dir=tmp_path, **{field: 0})
