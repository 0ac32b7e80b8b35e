"""`costguard billing|anomaly|budget` read the time from the CLI's clock, not the wall clock.

Each test runs a command with a ManualClock months away from today: the window (`--since
30d`), the month, or the stamp the command writes follows that clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer
from sqlmodel import select
from typer.testing import CliRunner

from costguard import cli_common
from costguard.billing.commands import billing_app
from costguard.clock import ManualClock
from costguard.costs.commands import anomaly_app, budget_app
from costguard.store.bill_tables import BillingCostRow
from costguard.store.db import Database
from costguard.store.tables import AnomalyRow
from tests.costs.fleet import add_interval
from tests.costs.test_billing_import import HEADER, focus_line

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # the day the commands believe it is


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", url)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_common, "CLOCK", ManualClock(NOW))
    database = Database(url)
    yield database
    database.dispose()


def _anomaly(db: Database, when: datetime, explanation: str) -> int:
    with db.session() as s:
        row = AnomalyRow(rule="r", dimension="team", value="x", granularity="day",
                         bucket_start=when, explanation=explanation, detected_at=when)
        s.add(row)
        s.flush()
        assert row.id is not None
        return row.id


def test_anomaly_list_window_is_counted_back_from_the_clock(db: Database) -> None:
    _anomaly(db, NOW - timedelta(days=29), "inside the 30 days")
    _anomaly(db, NOW - timedelta(days=31), "before the 30 days")
    _anomaly(db, NOW + timedelta(days=200), "after the clock: listed, as ever")
    out = CliRunner().invoke(anomaly_app, ["list", "--since", "30d"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "inside the 30 days" in out.output and "after the clock" in out.output
    assert "before the 30 days" not in out.output


def test_anomaly_feedback_is_stamped_with_the_clock(db: Database) -> None:
    anomaly_id = _anomaly(db, NOW - timedelta(days=1), "team x +$1")
    out = CliRunner().invoke(anomaly_app, ["ack", str(anomaly_id)])
    assert out.exit_code == 0, out.output
    with db.session() as s:
        row = s.get(AnomalyRow, anomaly_id)
        assert row is not None and row.feedback_at is not None
        assert row.feedback_at.replace(tzinfo=UTC) == NOW


def test_billing_import_stamps_lines_with_the_clock(db: Database, tmp_path: Path) -> None:
    export = tmp_path / "focus.csv"
    export.write_text(HEADER + focus_line("12.5", "research"))
    out = CliRunner().invoke(billing_app, ["import", str(export)],
                             env={"COSTGUARD_POLICY_PATHS": "[]"})  # none configured
    assert out.exit_code == 0, out.output
    with db.session() as s:
        stamps = [r.imported_at.replace(tzinfo=UTC) for r in s.exec(select(BillingCostRow))]
    assert stamps == [NOW]


@pytest.fixture
def moto_ce(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    httpx.post(f"{url}/moto-api/reset").raise_for_status()  # moto's backends are per process
    for var, value in {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        yield url
    finally:
        server.stop()


def test_cost_explorer_import_asks_for_days_up_to_the_clock(db: Database, moto_ce: str) -> None:
    day = {"TimePeriod": {"Start": "2026-03-08", "End": "2026-03-09"}, "Estimated": False,
           "Groups": [{"Keys": ["team$research"],
                       "Metrics": {"UnblendedCost": {"Amount": "7", "Unit": "USD"}}}]}
    httpx.post(f"{moto_ce}/moto-api/static/ce/cost-and-usage-results",
               json={"results": [{"ResultsByTime": [day]}]}).raise_for_status()
    out = CliRunner().invoke(billing_app, ["import-ce", "--since", "7d"])
    assert out.exit_code == 0, out.output
    with db.session() as s:
        stamps = [r.imported_at.replace(tzinfo=UTC) for r in s.exec(select(BillingCostRow))]
    assert stamps == [NOW]
    asked = _ce_requests()
    assert asked == [{"Start": "2026-03-03", "End": "2026-03-10"}]


def _ce_requests() -> list[dict[str, str]]:
    """The TimePeriod of each GetCostAndUsage call the (in-process) moto server answered."""
    from moto.ce.models import ce_backends

    bodies = ce_backends[DEFAULT_ACCOUNT_ID]["aws"].cost_usage_results
    return [json.loads(body)["TimePeriod"] for body in bodies]


def test_budget_status_is_for_the_clocks_month(db: Database, tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "budgets.yml").write_text(
        "budgets:\n  - name: main-account\n    dimension: account\n    value: '111111111111'\n"
        "    monthly_usd: 1000\n")
    with db.session() as s:  # $24 on 2026-03-09 (this month), $240 on 2026-02-27 (the last)
        add_interval(s, "i-1", NOW - timedelta(days=1, hours=12), 24, 1.0, team="research")
        add_interval(s, "i-2", NOW - timedelta(days=11), 24, 10.0, team="research")
    out = CliRunner().invoke(budget_app, [], terminal_width=200)  # its one command
    assert out.exit_code == 0, out.output
    assert "Budgets 2026-03" in out.output and "$24.00" in out.output


def test_anomaly_list_of_none_says_so_and_why(db: Database) -> None:
    out = CliRunner().invoke(anomaly_app, ["list", "--since", "7d"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert " ".join(out.output.split()).startswith(
        f"No spend anomalies since {NOW - timedelta(days=7):%Y-%m-%d %H:%M} UTC")
    assert "┏" not in out.output  # no empty table
