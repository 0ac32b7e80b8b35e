"""Fuzzing costguard.yaml: any file gets Settings or a ConfigError that names the problem,
never another exception (which the CLI would show as a traceback)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costguard.config import Settings, load_settings
from costguard.errors import ConfigError

# the real sections and a few of their keys, so the fuzzer gets past the unknown-key check
SECTIONS: dict[str, list[str]] = {
    "database_url": [], "policy_paths": [], "poll_interval": [], "paused": [],
    "providers": ["sim", "aws", "gcp"], "accounting": ["raw_retention"],
    "http": ["host", "port"], "alerts": ["console", "slack", "email", "routing_file"],
    "costs": ["price_overrides"], "safety": ["max_stops_per_cycle"],
    "daemon": ["leader_election", "log_format", "shutdown_grace", "alert_interval"],
}

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.sampled_from(["5m", "0s", "-1h", "1e9d", "postgresql://x",
                                                     "sqlite:///", "json", "[]", "~"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=3),
                      max_leaves=12)


@st.composite
def documents(draw: Any) -> Any:
    doc: dict[Any, Any] = {}
    for key in draw(st.lists(st.sampled_from(sorted(SECTIONS)), max_size=4, unique=True)):
        subkeys = SECTIONS[key]
        if subkeys and draw(st.booleans()):
            doc[key] = {k: draw(values) for k in draw(
                st.lists(st.sampled_from(subkeys), max_size=3, unique=True))}
        else:
            doc[key] = draw(values)
    if draw(st.booleans()):
        doc[draw(st.text(max_size=8) | st.integers() | st.none())] = draw(values)
    return doc if draw(st.integers(0, 9)) else draw(values)  # now and then not a mapping


def _load(path: Path) -> None:
    try:
        assert isinstance(load_settings(path), Settings)
    except ConfigError as exc:
        assert str(exc).strip() and "Traceback" not in str(exc)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("COSTGUARD_")]:
        monkeypatch.delenv(var)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents())
def test_any_yaml_document_is_settings_or_a_config_error(tmp_path: Path, clean_env: None,
                                                        doc: Any) -> None:
    path = tmp_path / "costguard.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    _load(path)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_settings_or_a_config_error(tmp_path: Path, clean_env: None,
                                                 raw: bytes) -> None:
    path = tmp_path / "costguard.yaml"
    path.write_bytes(raw)
    _load(path)
