"""Through the engine: a `resource: workload` policy over the scenario cluster (a real
Prometheus holding its metrics, its objects in a local API server reached by the official
client). Idle workloads are warned, then stopped through their owners after the grace; a
training job, an underused StatefulSet and a pod without data are left alone; a bare pod
is not deleted unless the cluster allows it; nothing in kube-system, no DaemonSet."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.k8s.provider import KubernetesProvider
from costguard.k8s.settings import KubernetesSettings
from costguard.k8s.workloads import KUBEFLOW_STOPPED, REPLICAS_BEFORE
from costguard.model import InstanceState
from costguard.policy.load import load_policy_set
from costguard.store.db import Database
from costguard.store.inventory import current_instances
from costguard.store.tables import ActionJournalRow, AlertRow
from tests.fakes.kube_api import KubeApi, kubeconfig
from tests.fakes.loopback import serve
from tests.k8s.history import History
from tests.k8s.scenario import api_objects

POLICY = """\
policies:
  - name: idle-gpu-workloads
    resource: workload
    mode: enforce
    filters: {state: running, min_gpus: 1}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: [owner, team]}
      - stop: {grace: 15m}
"""


@pytest.fixture
def world(history: History, tmp_path: Path, request: pytest.FixtureRequest
          ) -> Iterator[tuple[Engine, KubeApi, Database, ManualClock]]:
    policy = POLICY.replace("mode: enforce", "mode: dry-run") if request.node.get_closest_marker(
        "dry_run") else POLICY
    with _world(history, tmp_path, policy) as made:
        yield made


@contextmanager
def _world(history: History, tmp_path: Path, policy: str
           ) -> Iterator[tuple[Engine, KubeApi, Database, ManualClock]]:
    api = api_objects(KubeApi())
    with serve(api.app()) as url:
        (tmp_path / "kubeconfig").write_text(kubeconfig(url))
        (tmp_path / "p.yml").write_text(policy)
        kube = KubernetesSettings.model_validate({"clusters": [{
            "name": "ml-prod", "prometheus_url": history.url,
            "namespace_teams": {"serving": "platform"},
            "api": {"kubeconfig": str(tmp_path / "kubeconfig")}}]})
        db_url = f"sqlite:///{tmp_path / 'cg.db'}"
        settings = Settings(database_url=db_url, policy_paths=[tmp_path / "p.yml"],
                            alerts=AlertsSettings(console=False), kubernetes=kube)
        clock = ManualClock(history.end - timedelta(minutes=60))
        db = Database(db_url)
        provider = KubernetesProvider(kube, clock)
        engine = Engine(settings, db, {"k8s": provider},
                        load_policy_set([tmp_path / "p.yml"]), clock)
        yield engine, api, db, clock
        db.dispose()


def _count_reads(provider: KubernetesProvider) -> list[tuple[datetime, datetime]]:
    """The spans the provider reads from Prometheus from now on, in order."""
    spans: list[tuple[datetime, datetime]] = []
    real = provider._read

    def counted(cl, start, end):  # type: ignore[no-untyped-def]
        spans.append((start, end))
        return real(cl, start, end)

    provider._read = counted  # type: ignore[method-assign]
    return spans


def _warned_then_due(engine: Engine, clock: ManualClock) -> None:
    """A cycle that warns, and one past the policy's 15-minute grace."""
    engine.run_cycle()
    clock.advance(timedelta(minutes=20))
    engine.run_cycle()


def _journal(db: Database) -> list[ActionJournalRow]:
    with db.session() as s:
        return list(s.exec(select(ActionJournalRow).order_by(ActionJournalRow.id)))


def test_idle_workloads_are_warned_then_stopped_through_their_owners(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    engine, api, db, clock = world
    engine.run_cycle()
    with db.session() as s:
        listed = {i.name: i for i in current_instances(s)}
        warned = {a.instance_id for a in s.exec(select(AlertRow)) if a.kind == "idle-warning"}
    assert set(listed) == {"serving/Deployment/chat-infer", "research/Notebook/notebook-alice",
                           "serving/StatefulSet/embed", "research/CronJob/nightly-train",
                           "research/Pod/sweep-0", "research/Pod/debug", "etl/Deployment/prep"}
    assert listed["serving/StatefulSet/embed"].gpu_count == 2
    assert listed["research/Notebook/notebook-alice"].tags["team"] == "alice-lab"
    assert warned == {"ml-prod/serving/Deployment/chat-infer",
                      "ml-prod/research/Notebook/notebook-alice", "ml-prod/research/Pod/sweep-0"}
    with db.session() as s:  # the warning says how to snooze a workload: its annotation
        body = next(a.body for a in s.exec(select(AlertRow))
                    if a.instance_id.endswith("chat-infer"))
    assert "or set annotation costguard.io/snooze-until=<ISO time>" in body
    assert api.get("deployments", "serving", "chat-infer")["spec"]["replicas"] == 1

    clock.advance(timedelta(minutes=20))
    engine.run_cycle()
    chat = api.get("deployments", "serving", "chat-infer")
    assert chat["spec"]["replicas"] == 0
    assert chat["metadata"]["annotations"][REPLICAS_BEFORE] == "1"
    notebook = api.get("notebooks", "research", "notebook-alice")
    assert KUBEFLOW_STOPPED in notebook["metadata"]["annotations"]
    assert ("pods", "research", "sweep-0") in api.objects  # a bare pod is not deleted
    stops = {r.instance_id: r for r in _journal(db) if r.action == "stop"}
    assert stops["ml-prod/serving/Deployment/chat-infer"].status == "done"
    assert "from 1 to 0 replicas" in stops["ml-prod/serving/Deployment/chat-infer"].detail
    assert stops["ml-prod/research/Pod/sweep-0"].status == "skipped"
    assert "delete_bare_pods" in stops["ml-prod/research/Pod/sweep-0"].detail
    assert set(stops) == {"ml-prod/serving/Deployment/chat-infer",
                          "ml-prod/research/Notebook/notebook-alice",
                          "ml-prod/research/Pod/sweep-0"}
    patched = [(path, body) for method, path, _, body in api.requests if method == "PATCH"]
    assert all("kube-system" not in path and "daemonsets" not in path for path, _ in patched)


def test_a_stopped_deployment_starts_with_the_replicas_it_had(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    engine, api, db, clock = world
    api.objects[("deployments", "serving", "chat-infer")]["spec"]["replicas"] = 3
    _warned_then_due(engine, clock)
    assert api.get("deployments", "serving", "chat-infer")["spec"]["replicas"] == 0
    provider = engine.providers["k8s"]
    with db.session() as s:
        chat = next(i for i in current_instances(s) if i.name.endswith("chat-infer"))
    stopped = provider.stop(chat, dry_run=False)  # again: the kept count is not overwritten
    assert stopped.outcome == "skipped" and "0 replicas already" in stopped.detail
    assert api.get("deployments", "serving", "chat-infer")["metadata"]["annotations"][
        REPLICAS_BEFORE] == "3"
    result = provider.start(chat, dry_run=False)
    assert result.outcome == "done" and result.state_after is InstanceState.RUNNING
    chat_now = api.get("deployments", "serving", "chat-infer")
    assert chat_now["spec"]["replicas"] == 3
    assert REPLICAS_BEFORE not in chat_now["metadata"]["annotations"]


def test_metrics_carry_each_workload_s_share_of_its_nodes(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from costguard.daemon.metrics import DaemonMetrics

    engine, _, db, clock = world
    engine.run_cycle()
    provider = engine.providers["k8s"]
    assert isinstance(provider, KubernetesProvider)
    metrics = DaemonMetrics()
    with db.session() as s:
        metrics.refresh_from_store(s, clock.now(), workloads=provider.figures())
    samples = {(f.name, tuple(sorted(x.labels.items()))): x.value
               for f in text_string_to_metric_families(metrics.cost.text.decode())
               for x in f.samples}
    hourly = {dict(k)["workload"]: v for (name, k), v in samples.items()
              if name == "costguard_workload_hourly_cost_usd"}
    assert set(hourly) == {"chat-infer", "notebook-alice", "embed", "nightly-train",
                           "sweep-0", "debug", "prep"}
    assert hourly["debug"] == 0  # its node has no price: nothing guessed
    assert hourly["nightly-train"] > hourly["chat-infer"] > 0  # 4 GPUs and 48 cores vs 1
    namespaces = {dict(k)["namespace"]: v for (name, k), v in samples.items()
                  if name == "costguard_namespace_hourly_cost_usd"}
    assert namespaces["serving"] == pytest.approx(hourly["chat-infer"] + hourly["embed"])
    gpus = {dict(k)["workload"]: v for (name, k), v in samples.items()
            if name == "costguard_workload_gpus"}
    assert gpus["embed"] == 2 and gpus["nightly-train"] == 4


def test_a_cycle_s_metrics_are_answered_from_its_listing_when_it_covers_them(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    engine, _, _, clock = world
    provider = engine.providers["k8s"]
    assert isinstance(provider, KubernetesProvider)
    reads = _count_reads(provider)
    listed = provider.list_instances().instances
    assert len(reads) == 1
    now = clock.now().replace(second=0, microsecond=0)
    recent = provider.gpu_metrics(listed, now - timedelta(minutes=5), now)
    assert len(reads) == 1  # the listing's ten minutes held them
    assert recent and all(now - timedelta(minutes=5) <= m.minute < now for m in recent)
    chat = [m for m in recent if m.instance_id.endswith("chat-infer")]
    assert len(chat) == 5  # one GPU, five minutes
    older = provider.gpu_metrics(listed, now - timedelta(minutes=30), now)
    assert len(reads) == 2  # past the listing's span: read again
    assert len([m for m in older if m.instance_id.endswith("chat-infer")]) == 30


@pytest.mark.dry_run
def test_in_dry_run_nothing_is_patched_and_every_record_says_would(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    engine, api, db, clock = world
    _warned_then_due(engine, clock)
    assert not [r for r in api.requests if r[0] in ("PATCH", "DELETE")]
    stops = {r.instance_id: r for r in _journal(db) if r.action == "stop"}
    chat = stops["ml-prod/serving/Deployment/chat-infer"]
    assert chat.dry_run and chat.status == "dry-run"
    assert chat.detail.startswith("would have scaled Deployment serving/chat-infer from 1 to 0")
    with db.session() as s:
        texts = [a.subject + a.body for a in s.exec(select(AlertRow))]
    assert texts == []  # a dry-run policy warns nobody
    for row in _journal(db):
        assert row.dry_run and row.status in ("dry-run", "skipped")
        assert " will " not in row.detail  # what would have happened, never what will
    notify = next(r for r in _journal(db) if r.action == "notify"
                  and r.instance_id.endswith("chat-infer"))
    assert "would be stopped at" in notify.detail and "dry-run)" in notify.detail


def test_workloads_stopped_after_hours_start_again_when_office_hours_begin(
        history: History, tmp_path: Path) -> None:
    """The office-hours schedule restores what the stop kept: each workload's replicas."""
    today = (history.end - timedelta(minutes=60)).date()
    tomorrow = (today + timedelta(days=1)).strftime("%a").lower()
    policy = f"""\
policies:
  - name: serving-after-hours
    resource: workload
    mode: enforce
    filters: {{state: running, min_gpus: 1, namespaces: [serving]}}
    condition:
      outside_hours: {{days: [{tomorrow}], hours: "00:00-23:59"}}
    actions:
      - notify: {{to: [owner]}}
      - stop: {{grace: 15m}}
      - start: {{at_office_hours: true}}
"""
    with _world(history, tmp_path, policy) as (engine, api, db, clock):
        api.objects[("deployments", "serving", "chat-infer")]["spec"]["replicas"] = 3
        engine.run_cycle()
        clock.advance(timedelta(minutes=20))
        engine.run_cycle()
        assert api.get("deployments", "serving", "chat-infer")["spec"]["replicas"] == 0
        assert api.get("statefulsets", "serving", "embed")["spec"]["replicas"] == 0
        engine.run_cycle()  # still outside office hours: nothing starts
        assert api.get("deployments", "serving", "chat-infer")["spec"]["replicas"] == 0

        clock.set(datetime.combine(today + timedelta(days=1), time(0, 30), tzinfo=UTC))
        # no pod runs now; stopped, they still say what they will hold when started
        held = {i.name: (i.state, i.gpu_count)
                for i in engine.providers["k8s"].list_instances().instances}
        assert held == {"serving/Deployment/chat-infer": (InstanceState.STOPPED, 3),
                        "serving/StatefulSet/embed": (InstanceState.STOPPED, 2)}
        engine.run_cycle()
        chat = api.get("deployments", "serving", "chat-infer")
        assert chat["spec"]["replicas"] == 3
        assert REPLICAS_BEFORE not in chat["metadata"]["annotations"]
        assert api.get("statefulsets", "serving", "embed")["spec"]["replicas"] == 2
        starts = {r.instance_id: r for r in _journal(db) if r.action == "start"}
        assert set(starts) == {"ml-prod/serving/Deployment/chat-infer",
                               "ml-prod/serving/StatefulSet/embed"}
        assert all(r.status == "done" for r in starts.values())


def test_a_workload_is_snoozed_by_its_annotation_or_from_slack(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    from costguard.alerts.interactive import SlackAction, journal_actions

    engine, api, db, clock = world
    later = (clock.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.objects[("notebooks", "research", "notebook-alice")]["metadata"].setdefault(
        "annotations", {})["costguard.io/snooze-until"] = later
    engine.run_cycle()
    with db.session() as s:
        warned = {a.instance_id for a in s.exec(select(AlertRow)) if a.kind == "idle-warning"}
    assert "ml-prod/research/Notebook/notebook-alice" not in warned  # snoozed on the object
    assert "ml-prod/serving/Deployment/chat-infer" in warned
    click = SlackAction(action="snooze", policy="idle-gpu-workloads", provider="k8s",
                        instance_id="ml-prod/serving/Deployment/chat-infer", choice="4h",
                        user_id="U024BE7LH", user_name="ravi")
    journal_actions(db, clock, timedelta(days=7))(click)  # the owner's button
    clock.advance(timedelta(minutes=20))
    engine.run_cycle()
    assert api.get("deployments", "serving", "chat-infer")["spec"]["replicas"] == 1
    notebook = api.get("notebooks", "research", "notebook-alice")
    assert KUBEFLOW_STOPPED not in notebook["metadata"].get("annotations", {})
    stops = {r.instance_id for r in _journal(db) if r.action == "stop" and r.status == "done"}
    assert "ml-prod/serving/Deployment/chat-infer" not in stops
    assert "ml-prod/research/Notebook/notebook-alice" not in stops
    snoozes = {r.instance_id: r.detail for r in _journal(db) if r.action == "snooze"}
    until = (clock.now() - timedelta(minutes=20) + timedelta(hours=4)).isoformat()
    assert snoozes["ml-prod/serving/Deployment/chat-infer"] == f"snoozed until {until}"
    assert snoozes["ml-prod/research/Notebook/notebook-alice"].startswith("snoozed until")


def test_a_long_metrics_window_is_read_in_spans_no_read_of_which_outgrows_its_bound(
        world: tuple[Engine, KubeApi, Database, ManualClock],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard.k8s import read as reading

    engine, _, _, clock = world
    provider = engine.providers["k8s"]
    assert isinstance(provider, KubernetesProvider)
    listed = provider.list_instances().instances
    spans = _count_reads(provider)
    # 18 devices x 8 figures: a read may hold 10 minutes of them
    monkeypatch.setattr(reading, "MAX_POINTS_PER_READ", 18 * 8 * 10)
    now = clock.now().replace(second=0, microsecond=0)
    got = provider.gpu_metrics(listed, now - timedelta(minutes=45), now)
    assert [(end - start) for start, end in spans] == [timedelta(minutes=10)] * 4 + [
        timedelta(minutes=5)]
    assert spans[0][0] == now - timedelta(minutes=45) and spans[-1][1] == now
    chat = sorted(m.minute for m in got if m.instance_id.endswith("chat-infer"))
    assert len(chat) == 45 and len(set(chat)) == 45  # every minute once, none lost at a cut


def test_explain_prices_a_stopped_workload_as_it_was_priced_when_stopped(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    from costguard.costs.pricing import PriceCatalog
    from costguard.report.explain import explain

    engine, _, db, clock = world
    _warned_then_due(engine, clock)
    stop = next(r for r in _journal(db) if r.action == "stop"
                and r.instance_id.endswith("chat-infer"))
    assert stop.usd_per_hour > 0
    with db.session() as s:
        answer = explain(s, "ml-prod/serving/Deployment/chat-infer", engine.policies,
                         PriceCatalog(), clock.now())
    assert answer.usd_per_hour == stop.usd_per_hour
    assert answer.price_source == "as priced when stop was journaled"


def test_a_workload_whose_pods_keep_their_cpus_busy_is_not_stopped(
        world: tuple[Engine, KubeApi, Database, ManualClock]) -> None:
    """etl/prep's GPU idles while its pod preprocesses on 6 of its 8 cores: work in
    progress, held back as a busy host is (its CPU read from cAdvisor as its "host")."""
    engine, api, db, clock = world
    first = engine.run_cycle()
    assert first.held_back == {"idle-gpu-workloads": 1}
    provider = engine.providers["k8s"]
    now = clock.now().replace(second=0, microsecond=0)
    prep = [m for m in provider.gpu_metrics(provider.list_instances().instances,
                                            now - timedelta(minutes=10), now)
            if m.instance_id.endswith("/prep")]
    assert prep and {(m.host_cpu_pct, m.host_cpus) for m in prep} == {(75.0, 8)}
    clock.advance(timedelta(minutes=20))
    engine.run_cycle()
    with db.session() as s:
        warned = {a.instance_id for a in s.exec(select(AlertRow))}
    assert "ml-prod/etl/Deployment/prep" not in warned
    assert api.get("deployments", "etl", "prep")["spec"]["replicas"] == 1
    assert not [r for r in _journal(db) if r.instance_id.endswith("/prep")]
