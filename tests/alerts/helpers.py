"""Shared builders for the alert tests: outbox rows, settings, store contents, signed clicks."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlmodel import select

from costguard.alerts.outbox import enqueue
from costguard.alerts.settings import AlertsSettings
from costguard.alerts.tables import AlertDeliveryRow
from costguard.store.db import Database
from costguard.store.tables import AlertRow, InstanceRow, PolicyStateRow
from tests.alerts.fakes import BOT_TOKEN, SMTP_PASSWORD, SMTP_USER, WEBHOOK_PATH

T0 = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


def idle_warning(db: Database, n: int = 1, *, now: datetime = T0,
                 recipients: Sequence[str] = ("team:research",), team: str | None = "research",
                 owner: str | None = "ana", kind: str = "idle-warning",
                 severity: str = "warning", key: str = "idle-gpu") -> list[int]:
    """Enqueue `n` idle warnings like the engine writes them; returns their alert ids."""
    deadline = now + timedelta(minutes=15)
    with db.session() as s:
        for i in range(n):
            iid = f"i-0abc{i:012d}"
            enqueue(
                s, dedupe_key=f"{key}|sim|{iid}|notify|1", kind=kind, severity=severity,
                now=now, recipients=list(recipients), policy="idle-gpu", provider="sim",
                instance_id=iid, team=team, owner=owner,
                subject=f"trainer-{i} ({iid}) will be stopped at {deadline:%Y-%m-%d %H:%M} UTC "
                        "unless it gets busy (idle-gpu)",
                body=f"Why: all 8 GPUs idle for 1h\nCost: $98.32/h (p4d.24xlarge, on-demand, "
                     f"us-east-1)\nDeadline: {deadline.isoformat()}\nPlease check your job.",
                context={"reason": "all 8 GPUs idle for 1h (SM activity < 5%)",
                         "evidence": "sm_active p95 0.4% over 60 min, 0 processes",
                         "usd_per_hour": 98.32, "deadline": deadline.isoformat(),
                         "instance_type": "p4d.24xlarge"})
        ids = [a.id for a in s.exec(select(AlertRow).order_by(AlertRow.id))]  # type: ignore[arg-type]
    return [i for i in ids if i is not None][-n:]


def deliveries(db: Database, **where: Any) -> list[AlertDeliveryRow]:
    with db.session() as s:
        stmt = select(AlertDeliveryRow).order_by(AlertDeliveryRow.id)  # type: ignore[arg-type]
        for k, v in where.items():
            stmt = stmt.where(getattr(AlertDeliveryRow, k) == v)
        return list(s.exec(stmt))


def alerts(db: Database) -> list[AlertRow]:
    with db.session() as s:
        return list(s.exec(select(AlertRow).order_by(AlertRow.id)))  # type: ignore[arg-type]


def slack_bot(base: str, **extra: Any) -> AlertsSettings:
    return AlertsSettings.model_validate({
        "console": False, "slack": {"bot_token": BOT_TOKEN, "api_base_url": f"{base}/api/",
                                    "timeout_s": 5},
        "backoff": {"initial": "30s", "max": "10m"}, **extra})


def slack_webhook(base: str, **extra: Any) -> AlertsSettings:
    return AlertsSettings.model_validate({
        "console": False, "slack": {"webhook_url": f"{base}{WEBHOOK_PATH}", "timeout_s": 5},
        "backoff": {"initial": "30s", "max": "10m"}, **extra})


def smtp(port: int, cert: Path, *, implicit_tls: bool = False, **extra: Any) -> AlertsSettings:
    return AlertsSettings.model_validate({
        "console": False,
        "email": {"host": "127.0.0.1", "port": port, "starttls": not implicit_tls,
                  "tls": implicit_tls, "username": SMTP_USER, "password": SMTP_PASSWORD,
                  "from_addr": "costguard@example.com", "ca_file": str(cert), "timeout_s": 5},
        "backoff": {"initial": "30s", "max": "10m"}, **extra})


def routing_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def seed_warned_instance(db: Database, *, instance_id: str = "i-0abc000000000000",
                         policy: str = "idle-gpu", now: datetime = T0) -> None:
    """An instance the engine has warned about: inventory row plus policy state `warned`."""
    with db.session() as s:
        s.add(InstanceRow(
            provider="sim", instance_id=instance_id, account="sim-account", region="us-east-1",
            instance_type="p4d.24xlarge", state="running", lifecycle="on-demand", gpu_count=8,
            launch_time=now - timedelta(hours=5), tags={"team": "research", "owner": "ana"},
            first_seen=now - timedelta(hours=5), last_seen=now, state_changed_at=now))
        s.add(PolicyStateRow(policy=policy, provider="sim", instance_id=instance_id,
                             state="warned", since=now, deadline=now + timedelta(minutes=15),
                             episode=1, evidence="idle"))


def slack_signed(body: bytes, secret: str, *, at: int | None = None) -> dict[str, str]:
    """The headers Slack sends with an interactivity POST of `body`, signed with `secret`
    (v0 HMAC-SHA256 over the timestamp, now unless `at`, and the body)."""
    ts = str(at if at is not None else int(time.time()))
    sig = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={sig}",
            "Content-Type": "application/x-www-form-urlencoded"}
