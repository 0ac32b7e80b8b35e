"""`costguard demo --cloud aws|gcp`: the demo's cycles through the real providers and fakes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo import run as demo
from costguard.demo.clouds import cloud_providers
from costguard.errors import ConfigError
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, CostIntervalRow

HOURS = 2
POLICIES = [Path(__file__).resolve().parent.parent / "policies"]


@pytest.fixture(autouse=True)
def no_ambient_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ROLE_ARN"):
        monkeypatch.delenv(var, raising=False)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def demo_clock() -> ManualClock:
    """The clock the demo advances, shared with the providers."""
    end = datetime.now(UTC).replace(second=0, microsecond=0)
    return ManualClock(end - timedelta(hours=HOURS))


@pytest.mark.slow
@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_cloud_demo_stops_idle_gpus_in_the_fake_cloud_and_accrues_spend(
    cloud: str, demo_clock: ManualClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    settings = Settings(database_url=url, policy_paths=POLICIES)
    console = Console(record=True, width=140)
    with cloud_providers(cloud, demo_clock, hours=HOURS) as providers:
        (provider,) = providers.values()
        provider.govern(frozenset({"instance", "notebook"}))  # as the demo's engine will
        running_before = {i.instance_id for i in provider.list_instances().instances
                          if i.has_gpu and i.state == "running"}
        result = demo.run_demo(settings, console, hours=HOURS, providers=providers,
                               policy_paths=POLICIES, clock=demo_clock)
        after = {i.instance_id: i for i in provider.list_instances().instances}

    assert result.cycles == HOURS * 6 + 1
    assert result.alerts["idle-warning"] > 0
    db = Database(url)
    with db.session() as s:
        stops = s.exec(select(ActionJournalRow).where(
            ActionJournalRow.provider == cloud, ActionJournalRow.action == "stop",
            ActionJournalRow.status == "done")).all()
        spend = s.exec(select(CostIntervalRow).where(CostIntervalRow.provider == cloud)).all()
    db.dispose()
    assert stops, "no idle GPU instance was stopped"
    # the fake cloud itself says so: each journalled stop left a stopped instance behind
    for row in stops:
        assert row.instance_id in running_before
        assert after[row.instance_id].state == "stopped"
    assert sum(r.cost_micros for r in spend) > 0
    assert "cycles in" in console.export_text()
    if cloud == "gcp":  # its Cloud TPU nodes: the single host stopped, the slice left whole
        by_name = {i.name: i for i in after.values()}
        assert by_name["tpu-v5e-dev"].state == "stopped"
        assert by_name["tpu-v5e-dev"].instance_id in {r.instance_id for r in stops}
        assert by_name["tpu-v5e-slice"].state == "running"
    if cloud == "aws":  # the SageMaker notebook left open: stopped through SageMaker
        (notebook,) = [i for i in after.values() if i.name == "research-notebook"]
        assert notebook.state == "stopped"
        assert notebook.instance_id in {r.instance_id for r in stops}


def test_unknown_demo_cloud_is_a_clear_error() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ConfigError, match="use one of sim, aws, gcp"), cloud_providers(
        "azure", clock
    ):
        pass
