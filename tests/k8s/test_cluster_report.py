"""`costguard report --by namespace|workload|pod` against the real Prometheus holding the
scenario cluster, priced from the store's inventory and the shipped tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.costs.pricing import table_price
from costguard.model import Instance, InstanceState
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.k8s.history import History
from tests.k8s.scenario import NODE_A_INSTANCE

wide = CliRunner(env={"COLUMNS": "200"})


def _config(tmp_path: Path, url: str, *, db: bool = True, extra: str = "") -> Path:
    store = tmp_path / "cg.db"
    if db:
        database = Database(f"sqlite:///{store}")
        now = datetime.now(UTC)
        node = Instance(provider="aws", account="123456789012", region="us-east-1",
                        zone="us-east-1a", instance_id=NODE_A_INSTANCE,
                        instance_type="p4d.24xlarge", state=InstanceState.RUNNING,
                        gpu_count=8, launch_time=now, observed_at=now)
        with database.session() as s:
            record_inventory(s, "aws", [node], now, complete=True)
        database.dispose()
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text(f"""\
database_url: sqlite:///{store}
kubernetes:
  clusters:
    - name: ml-prod
      prometheus_url: {url}
      namespace_teams: {{serving: platform}}
      owner_team: platform
{extra}""", encoding="utf-8")
    return cfg


def _report(cfg: Path, history: History, *args: str, runner: CliRunner = wide) -> str:
    result = runner.invoke(app, ["report", "--config", str(cfg),
                                 "--since", history.start.isoformat(),
                                 "--until", history.end.isoformat(), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _p4d() -> float:
    now = datetime.now(UTC)
    quote = table_price(Instance(provider="aws", account="", region="us-east-1",
                                 instance_id="i-x", instance_type="p4d.24xlarge",
                                 state=InstanceState.RUNNING, launch_time=now,
                                 observed_at=now))
    assert quote is not None
    return quote.usd_per_hour


def test_report_by_namespace_as_json_adds_up_to_the_nodes_prices(
        tmp_path: Path, history: History) -> None:
    doc = json.loads(_report(_config(tmp_path, history.url), history, "--by", "namespace",
                             "--format", "json"))
    assert doc["kind"] == "kubernetes" and doc["clusters"] == ["ml-prod"]
    rows = {r["namespace"]: r for r in doc["rows"]}
    assert set(rows) == {"research", "serving", "etl", "(idle capacity)", "kube-system"}
    # node-a from the inventory, node-b from its instance-type label: both p4d, 3 hours
    assert doc["total"]["cost_usd"] == pytest.approx(2 * 3 * _p4d(), abs=0.02)
    assert rows["(idle capacity)"]["idle_percent"] == 100
    assert rows["serving"]["idle_usd"] > 0 and rows["research"]["idle_usd"] > 0
    assert doc["unpriced_nodes"] == [{"cluster": "ml-prod", "node": "worker-c", "why": (
        "provider id kind://docker/ml/worker-c names no EC2 or GCE instance"),
        "gpu_hours": 3.0}]


def test_report_by_workload_in_a_terminal(tmp_path: Path, history: History) -> None:
    cfg = _config(tmp_path, history.url)
    out = _report(cfg, history, "--by", "namespace", "--by", "workload")
    flat = " ".join(out.split())  # a narrow terminal folds the notes and the names
    assert "Kubernetes GPU spend by namespace, workload" in flat
    assert "Unpriced: node worker-c of ml-prod (3 GPU-h)" in flat
    assert "in 11 queries" in flat
    doc = json.loads(_report(cfg, history, "--by", "workload", "--format", "json"))
    assert {r["workload"] for r in doc["rows"]} == {
        "Deployment/chat-infer", "CronJob/nightly-train", "StatefulSet/notebook-alice",
        "StatefulSet/embed", "Pod/sweep-0", "Pod/debug", "DaemonSet/aws-node",
        "Deployment/prep", "-"}


def test_report_fits_80_columns(tmp_path: Path, history: History) -> None:
    narrow = CliRunner(env={"COLUMNS": "80"})
    out = _report(_config(tmp_path, history.url), history, "--by", "pod", runner=narrow)
    table = out.split("Unpriced")[0]
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "notebook-alice-0" in out and "$" in out


def test_report_by_team_with_a_filter_and_csv(tmp_path: Path, history: History) -> None:
    out = _report(_config(tmp_path, history.url), history, "--cluster", "ml-prod", "--by",
                  "team", "--filter", "namespace=research", "--format", "csv")
    lines = out.strip().splitlines()
    assert lines[0] == "team,spend_usd,idle_usd,idle_percent,gpu_hours,idle_gpu_hours,no_data_usd"
    teams = {line.split(",")[0] for line in lines[1:]}
    assert teams == {"nlp", "alice-lab", "research"}  # the pod's label, else the namespace's


def test_without_a_store_nodes_are_priced_by_their_labels_only(
        tmp_path: Path, history: History) -> None:
    doc = json.loads(_report(_config(tmp_path, history.url, db=False), history, "--by",
                             "node", "--format", "json"))
    unpriced = {u["node"] for u in doc["unpriced_nodes"]}
    assert unpriced == {"ip-10-0-1-10.ec2.internal", "worker-c"}
    assert doc["total"]["cost_usd"] == pytest.approx(3 * _p4d(), abs=0.02)


@pytest.mark.parametrize(("args", "message"), [
    (["--cluster", "nope"], "no Kubernetes cluster named 'nope' (configured: ml-prod)"),
    (["--by", "pod", "--format", "html"], "--format html is not available for Kubernetes"),
    (["--by", "instance-type", "--cluster", "ml-prod"], "unknown Kubernetes dimension"),
    (["--by", "pod", "--compare", "billed"], "a Kubernetes report has no bill lines"),
])
def test_report_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    cfg = _config(tmp_path, "http://127.0.0.1:9", db=False)
    result = wide.invoke(app, ["report", "--config", str(cfg), *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_an_unreachable_prometheus_is_a_clear_error(tmp_path: Path) -> None:
    from tests.fakes.loopback import free_port

    cfg = _config(tmp_path, f"http://127.0.0.1:{free_port()}", db=False)
    result = wide.invoke(app, ["report", "--config", str(cfg), "--by", "namespace"])
    assert result.exit_code == 2
    assert "kubernetes cluster ml-prod: cannot reach Prometheus at http://127.0.0.1:" in (
        result.output)
    assert "Traceback" not in result.output


def test_no_cluster_configured(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text(f"database_url: sqlite:///{tmp_path / 'x.db'}\n", encoding="utf-8")
    result = wide.invoke(app, ["report", "--config", str(cfg), "--by", "namespace"])
    assert result.exit_code == 2
    assert "no Kubernetes cluster is configured" in result.output


def test_costguard_iam_prints_the_cluster_role_the_policies_need(tmp_path: Path) -> None:
    import yaml

    from costguard.k8s import rbac

    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "w.yml").write_text("""\
policies:
  - name: idle-workloads
    resource: workload
    mode: enforce
    condition: {idle: {below: 5, for: 1h}}
    actions: [{stop: {grace: 15m}}]
""")
    cfg = _config(tmp_path, "http://127.0.0.1:9", db=False,
                  extra=f"      delete_bare_pods: true\n      api: {{in_cluster: true}}\n"
                        f"policy_paths: [{policies}]\n")
    out = wide.invoke(app, ["iam", "--config", str(cfg), "--provider", "k8s"])
    assert out.exit_code == 0, out.output
    role = yaml.safe_load(out.output)
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == rbac.rules(acting=True, deleting_pods=True)
    assert {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"],
            "verbs": ["patch"]} in role["rules"]
    read_only = wide.invoke(app, ["iam", "--config", str(cfg), "--provider", "k8s",
                                  "--read-only"])
    assert all(r["verbs"] == ["get", "list"] for r in yaml.safe_load(read_only.output)["rules"])
