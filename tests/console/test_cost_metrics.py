"""Cost metrics for Prometheus (#21): scraped from a daemon over the demo's store and checked
against `costguard report --format json`, `explain` and `budget status`; the per-instance
cap folds the rest into per-team series without changing any sum; and the Grafana dashboard
in deploy/grafana asks only for metrics the daemon exports."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from costguard.accelerators import kind_of
from costguard.cli import app
from costguard.clock import ManualClock
from costguard.costs.rollup import day_floor
from costguard.daemon.cost_metrics import OTHER
from costguard.daemon.metrics import DaemonMetrics
from costguard.demo.run import demo_policy_paths, enforced
from costguard.policy.load import load_policy_set
from costguard.store.db import Database
from tests.console.harness import NOW, REPO, console_settings, serve

runner = CliRunner()
POLL = timedelta(minutes=10)  # the demo's cycle
Samples = dict[str, list[tuple[dict[str, str], float]]]


def cli_json(url: str, *args: str) -> Any:
    result = runner.invoke(app, ["--database", url, *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def refreshed(url: str, cap: int = 2000) -> DaemonMetrics:
    """The gauges as the leader leaves them after a cycle at NOW."""
    metrics = DaemonMetrics(max_instance_series=cap)
    settings = console_settings(url)
    policies = enforced(load_policy_set(demo_policy_paths(settings)))
    db = Database(url, create=False)
    try:
        with db.session() as s:
            metrics.refresh_from_store(s, NOW, settings.recommend, budgets=policies.budgets,
                                       poll_interval=POLL)
    finally:
        db.dispose()
    return metrics


def scrape(text: str) -> Samples:
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(v for labels, v in samples[name]
               if all(labels.get(k) == want for k, want in match.items()))


def test_scraped_cost_metrics_are_the_report_s_figures(
        store: str, cli_clock: ManualClock) -> None:
    metrics = refreshed(store)
    with serve(console_settings(store), metrics=metrics) as base:
        r = httpx.get(f"{base}/metrics")
    assert r.status_code == 200
    got = scrape(r.text)

    hour = cli_json(store, "report", "--by", "team", "--since", "1h")
    assert total(got, "costguard_instance_idle_cost_usd") == pytest.approx(
        hour["total"]["idle_cost_usd"], abs=0.01)
    assert hour["total"]["idle_cost_usd"] > 0
    assert total(got, "costguard_idle_usd_per_hour") == pytest.approx(
        hour["total"]["idle_cost_usd"], abs=0.01)
    for period, since in (("day", day_floor(NOW)), ("month", NOW.replace(day=1, hour=0))):
        cli = cli_json(store, "report", "--by", "team", "--since", since.isoformat())
        served = {labels["team"]: v for labels, v in got["costguard_team_spend_usd"]
                  if labels["period"] == period}
        assert served == pytest.approx({row["team"]: row["cost_usd"] for row in cli["rows"]},
                                       abs=0.01), period
    budgets = cli_json(store, "budget", "status", "--policies", str(REPO / "policies"))
    assert budgets
    for b in budgets:
        key = {"budget": b["budget"], "dimension": b["dimension"], "value": b["value"]}
        assert total(got, "costguard_budget_usd", **key) == b["budget_usd"]
        assert total(got, "costguard_budget_spent_usd", **key) == pytest.approx(
            b["spent_usd"], abs=0.01)
        assert total(got, "costguard_budget_forecast_usd", **key) == pytest.approx(
            b["forecast_usd"], abs=0.01)

    # each running instance at its price: explain's, with the labels OpenCost users expect
    hourly = got["costguard_instance_hourly_cost_usd"]
    assert len(hourly) > 20
    for labels, value in hourly[:3] + hourly[-3:]:
        explained = cli_json(store, "explain", labels["instance"])
        assert explained["instance"]["state"] == "running"
        assert value == pytest.approx(explained["usd_per_hour"])
        assert labels["instance_type"] == explained["instance"]["instance_type"]
        assert labels["team"] == explained["instance"]["tags"].get("team", labels["team"])
        assert set(labels) == {"provider", "account", "region", "instance", "instance_type",
                               "team", "lifecycle", "owner"}
    per_team = defaultdict(float)
    for labels, value in hourly:
        per_team[labels["team"]] += value
    assert {labels["team"]: v for labels, v in got["costguard_team_hourly_cost_usd"]} == \
        pytest.approx(dict(per_team))
    gpu = {labels["instance"]: v for labels, v in got["costguard_instance_gpu_hourly_cost_usd"]}
    assert gpu and all(v > 0 for v in gpu.values())
    # by accelerator kind: the same prices, summed by what each instance's type carries
    per_kind: dict[str, float] = defaultdict(float)
    count: dict[str, float] = defaultdict(float)
    for labels, value in hourly:
        accelerators = round(value / gpu[labels["instance"]]) if labels["instance"] in gpu else 0
        per_kind[kind_of(labels["instance_type"], accelerators)] += value
        count[kind_of(labels["instance_type"], accelerators)] += accelerators
    served_kind = {labels["accelerator"]: v
                   for labels, v in got["costguard_accelerator_hourly_cost_usd"]}
    assert served_kind == pytest.approx(dict(per_kind)) and served_kind["GPU"] > 0
    assert {labels["accelerator"]: v for labels, v in got["costguard_accelerators_running"]} \
        == pytest.approx(dict(count))
    managed = [labels for labels, _ in hourly if labels["owner"] != "unmanaged"]
    assert managed, "the demo's Auto Scaling group members carry their owner"


def test_the_series_cap_folds_the_rest_per_team_and_keeps_every_sum(store: str) -> None:
    whole = scrape(refreshed(store).render().decode())
    capped = scrape(refreshed(store, cap=5).render().decode())
    for name in ("costguard_instance_hourly_cost_usd", "costguard_instance_idle_cost_usd"):
        assert total(capped, name) == pytest.approx(total(whole, name))
        own = [labels for labels, _ in capped[name] if labels["instance"] != OTHER]
        assert len(own) == 5
        folded = {labels["team"] for labels, _ in capped[name] if labels["instance"] == OTHER}
        assert folded and len(capped[name]) == 5 + len(folded)
    # the five kept are the costliest
    top = sorted((v for _, v in whole["costguard_instance_hourly_cost_usd"]), reverse=True)[:5]
    kept = sorted((v for labels, v in capped["costguard_instance_hourly_cost_usd"]
                   if labels["instance"] != OTHER), reverse=True)
    assert kept == top
    assert total(capped, "costguard_cost_instances_folded") == \
        len(whole["costguard_instance_hourly_cost_usd"]) - 5
    assert capped["costguard_team_hourly_cost_usd"] == whole["costguard_team_hourly_cost_usd"]


def test_a_scrape_serves_the_snapshot_without_rendering_the_cost_series(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard.daemon import cost_metrics
    from costguard.daemon import metrics as daemon_metrics

    metrics = refreshed(store)
    snapshot = metrics.cost.text
    assert b"costguard_instance_hourly_cost_usd{" in snapshot
    rendered: list[object] = []
    real = daemon_metrics.generate_latest

    def counting(registry: object) -> bytes:
        rendered.append(registry)
        return real(registry)  # type: ignore[arg-type]

    monkeypatch.setattr(daemon_metrics, "generate_latest", counting)
    monkeypatch.setattr(cost_metrics, "generate_latest", counting)
    scraped = metrics.render()
    # only the few operational series are rendered per scrape; the cost series are the
    # bytes the last refresh left
    assert rendered == [metrics.registry]
    assert scraped.endswith(snapshot)


def test_only_the_snapshot_is_kept_between_cycles_and_a_failed_refresh_keeps_the_last(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-instance series are thousands of gauge children: rendered into the snapshot,
    then let go. A refresh that fails halfway leaves the last snapshot and no series behind,
    so the next one does not serve a stale instance."""
    from costguard.daemon import cost_metrics
    from costguard.report.queries import spend

    metrics = refreshed(store)
    snapshot = metrics.cost.text
    assert snapshot.count(b"costguard_instance_hourly_cost_usd{") > 10
    assert all(not family.samples for gauge in metrics.cost._labelled
               for family in gauge.collect())

    def broken(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(cost_metrics, "paid_not_running", broken)  # after the instances
    db = Database(store, create=False)
    try:
        with db.session() as s, pytest.raises(RuntimeError):
            hour = spend(s, ["instance"], NOW - timedelta(hours=1), NOW)
            metrics.cost.refresh(s, NOW, hour, poll_interval=POLL)
    finally:
        db.dispose()
    assert metrics.cost.text == snapshot
    assert all(not family.samples for gauge in metrics.cost._labelled
               for family in gauge.collect())


PROMQL_WORDS = {"sum", "by", "avg", "topk", "clamp_min", "time", "on", "group_left",
                "without", "max", "min", "count", "rate", "increase", "label_values"}


def dashboard_metrics(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords or
    label names (inside {} or by/on (...))."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # a range: [1h]
    expr = re.sub(r"\b(by|on|without|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r'"[^"]*"', "", expr)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names if n not in PROMQL_WORDS and not re.fullmatch(r"e\d*", n)}


def test_the_grafana_dashboard_asks_only_for_exported_metrics(store: str) -> None:
    path = REPO / "deploy" / "grafana" / "costguard-cost.json"
    board = json.loads(path.read_text())
    exported = {family.name for family in refreshed(store).registry.collect()}
    exported |= set(scrape(refreshed(store).render().decode()))
    # a counter's samples are NAME_total, whether or not one was counted yet
    exported |= {f"{family.name}_total" for family in refreshed(store).registry.collect()
                 if family.type == "counter"}
    asked: set[str] = set()
    for panel in board["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = dashboard_metrics(target["expr"])
            assert names, (panel["title"], target["expr"])
            asked |= names
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), *\w+\)", var["definition"])
            assert found, var["definition"]
            asked.add(found.group(1))
    assert asked <= exported, sorted(asked - exported)
    for needed in ("costguard_team_spend_usd", "costguard_instance_idle_cost_usd",
                   "costguard_budget_spent_usd", "costguard_instance_hourly_cost_usd"):
        assert needed in asked
    # the check itself can fail: a name the daemon does not export is caught
    assert "costguard_gpu_dollars" in dashboard_metrics("sum(costguard_gpu_dollars{a=\"b\"})")
    assert dashboard_metrics("sum(increase(costguard_x_total[1h]))") == {"costguard_x_total"}


def test_what_bills_while_nothing_runs_is_the_report_s_section(store: str) -> None:
    """The demo's unused volume, snapshot and address, and its notebook idle over the last
    day, by team and kind: the figures of `report --format json` (paid_not_running) at the
    same moment, summed the same way."""
    got = scrape(refreshed(store).render().decode())
    report = cli_json(store, "report", "--by", "team", "--since",
                      (NOW - timedelta(days=7)).isoformat(), "--until", NOW.isoformat())
    want = {(line["team"], line["kind"]): line for line in report["paid_not_running"]}
    assert want and ("vision", "volume") in want and ("research", "notebook") in want
    monthly = {(labels["team"], labels["kind"]): v
               for labels, v in got["costguard_paid_not_running_usd_per_month"]}
    # (the JSON gives cents)
    assert monthly == pytest.approx({k: v["usd_per_month"] for k, v in want.items()},
                                    abs=0.005)
    assert {(labels["team"], labels["kind"]): v
            for labels, v in got["costguard_paid_not_running_resources"]} == {
        k: v["count"] for k, v in want.items()}
