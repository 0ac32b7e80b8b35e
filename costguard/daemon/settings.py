"""Settings of the daemon (the `daemon:` section of costguard.yaml). The section alone: what
the whole configuration and the environment make of it is `costguard.config.daemon_settings`
(`COSTGUARD_LOG_FORMAT`) and `costguard.config.ingest_token` (`COSTGUARD_AGENT_TOKEN`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from costguard.policy.base import Duration

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
