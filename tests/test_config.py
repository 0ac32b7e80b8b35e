"""Configuration: YAML plus COSTGUARD_* variables; a wrong key or value names the fix."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from costguard.config import load_settings
from costguard.errors import ConfigError


def test_defaults_are_sqlite_in_the_working_directory_and_the_simulated_cloud(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.database_url == "sqlite:///costguard.db"
    assert s.providers.enabled() == ["sim"]
    assert s.poll_interval == timedelta(minutes=5)


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("poll_interval: 10m\nproviders:\n  sim: {instances: 5}\n")
    monkeypatch.setenv("COSTGUARD_POLL_INTERVAL", "2m")
    monkeypatch.setenv("COSTGUARD_PROVIDERS__SIM__SEED", "11")
    s = load_settings(cfg)
    assert s.poll_interval == timedelta(minutes=2)
    assert s.providers.sim is not None and s.providers.sim.seed == 11
    assert s.providers.sim.instances == 5


def test_unknown_key_names_the_key_and_the_valid_ones(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("pol_interval: 5m\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    text = str(exc.value)
    assert "pol_interval: unknown key" in text and "poll_interval" in text


def test_bad_value_names_the_key_the_env_variable_and_the_fix(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("poll_interval: soon\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    assert "poll_interval" in str(exc.value)
    assert "45m" in str(exc.value) and "COSTGUARD_POLL_INTERVAL" in str(exc.value)


def test_broken_yaml_points_at_the_line(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("providers:\n  sim: [\n")
    with pytest.raises(ConfigError, match=r"costguard.yaml:\d+:\d+"):
        load_settings(cfg)


def test_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml")
