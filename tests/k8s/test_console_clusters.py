"""The console's Kubernetes page over the real Prometheus holding the scenario cluster: the
same figures as `costguard report --by namespace|team|workload --cluster` and
`costguard recommend --cluster`, a cluster that cannot be read named with why, and the page
in a real headless Chromium."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.model import Instance, InstanceState
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.console.harness import REPO, serve
from tests.console.test_browser import browser, shot  # noqa: F401 (the fixture)
from tests.k8s.history import History
from tests.k8s.scenario import NODE_A_INSTANCE

runner = CliRunner(env={"COLUMNS": "200"})
CLUSTER = {"name": "ml-prod", "namespace_teams": {"serving": "platform"},
           "owner_team": "platform"}


def _settings(tmp_path: Path, history: History, *clusters: dict[str, Any]) -> Settings:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    node = Instance(provider="aws", account="123456789012", region="us-east-1",
                    zone="us-east-1a", instance_id=NODE_A_INSTANCE,
                    instance_type="p4d.24xlarge", state=InstanceState.RUNNING, gpu_count=8,
                    launch_time=history.start, observed_at=history.start)
    with db.session() as s:
        record_inventory(s, "aws", [node], history.start, complete=True)
    db.dispose()
    return Settings(database_url=url, policy_paths=[REPO / "policies"],
                    kubernetes={"clusters": [{**CLUSTER, "prometheus_url": history.url},
                                             *clusters]},
                    recommend={"min_hours": 1})


def _cli(settings: Settings, tmp_path: Path, *args: str) -> Any:
    config = tmp_path / "costguard.yaml"
    config.write_text(json.dumps(settings.model_dump(mode="json", exclude_defaults=True)),
                      encoding="utf-8")
    result = runner.invoke(app, [*args, "--config", str(config), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _cells(html: str, table: str) -> dict[str, float]:
    """Each row's key and its spend (data-usd of its first figure), from the page."""
    import re

    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return {key: float(usd) for key, usd in re.findall(
        r'<tr data-key="([^"]*)">.*?data-usd="([^"]*)"', body)}


def test_the_page_shows_the_reports_figures(tmp_path: Path, history: History,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path, history)
    now = history.end
    monkeypatch.setattr(cli_common, "CLOCK", ManualClock(now))  # recommend's window too
    with serve(settings, ManualClock(now)) as base:
        page = httpx.get(f"{base}/console/clusters?window=1d", timeout=60)
    assert page.status_code == 200, page.text
    html = page.text
    assert 'href="/console/clusters?window=1d" class="here">Kubernetes</a>' in html
    since, until = (now - timedelta(days=1)).isoformat(), now.isoformat()
    for by, table in (("namespace", "namespaces-ml-prod"), ("team", "teams-ml-prod")):
        doc = _cli(settings, tmp_path, "report", "--by", by, "--cluster", "ml-prod",
                   "--since", since, "--until", until)
        assert _cells(html, table) == {r[by]: r["cost_usd"] for r in doc["rows"]}
    doc = _cli(settings, tmp_path, "report", "--by", "namespace", "--by", "workload",
               "--cluster", "ml-prod", "--since", since, "--until", until)
    assert _cells(html, "workloads-ml-prod") == {
        f"{r['namespace']}/{r['workload']}": r["cost_usd"] for r in doc["rows"]}
    assert f'id="spend-ml-prod" data-usd="{doc["total"]["cost_usd"]}"' in html
    pods = _cli(settings, tmp_path, "recommend", "--cluster", "ml-prod", "--window", "1d")
    assert _cells(html, "pods-ml-prod") == {
        f"{i['namespace']}/{i['pod']}": i["spend_usd"] for i in pods["items"]}
    assert "research/train-llm-x7k2p" in _cells(html, "pods-ml-prod")


def test_a_cluster_that_cannot_be_read_says_why_and_the_others_still_show(
        tmp_path: Path, history: History) -> None:
    gone = {"name": "gone", "prometheus_url": "http://127.0.0.1:9", "timeout": "2s"}
    settings = _settings(tmp_path, history, gone)
    with serve(settings, ManualClock(history.end)) as base:
        page = httpx.get(f"{base}/console/clusters?window=1d", timeout=60)
    assert page.status_code == 200
    assert 'id="error-gone">Could not read this cluster:' in page.text
    assert "gone" in page.text.split('id="error-gone">', 1)[1].split("</div>", 1)[0]
    assert 'id="namespaces-ml-prod"' in page.text


def test_without_clusters_the_page_says_how_to_add_one_and_the_nav_hides_it(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    Database(url).dispose()
    settings = Settings(database_url=url, policy_paths=[REPO / "policies"])
    with serve(settings, ManualClock(datetime(2026, 3, 10, tzinfo=UTC))) as base:
        page = httpx.get(f"{base}/console/clusters", timeout=30)
        home = httpx.get(f"{base}/console/", timeout=30)
    assert "No Kubernetes cluster is configured" in page.text
    assert "/console/clusters" not in home.text


def test_the_page_in_a_browser(tmp_path: Path, history: History,
                               browser: Any) -> None:  # noqa: F811 (the fixture)
    from selenium.webdriver.common.by import By

    settings = _settings(tmp_path, history)
    with serve(settings, ManualClock(history.end)) as base:
        browser.get(f"{base}/console/")
        browser.find_element(By.LINK_TEXT, "Kubernetes").click()
        assert browser.find_element(By.TAG_NAME, "h1").text == "GPUs in Kubernetes"
        rows = browser.find_elements(By.CSS_SELECTOR, "#namespaces-ml-prod tbody tr")
        names = [r.find_element(By.CSS_SELECTOR, "td").text for r in rows]
        assert {"research", "serving", "(idle capacity)", "total"} <= set(names)
        table = browser.find_element(By.ID, "pods-ml-prod")
        assert table.is_displayed() and "unused-gpus" in table.text
        shot(browser, "kubernetes")
