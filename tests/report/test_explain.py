"""`costguard explain INSTANCE`: why costguard did, or did not, act on one instance (#20 item 6).

The store is written by real engine cycles over the scripted cloud; the command reads it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock
from costguard.demo.sim import SimProvider
from costguard.demo.sim_settings import SimSettings
from costguard.model import Owner, OwnerKind
from costguard.policy.evaluate import matches
from costguard.policy.explain import filter_checks
from costguard.policy.load import load_policy_set, parse_policy_text
from tests.fakes.cloud import BUSY, DARK, IDLE, T0, full_cloud
from tests.fakes.scenario import make_engine, run_for

REPO = Path(__file__).resolve().parents[2]
POLICIES = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true, state: running, tags: {absent: [trial]}}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
  - name: trial
    filters: {gpu: true, state: running, tags: {present: [trial]}}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - stop: {grace: 15m}
"""
RAN = timedelta(minutes=90)
runner = CliRunner()


@dataclass
class Store:
    path: Path
    clock: ManualClock


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "idle.yml").write_text(POLICIES)
    monkeypatch.delenv("COSTGUARD_CONFIG", raising=False)
    monkeypatch.delenv("COSTGUARD_POLICY_PATHS", raising=False)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", url)
    cloud = full_cloud(ManualClock(T0))
    team = {"team": "research", "owner": "ana@example.com"}
    cloud.add("i-idle")
    cloud.add("i-busy", BUSY)
    cloud.add("i-dark", DARK)
    cloud.add("i-kept", IDLE, tags={**team, "costguard:protect": "true"})
    cloud.add("i-trial", IDLE, tags={**team, "trial": "yes"})
    cloud.add("i-node", IDLE, owner=Owner(kind=OwnerKind.GKE, name="gpu-pool", via="label"))
    engine = make_engine(url, POLICIES, cloud)
    run_for(engine, cloud.clock, RAN)
    engine.db.dispose()
    clock = ManualClock(T0 + RAN + timedelta(hours=3))  # the daemon stopped a while ago
    monkeypatch.setattr(cli_common, "CLOCK", clock)
    yield Store(tmp_path / "cg.db", clock)


def explain(*args: str) -> str:
    result = runner.invoke(app, ["explain", *args], terminal_width=300)
    assert result.exit_code == 0, result.output
    return result.output


def policy(doc: dict[str, object], name: str) -> dict[str, object]:
    found = [p for p in doc["policies"] if p["policy"] == name]  # type: ignore[attr-defined]
    assert len(found) == 1
    return found[0]  # type: ignore[no-any-return]


def test_a_stopped_instance_shows_its_stop_in_the_journal(store: Store) -> None:
    doc = json.loads(explain("i-idle", "--format", "json"))
    assert doc["as_of_what"] == "the last cycle"
    assert doc["instance"]["state"] == "stopped"
    idle = policy(doc, "idle")
    assert idle["state"]["state"] == "acted"
    assert next((j["policy"], j["action"], j["status"]) for j in doc["journal"]) == (
        "idle", "stop", "done")
    assert "filters.state" in idle["outcome"]  # stopped: no longer selected


def test_a_protected_idle_instance_says_it_is_idle_and_protected(store: Store) -> None:
    text = explain("i-kept")
    assert "protected by costguard:protect: never acted on" in text
    assert ("idle (enforce): its condition holds, but costguard:protect on the instance "
            "keeps every action off") in text
    assert "condition holds: idle: no process on the GPU" in text


def test_busy_and_dark_instances_say_why_their_condition_does_not_hold(store: Store) -> None:
    busy = policy(json.loads(explain("i-busy", "--format", "json")), "idle")
    assert busy["selected"] and not busy["condition_holds"]
    assert busy["reasons"][0].startswith("not idle (active): pid")
    dark = json.loads(explain("i-dark", "--format", "json"))
    assert dark["telemetry"]["gpu_minutes"] == 0
    assert "no data is never idle" in dark["telemetry"]["summary"]
    assert policy(dark, "idle")["reasons"][0].startswith("not idle (no-data)")


def test_a_dry_run_policy_says_what_it_would_do(store: Store) -> None:
    doc = json.loads(explain("i-trial", "--format", "json"))
    trial, idle = policy(doc, "trial"), policy(doc, "idle")
    assert trial["outcome"].startswith("its condition holds: it would stop (dry-run")
    assert not idle["selected"]
    assert {"filter": "filters.tags.absent", "passed": False,
            "detail": "wants no tag trial; it has trial=yes"} in idle["filters"]
    assert doc["instance"]["state"] == "running"


def test_a_node_pool_member_is_left_to_its_owner(store: Store) -> None:
    doc = json.loads(explain("i-node", "--format", "json"))
    assert doc["instance"]["owner"] == "gke gpu-pool"
    assert "stop refused: managed by gke gpu-pool" in policy(doc, "idle")["outcome"]
    assert doc["instance"]["state"] == "running"


def test_explain_as_of_an_earlier_time(store: Store) -> None:
    # warned at T0 (idle since a day), stopped at T0+15m: ten minutes in, only the warning
    doc = json.loads(explain("i-idle", "--at", (T0 + timedelta(minutes=10)).isoformat(),
                             "--format", "json"))
    assert doc["as_of_what"] == "the time asked for"
    assert {(j["action"], j["status"]) for j in doc["journal"]} == {("notify", "done")}
    assert policy(doc, "idle")["condition_holds"]
    assert doc["instance"]["state"] == "stopped"  # the instance as the store knows it now


def test_an_unknown_instance_is_a_clear_error(store: Store) -> None:
    result = runner.invoke(app, ["explain", "i-nope"])
    assert result.exit_code == 2
    assert "no instance 'i-nope' in the store" in result.output
    assert "Traceback" not in result.output


def test_explain_never_creates_a_database(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COSTGUARD_DATABASE_URL", raising=False)
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", json.dumps([str(REPO / "policies")]))
    result = runner.invoke(app, ["explain", "i-1"])
    assert result.exit_code == 2 and "no costguard database" in result.output
    assert list(tmp_path.iterdir()) == []


FILTERS = """\
policies:
  - name: everything
    providers: [sim, aws]
    filters:
      gpu: true
      state: [running, stopped]
      instance_type: ["p4d.*", "g5.*", "g6.*"]
      family: [p4d, g5, g6, p5]
      lifecycle: on-demand
      accounts: ["111111111111"]
      regions: [us-east-1, us-west-2]
      tags: {present: [team], absent: ["costguard:protect"], values: {env: [dev, prod]}}
      managed: false
      age: {older_than: 2h, younger_than: 9d}
    condition: {missing_tags: [project]}
    actions: [{notify: {to: owner}}]
  - name: owned
    filters: {managed: true, owner_kind: [asg, gke]}
    condition: {missing_tags: [project]}
    actions: [{notify: {to: owner}}]
"""


def test_every_filter_check_agrees_with_the_daemon_s_match() -> None:
    clock = ManualClock(T0)
    sim = SimProvider(SimSettings(instances=300, seed=11, managed_groups=True), clock)
    instances = sim.list_instances().instances
    policies = [*parse_policy_text(FILTERS).policies,
                *load_policy_set([REPO / "policies"]).policies]
    rng = random.Random(3)
    selected = 0
    for inst in instances:
        now = T0 + timedelta(hours=rng.uniform(0, 24 * 12))
        for p in policies:
            checks = filter_checks(p, inst, now)
            assert all(c.passed for c in checks) == matches(p, inst, now), (p.name, inst)
            selected += all(c.passed for c in checks)
    assert 0 < selected < len(instances) * len(policies)
