"""`costguard alerts test`, `list` and `retry`: a Typer sub-app.

The main app registers it with `app.add_typer(alerts_app, name="alerts")`.
"""

from __future__ import annotations

import getpass
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from costguard.cli_common import cli_clock
from costguard.cli_common import fail as _fail
from costguard.errors import CostguardError
from costguard.plain_lines import shown

if TYPE_CHECKING:  # the commands import these when they run: `costguard --help` stays quick
    from sqlmodel import Session

    from costguard.alerts.settings import AlertsSettings
    from costguard.alerts.tables import AlertDeliveryRow
    from costguard.clock import Clock
    from costguard.store.db import Database

alerts_app = typer.Typer(
    help="Alert delivery: send a sample, see the outbox, retry what failed.\n\n"
         "Example: costguard alerts test --to slack:#finops",
    no_args_is_help=True,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="costguard.yaml to read (default: ./costguard.yaml "
                 "if present, or $COSTGUARD_CONFIG)."),
]


def _echo(text: str, err: bool = False) -> None:
    # subjects and targets hold instance names and tags: no terminal controls (plain_lines)
    typer.echo(shown(text), err=err)


def alerts_settings(settings: Any) -> AlertsSettings:
    """The `alerts` section as AlertsSettings (also from an older, smaller alerts model)."""
    from costguard.alerts.settings import AlertsSettings

    section = settings.alerts
    if isinstance(section, AlertsSettings):
        return section
    return AlertsSettings.model_validate(section.model_dump())


def _open(config: Path | None, *, create: bool = True) -> tuple[Database, AlertsSettings]:
    """The store (`costguard --database` where given; `create`: False for a command that
    only reads, which must never create one) and the alerts settings."""
    from costguard.alerts.routing import RoutingError, load_routing
    from costguard.cli_common import load_settings_or_exit
    from costguard.store.db import Database

    settings = load_settings_or_exit(config)
    try:
        alerts = alerts_settings(settings)
        if alerts.routing_file is not None:
            load_routing(alerts.routing_file)  # report a broken file before anything else
        return Database(settings.database_url, create=create), alerts
    except RoutingError as exc:
        raise _fail(f"invalid routing file:\n{exc}") from None
    except CostguardError as exc:
        raise _fail(exc) from None


def enqueue_sample(s: Session, to: str, now: datetime) -> None:
    """A realistic idle warning for a made-up instance, addressed to `to` alone."""
    from costguard.alerts.outbox import enqueue

    deadline = now + timedelta(minutes=15)
    enqueue(
        s, dedupe_key=f"sample|{to}|{now.isoformat()}", kind="idle-warning",
        severity="warning", now=now, recipients=[to], policy="sample-idle-gpu",
        provider="sim", instance_id="i-0sample0000000001", team="research", owner="ana",
        subject=f"[sample] trainer-7 (i-0sample0000000001) will be stopped at "
                f"{deadline:%Y-%m-%d %H:%M} UTC unless it gets busy (sample-idle-gpu)",
        body="This is a sample sent by `costguard alerts test`; nothing will be stopped.",
        context={"sample": True, "reason": "all 8 GPUs idle for 1h (SM activity < 5%)",
                 "evidence": "sm_active p95 0.4% over 60 min, 0 processes",
                 "usd_per_hour": 98.32, "deadline": deadline.isoformat(),
                 "instance_type": "p4d.24xlarge"})


def send_sample(db: Database, settings: AlertsSettings, to: str, clock: Clock) -> list[str]:
    """Send one sample alert to `to` now; returns one line per delivery, raising
    CostguardError when nothing could be sent."""
    from sqlmodel import select

    from costguard.alerts.dispatcher import Dispatcher
    from costguard.alerts.routing import check_recipient
    from costguard.alerts.tables import AlertDeliveryRow
    from costguard.store.tables import AlertRow

    check_recipient(to)
    now = clock.now()
    with db.session() as s:
        enqueue_sample(s, to, now)
        alert_id = s.exec(select(AlertRow.id).where(
            AlertRow.dedupe_key == f"sample|{to}|{now.isoformat()}")).one()
    assert alert_id is not None
    Dispatcher(db, settings).run(now, only_alerts=[alert_id])
    with db.session() as s:
        alert = s.get(AlertRow, alert_id)
        rows = list(s.exec(select(AlertDeliveryRow).where(
            AlertDeliveryRow.alert_id == alert_id)))
    if not rows:
        why = alert.last_error if alert is not None else None
        raise CostguardError(f"nothing sent to {to}: {why or 'no channel for it'}")
    lines = []
    for r in rows:
        if r.status == "sent":
            lines.append(f"sent to {r.channel}:{r.target} (id {r.external_id})")
        else:
            lines.append(f"NOT sent to {r.channel}:{r.target}: {r.status}: {r.last_error}")
    if not any(r.status == "sent" for r in rows):
        raise CostguardError("\n".join(lines))
    return lines


@alerts_app.command("test")
def test_command(
    to: Annotated[str, typer.Option("--to", help="slack:#channel, slack:U0123ABCD or "
                                    "email:name@example.com")],
    config: ConfigOpt = None,
) -> None:
    """Send a sample idle warning to one recipient, through the real channel.

    Example: costguard alerts test --to email:finops@example.com
    """
    from costguard.alerts.routing import check_recipient

    try:
        check_recipient(to)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--to") from None
    db, settings = _open(config)
    try:
        for line in send_sample(db, settings, to, cli_clock()):
            _echo(line)
    except CostguardError as exc:
        raise _fail(exc, 1) from None
    finally:
        db.dispose()


def _fmt(t: datetime | None) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S}" if t else "-"


@alerts_app.command("list")
def list_command(
    pending: Annotated[bool, typer.Option("--pending", help="Waiting to be sent.")] = False,
    failed: Annotated[bool, typer.Option(
        "--failed", help="Given up on, or interrupted and unconfirmed.")] = False,
    unconfirmed: Annotated[bool, typer.Option(
        "--unconfirmed", help="Interrupted mid-send on a channel that cannot be asked "
        "whether it arrived (check there, then `costguard alerts retry ID`).")] = False,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows.")] = 50,
    config: ConfigOpt = None,
    fmt: Annotated[Literal["text", "json"], typer.Option(
        "--format", help="text (a table) or json: {deliveries: [...], unrouted: [...]}.",
    )] = "text",
) -> None:
    """Show the alert outbox: per-recipient deliveries, newest first.

    Example: costguard alerts list --failed --format json
    """
    from sqlmodel import col, select

    from costguard.alerts.tables import AlertDeliveryRow
    from costguard.store.tables import AlertRow

    statuses: list[str] = []
    if pending:
        statuses += ["pending", "sending", "held"]
    if failed:
        statuses += ["failed", "unconfirmed"]
    if unconfirmed and not failed:
        statuses += ["unconfirmed"]
    db, _ = _open(config, create=False)  # it only reads
    try:
        with db.session() as s:
            stmt = select(AlertDeliveryRow).order_by(col(AlertDeliveryRow.id).desc()).limit(limit)
            if statuses:
                stmt = stmt.where(col(AlertDeliveryRow.status).in_(statuses))
            rows = list(s.exec(stmt))
            subjects = {a.id: a.subject for a in s.exec(select(AlertRow).where(
                col(AlertRow.id).in_([r.alert_id for r in rows if r.alert_id])))}
            unrouted_stmt = select(AlertRow).where(
                col(AlertRow.status).in_(["pending"] if pending else ["failed"] if failed
                                         else ["pending", "failed"]))
            unrouted = [] if unconfirmed and not (pending or failed) else [
                a for a in s.exec(unrouted_stmt.limit(limit))
                if not (a.status == "failed" and pending)]
    finally:
        db.dispose()
    only_alerts = [a for a in unrouted if a.id not in {r.alert_id for r in rows}]
    if fmt == "json":
        _echo(json.dumps({
            "deliveries": [_delivery_json(r, subjects) for r in rows],
            "unrouted": [{"id": a.id, "status": a.status, "kind": a.kind,
                          "subject": a.subject, "last_error": a.last_error}
                         for a in only_alerts],
        }, indent=2))
        return
    if not rows and not unrouted:
        _echo("no alerts" + (" matching" if statuses else ""))
        return
    _echo(f"{'id':>6}  {'status':<11} {'try':>3}  {'to':<32} {'next / sent':<19}  what")
    for r in rows:
        when, what = _when(r), _what(r, subjects)
        _echo(f"{r.id:>6}  {r.status:<11} {r.attempts:>3}  "
                   f"{(r.channel + ':' + r.target)[:32]:<32} {_fmt(when):<19}  {what[:80]}")
        if r.last_error and r.status != "sent":
            _echo(f"{'':>8}last error: {r.last_error[:300]}")
    if only_alerts:
        _echo("\nalerts not yet routed to anyone:")
        for a in only_alerts:
            extra = f" ({a.last_error})" if a.last_error else ""
            _echo(f"{a.id:>6}  {a.status:<11} {a.kind:<14} {a.subject[:80]}{extra}")
    waiting = [r.id for r in rows if r.status == "unconfirmed"]
    if waiting:
        _echo(f"\n{len(waiting)} unconfirmed: check the destination, then "
                   f"`costguard alerts retry {' '.join(str(i) for i in waiting[:5])}` for "
                   "those that are missing")


def _when(r: AlertDeliveryRow) -> datetime | None:
    """When it was sent (sent, digested, unconfirmed) or is next tried (the others)."""
    return r.sent_at if r.status in ("sent", "digested", "unconfirmed") else r.next_attempt_at


def _what(r: AlertDeliveryRow, subjects: dict[int | None, str]) -> str:
    return subjects.get(r.alert_id, "daily digest") if r.kind != "digest" else "daily digest"


def _delivery_json(r: AlertDeliveryRow, subjects: dict[int | None, str]) -> dict[str, Any]:
    def iso(t: datetime | None) -> str | None:
        return t.isoformat() if t else None
    return {"id": r.id, "status": r.status, "attempts": r.attempts, "channel": r.channel,
            "target": r.target, "kind": r.kind, "alert_id": r.alert_id,
            "subject": _what(r, subjects), "sent_at": iso(r.sent_at),
            "next_attempt_at": iso(r.next_attempt_at), "last_error": r.last_error}


@alerts_app.command("retry")
def retry_command(
    ids: Annotated[list[int] | None, typer.Argument(
        help="Delivery ids from `costguard alerts list`.", show_default=False)] = None,
    failed: Annotated[bool, typer.Option(
        "--failed", help="Every failed delivery, and alerts that failed before routing.")
    ] = False,
    unconfirmed: Annotated[bool, typer.Option(
        "--unconfirmed", help="Every unconfirmed delivery.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Queue failed or unconfirmed deliveries again; the daemon sends them at its next pass.

    A sent message is never queued again. Each requeue is journaled (`costguard audit`).

    Example: costguard alerts retry 12 15

    Example: costguard alerts retry --failed
    """
    if not ids and not failed and not unconfirmed:
        raise typer.BadParameter("name delivery ids, --failed or --unconfirmed",
                                 param_hint="IDS")
    from costguard.alerts.retry import requeue

    db, _ = _open(config)
    try:
        result = requeue(db, cli_clock().now(), f"operator {_operator()}", ids=ids or (),
                         failed=failed, unconfirmed=unconfirmed)
    finally:
        db.dispose()
    for q in result.requeued:
        what = "daily digest" if q.kind == "digest" else "alert"
        _echo(f"requeued {q.id} ({what} to {q.to}, was {q.was})")
    for alert_id, subject in result.rerouted:
        _echo(f"alert {alert_id} goes back to routing: {subject[:80]}")
    for rid, why in result.refused:
        _echo(f"not requeued {rid}: {why}", err=True)
    if not (result.requeued or result.rerouted or result.refused):
        _echo("nothing to retry")
    if result.refused and ids:
        raise typer.Exit(1)


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
