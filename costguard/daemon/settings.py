"""Settings of the daemon (the `daemon:` section of costguard.yaml).

Until the section is registered in `costguard.config.Settings`, `daemon_settings()` builds
the defaults, and the two variables operators reach for most are read directly:
`COSTGUARD_LOG_FORMAT` (text | json) and `COSTGUARD_AGENT_TOKEN` (the agent ingest token).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from costguard.errors import ConfigError
from costguard.policy.base import Duration

if TYPE_CHECKING:
    from costguard.config import Settings

LogFormat = Literal["text", "json"]


class DaemonSettings(BaseModel):
    """How `costguard run` behaves as a service."""

    model_config = ConfigDict(extra="forbid")

    log_format: LogFormat = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # `auto`: a PostgreSQL advisory lock (PostgreSQL), a file lock beside the SQLite file
    leader_election: Literal["auto", "off"] = "auto"
    leader_lock_file: Path | None = None  # SQLite only; default: <database>.leader
    alert_interval: Duration = timedelta(seconds=30)
    prune_interval: Duration = timedelta(hours=1)
    shutdown_grace: Duration = timedelta(seconds=25)
    http_enabled: bool = True
    slack_signing_secret: SecretStr | None = None
    readiness_factor: float = Field(default=3.0, gt=1)  # ready while last cycle < 3x poll


def daemon_settings(settings: Settings) -> DaemonSettings:
    """The `daemon:` section (defaults when absent), with the documented env overrides."""
    section = getattr(settings, "daemon", None)
    cfg = section if isinstance(section, DaemonSettings) else DaemonSettings()
    fmt = os.environ.get("COSTGUARD_LOG_FORMAT")
    if fmt:
        if fmt not in ("text", "json"):
            raise ConfigError(f"COSTGUARD_LOG_FORMAT={fmt!r}: use `text` or `json`")
        cfg = cfg.model_copy(update={"log_format": fmt})
    return cfg


def ingest_token(settings: Settings) -> str | None:
    """The agent token: `http.ingest_token` in costguard.yaml, else $COSTGUARD_AGENT_TOKEN."""
    if settings.http.ingest_token is not None:
        return settings.http.ingest_token.get_secret_value() or None
    return os.environ.get("COSTGUARD_AGENT_TOKEN") or None
