"""The read path's light settings reader gives exactly what `Settings` gives for the same
environment (defaults, every value it accepts, the bounds), and gives up (None) whenever
`Settings` would read something it does not, or reject the value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from projections.errors import ConfigError
from streams.core.envsettings import FIELDS, SETTING_NAMES, LightSettings, light_settings
from streams.core.settings import Settings, load_settings

#: Spellings tried for every field: plain ones, bounds, and ones only pydantic reads.
TEXTS = ["0", "1", "2", "8", "50", "100", "256", "257", "300", "1024", "99999999999",
         "true", "false", "True", "yes", "no", "on", "off", "t", "f", " 1", "1 ", "01", "+1",
         "-1", "1_0", "1.0", "1e3", "", "x"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("RECALL_"):
            monkeypatch.delenv(key)


def _settings() -> Settings | None:
    try:
        return load_settings()
    except ConfigError:
        return None


def _value(settings: Any, name: str) -> Any:
    """A setting's value, the data dir as a Path (the light reader keeps it as its text)."""
    value = getattr(settings, name)
    return Path(value) if name == "data_dir" else value


def test_the_defaults_are_the_settings_defaults(clean_env: None) -> None:
    light = light_settings({})
    assert light is not None
    full = Settings()
    for name in LightSettings._fields:
        assert _value(light, name) == _value(full, name), name


def test_it_knows_every_setting_by_name() -> None:
    assert set(Settings.model_fields) == SETTING_NAMES


def test_every_light_field_is_a_setting() -> None:
    names = set(LightSettings._fields)
    assert names <= set(Settings.model_fields)
    assert set(FIELDS) <= names


@pytest.mark.parametrize("name", sorted(FIELDS))
@pytest.mark.parametrize("text", TEXTS)
def test_a_value_is_read_as_settings_reads_it_or_handed_over(
        clean_env: None, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> None:
    variable = f"RECALL_{name.upper()}"
    monkeypatch.setenv(variable, text)
    light = light_settings()
    full = _settings()
    if full is None:
        assert light is None, f"{variable}={text!r} is an error only Settings reports"
    elif light is not None:
        assert getattr(light, name) == getattr(full, name)
    if text in {"0", "1", "2", "8", "true", "false"} and full is not None:
        # the plain spellings are read, not handed over
        assert light is not None, f"{variable}={text!r}"


def test_settings_it_does_not_read_hand_over(clean_env: None) -> None:
    assert light_settings({"RECALL_BROKER": "kafka://h:9092"}) is None
    assert light_settings({"RECALL_REDACT_PATTERNS": "{}"}) is None
    assert light_settings({"RECALL_KAFKA_IDEMPOTENT": "1"}) is None


def test_variables_that_are_no_setting_are_ignored_as_settings_ignores_them(
        clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_MCP_SESSION", "x")
    monkeypatch.setenv("RECALL_NO_SUCH_SETTING", "not a number")
    light = light_settings()
    assert light is not None and light == light_settings({})
    Settings()  # reads neither
    assert light_settings({"RECALL_SHARDS": "4", "recall_shards": "5"}) is None


def test_a_name_in_any_case_is_read_as_settings_reads_it(
        clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("recall_Shards", "4")
    light = light_settings()
    assert light is not None and light.shards == Settings().shards == 4


def test_the_data_dir_is_the_option_else_the_variable_else_the_default(
        clean_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    light = light_settings()
    assert light is not None and Path(light.data_dir) == Settings().data_dir
    monkeypatch.setenv("RECALL_DATA_DIR", str(tmp_path / "env"))
    light = light_settings()
    assert light is not None and Path(light.data_dir) == Settings().data_dir == tmp_path / "env"
    light = light_settings(data_dir=str(tmp_path / "opt"))
    assert light is not None and Path(light.data_dir) == tmp_path / "opt"
    assert light_settings(data_dir="") is None
    assert light_settings(data_dir="a\x00b") is None


@pytest.fixture
def homeless(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No $HOME, no $XDG_DATA_HOME and no home in the user database (an arbitrary container
    user): `~` expands to itself."""
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)


def test_without_a_home_the_default_data_dir_is_a_config_error_and_a_given_one_is_used(
        homeless: None, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.code == "RECALL_CONFIG_INVALID" and "--data-dir" in caught.value.hint
    assert light_settings() is None  # (Settings reports it)
    assert load_settings(data_dir=tmp_path).data_dir == tmp_path
    light = light_settings(data_dir=str(tmp_path))
    assert light is not None and Path(light.data_dir) == tmp_path


def test_without_a_home_the_cli_says_which_setting_to_give(
        homeless: None, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from streams.faces.cli.main import main

    result = CliRunner().invoke(main, ["sessions"])
    assert result.exit_code == 2 and "RECALL_CONFIG_INVALID" in result.output, result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(main, ["--data-dir", str(tmp_path / "data"), "sessions"])
    assert result.exit_code == 0 and "No sessions." in result.output, result.output
