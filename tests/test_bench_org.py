"""The org-scale bench's fake AWS (bench/_org_aws.py) is checked against moto on a small
fleet: boto3 reads the same records from both, and a costguard cycle does the same things
against both. Its latency proxy delays calls and answers throttling errors botocore retries.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from bench import _latency_proxy
from bench._org_aws import OrgAws
from bench._org_aws_http import serve
from bench._org_cycle import make_engine
from bench._org_fleet import (
    HISTORY,
    PERIOD_S,
    TYPES,
    Fleet,
    FleetInstance,
    generate,
    gpu_utilization,
    host_cpu,
)
from costguard.providers.aws.instance_xml import FIELDS

REGIONS = ["us-east-1", "eu-west-1"]
AMI = "ami-12c6146b"  # one of moto's built-in images
# the metrics' clock: recent enough for moto to keep the datapoints, whole 5-minute periods
NOW = datetime.fromtimestamp(time.time() // PERIOD_S * PERIOD_S, UTC)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return generate(48, 2, REGIONS, NOW, seed=5)


@pytest.fixture
def fake(fleet: Fleet) -> Iterator[tuple[str, OrgAws]]:
    org = OrgAws(fleet)
    server = serve(org)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", org
    finally:
        server.shutdown()
        server.server_close()


def _session(account: str, endpoint: str | None) -> boto3.Session:
    sts = boto3.client("sts", region_name="us-east-1", endpoint_url=endpoint)
    creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/CostguardRole",
                            RoleSessionName="test")["Credentials"]
    return boto3.Session(aws_access_key_id=creds["AccessKeyId"],
                         aws_secret_access_key=creds["SecretAccessKey"],
                         aws_session_token=creds["SessionToken"])


def _seed_moto(fleet: Fleet) -> dict[str, str]:
    """The fleet in moto (inside mock_aws): instances with the same type, zone, tags, spot
    and state, and the same datapoints; returns moto's instance id -> the fleet's Name."""
    names: dict[str, str] = {}
    for account in fleet.accounts:
        session = _session(account, None)
        for region in REGIONS:
            ec2 = session.client("ec2", region_name=region)
            cw = session.client("cloudwatch", region_name=region)
            data: list[tuple[str, dict[str, Any]]] = []
            for inst in fleet.by_scope.get((account, region), []):
                market = ({"InstanceMarketOptions": {"MarketType": "spot"}} if inst.spot else {})
                got = ec2.run_instances(
                    ImageId=AMI, MinCount=1, MaxCount=1, InstanceType=inst.itype,
                    Placement={"AvailabilityZone": inst.zone},
                    TagSpecifications=[{"ResourceType": "instance", "Tags": [
                        {"Key": k, "Value": v} for k, v in inst.tags]}],
                    **market)["Instances"][0]
                moto_id = got["InstanceId"]
                names[moto_id] = inst.tag_map["Name"]
                if inst.state == "stopped":
                    ec2.stop_instances(InstanceIds=[moto_id])
                data += _datapoints(inst, moto_id)
            for namespace in ("CWAgent", "AWS/EC2"):
                datums = [d for ns, d in data if ns == namespace]
                for start in range(0, len(datums), 500):
                    cw.put_metric_data(Namespace=namespace, MetricData=datums[start:start + 500])
    return names


def _datapoints(inst: FleetInstance, moto_id: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    dims = [{"Name": "InstanceId", "Value": moto_id}]
    at = NOW - HISTORY
    while at < NOW + timedelta(minutes=10):
        gpu, cpu = gpu_utilization(inst, at, NOW), host_cpu(inst, at, NOW)
        if gpu is not None:
            out.append(("CWAgent", {"MetricName": "nvidia_smi_utilization_gpu",
                                    "Dimensions": dims, "Timestamp": at, "Value": gpu}))
        if cpu is not None:
            out.append(("AWS/EC2", {"MetricName": "CPUUtilization", "Dimensions": dims,
                                    "Timestamp": at, "Value": cpu}))
        at += timedelta(seconds=PERIOD_S)
    return out


def _records(session: boto3.Session, region: str, endpoint: str | None
             ) -> dict[str, dict[str, Any]]:
    ec2 = session.client("ec2", region_name=region, endpoint_url=endpoint)
    out = {}
    for page in ec2.get_paginator("describe_instances").paginate():
        for res in page["Reservations"]:
            for raw in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
                out[tags["Name"]] = raw
    return out


def _read_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """What costguard's inventory takes from a record, less what each server makes up
    (ids, DNS names, launch times; spot request ids, which EC2 sends for a spot instance
    and moto does not)."""
    return {"type": raw["InstanceType"], "state": raw["State"],
            "zone": raw["Placement"]["AvailabilityZone"],
            "tags": sorted((t["Key"], t["Value"]) for t in raw.get("Tags", [])),
            "lifecycle": raw.get("InstanceLifecycle")}


def test_boto3_reads_the_same_instances_from_the_fake_as_from_moto(
        fleet: Fleet, fake: tuple[str, OrgAws]) -> None:
    url, _ = fake
    ours = {(a, r): _records(_session(a, url), r, url) for a in fleet.accounts for r in REGIONS}
    with mock_aws():
        _seed_moto(fleet)
        theirs = {(a, r): _records(_session(a, None), r, None)
                  for a in fleet.accounts for r in REGIONS}
    assert sum(len(v) for v in ours.values()) == len(fleet.instances)
    for scope, records in ours.items():
        assert records.keys() == theirs[scope].keys(), scope
        for name, raw in records.items():
            moto_raw = theirs[scope][name]
            assert _read_fields(raw) == _read_fields(moto_raw), name
            # every field costguard reads that moto fills, the fake sends too, typed alike
            # (moto sends a running instance an empty StateReason; EC2 leaves it out)
            for field in FIELDS & moto_raw.keys():
                if moto_raw[field] not in ({"Code": "", "Message": ""}, "", None):
                    assert type(raw.get(field)) is type(moto_raw[field]), (name, field)


def test_the_fakes_gpu_types_are_moto_s(fake: tuple[str, OrgAws], fleet: Fleet) -> None:
    url, _ = fake
    wanted = sorted(TYPES)
    ours = _session(fleet.accounts[0], url).client("ec2", region_name="us-east-1",
                                                   endpoint_url=url)
    mine = {t["InstanceType"]: t.get("GpuInfo", {}).get("Gpus")
            for t in ours.describe_instance_types(InstanceTypes=wanted)["InstanceTypes"]}
    with mock_aws():
        moto = boto3.client("ec2", region_name="us-east-1")
        theirs = {t["InstanceType"]: t.get("GpuInfo", {}).get("Gpus")
                  for t in moto.describe_instance_types(InstanceTypes=wanted)["InstanceTypes"]}
    def summary(gpus: list[dict[str, Any]] | None) -> tuple[int, int] | None:
        if not gpus:
            return None
        return (sum(g["Count"] for g in gpus), gpus[0]["MemoryInfo"]["SizeInMiB"])
    assert {t: summary(g) for t, g in mine.items()} == {t: summary(g) for t, g in theirs.items()}


def test_the_fake_answers_metrics_as_moto_aggregates_the_same_points(
        fleet: Fleet, fake: tuple[str, OrgAws]) -> None:
    url, _ = fake
    account = fleet.accounts[0]
    inst = next(i for i in fleet.by_scope[(account, "us-east-1")]
                if i.gpu and i.state == "running" and i.profile != "no-agent")

    def query(instance_id: str) -> list[dict[str, Any]]:
        dims = [{"Name": "InstanceId", "Value": instance_id}]
        return [{"Id": f"q{n}", "MetricStat": {"Metric": {"Namespace": ns, "MetricName": m,
                                                           "Dimensions": dims},
                                                "Period": PERIOD_S, "Stat": "Average"}}
                for n, (ns, m) in enumerate([("CWAgent", "nvidia_smi_utilization_gpu"),
                                             ("AWS/EC2", "CPUUtilization")])]

    # an hour on the clock's periods; and one from a minute between them (a catch-up's slice
    # of its span): CloudWatch counts the periods from the start (rounded down to its minute,
    # which moto does not do: costguard asks whole minutes)
    spans = [(NOW - timedelta(hours=1), NOW),
             (NOW - timedelta(minutes=58), NOW - timedelta(minutes=2))]

    def read(cw: Any, instance_id: str) -> list[list[tuple[datetime, float]]]:
        out = []
        for start, end in spans:
            got = cw.get_metric_data(MetricDataQueries=query(instance_id),
                                     StartTime=start, EndTime=end,
                                     ScanBy="TimestampAscending")["MetricDataResults"]
            by_id = {r["Id"]: r for r in got}
            out += [sorted(zip(by_id[q]["Timestamps"], by_id[q]["Values"], strict=True))
                    for q in ("q0", "q1")]
        return out

    ours = read(_session(account, url).client("cloudwatch", region_name="us-east-1",
                                              endpoint_url=url), inst.instance_id)
    with mock_aws():
        names = _seed_moto(fleet)
        moto_id = next(i for i, n in names.items() if n == inst.tag_map["Name"])
        theirs = read(_session(account, None).client("cloudwatch", region_name="us-east-1"),
                      moto_id)
    assert len(ours[0]) == 12
    # from 2 minutes past a period; the last period's point is past the end
    assert [t.minute % 5 for t, _ in ours[2]] == [2] * 11
    assert ours == theirs


def _outcome(engine: Any) -> tuple[dict[str, int], dict[str, int], int]:
    summary = engine.run_cycle()
    engine.db.dispose()
    return summary.findings, summary.actions, len(summary.gaps)


def _names_changed(session_for: Any, fleet: Fleet, endpoint: str | None
                   ) -> tuple[set[str], set[str]]:
    stopped, tagged = set(), set()
    for account in fleet.accounts:
        for region in REGIONS:
            for name, raw in _records(session_for(account, endpoint), region, endpoint).items():
                tags = {t["Key"] for t in raw.get("Tags", [])}
                if "costguard:untagged-since" in tags:
                    tagged.add(name)
                if raw["State"]["Name"] in ("stopping", "stopped"):
                    stopped.add(name)
    return stopped, tagged


def test_a_costguard_cycle_does_the_same_against_the_fake_and_moto(
        fleet: Fleet, fake: tuple[str, OrgAws], tmp_path: Path) -> None:
    url, org = fake
    spec = {"accounts": len(fleet.accounts), "regions": REGIONS, "now": NOW.isoformat(),
            "workers": 4}
    on_fake = _outcome(make_engine(url, spec, f"sqlite:///{tmp_path / 'fake.db'}")[0])
    fake_stopped, fake_tagged = _names_changed(_session, fleet, url)
    with mock_aws():
        _seed_moto(fleet)
        on_moto = _outcome(make_engine(None, spec, f"sqlite:///{tmp_path / 'moto.db'}")[0])
        moto_stopped, moto_tagged = _names_changed(_session, fleet, None)
    expected_stops = {fleet.by_id[i].tag_map["Name"] for i in fleet.expected_stopped()}
    prestopped = {i.tag_map["Name"] for i in fleet.instances if i.state == "stopped"}
    assert expected_stops  # the fleet has idle GPUs to stop, and instances to tag
    assert fake_stopped - prestopped == expected_stops == moto_stopped - prestopped
    assert fake_tagged == moto_tagged == {fleet.by_id[i].tag_map["Name"]
                                          for i in fleet.expected_tagged()}
    assert on_fake == on_moto
    assert on_fake[2] == 0  # no gaps
    assert set(org.changes()["stopped"]) == fleet.expected_stopped()


def test_the_floor_counts_what_a_cycle_cannot_do_without(fleet: Fleet) -> None:
    floor = fleet.floor()
    scopes = len(fleet.by_scope)
    assert floor["STS.AssumeRole"] == len(fleet.accounts)
    assert floor["EC2.DescribeInstances"] >= scopes  # the listing, and re-checks
    assert floor["EC2.StopInstances"] == len({(fleet.by_id[i].account, fleet.by_id[i].region)
                                              for i in fleet.expected_stopped()})
    big = generate(2_500, 1, ["us-east-1"], NOW)  # one scope: three listing pages
    assert big.floor()["EC2.DescribeInstances"] >= 3


# -- the latency proxy -------------------------------------------------------------------


@pytest.fixture
def proxied(fake: tuple[str, OrgAws]) -> Iterator[tuple[str, _latency_proxy.Gate]]:
    url, _ = fake
    server, gate = _latency_proxy.serve(url, latency_ms=50, throttle=0.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", gate
    finally:
        server.shutdown()
        server.server_close()


def test_the_proxy_delays_every_call(proxied: tuple[str, _latency_proxy.Gate],
                                     fleet: Fleet) -> None:
    url, gate = proxied
    sts = boto3.client("sts", region_name="us-east-1", endpoint_url=url)
    started = time.perf_counter()
    for _ in range(3):
        sts.get_caller_identity()
    assert time.perf_counter() - started >= 0.15
    assert gate.forwarded == 3 and gate.throttled == 0


@pytest.mark.parametrize("service", ["sts", "ec2", "cloudwatch", "autoscaling"])
def test_throttling_errors_are_the_protocols_own_and_botocore_retries_them(
        proxied: tuple[str, _latency_proxy.Gate], service: str) -> None:
    from botocore.config import Config
    from botocore.exceptions import ClientError

    url, gate = proxied
    gate.latency_s = 0.0

    def client(attempts: int) -> Any:
        return boto3.client(service, region_name="us-east-1", endpoint_url=url,  # type: ignore[call-overload]
                            config=Config(retries={"mode": "standard",
                                                   "max_attempts": attempts}))

    calls = {"sts": lambda c: c.get_caller_identity(),
             "ec2": lambda c: c.describe_regions(),
             "cloudwatch": lambda c: c.get_metric_data(
                 MetricDataQueries=[], StartTime=NOW - timedelta(minutes=5), EndTime=NOW),
             "autoscaling": lambda c: c.describe_auto_scaling_groups(
                 AutoScalingGroupNames=["none"])}
    gate.throttle = 1.0  # every call refused: the error botocore parses is the proxy's
    with pytest.raises(ClientError) as caught:
        calls[service](client(2))
    code = caught.value.response["Error"]["Code"]
    assert code == ("RequestLimitExceeded" if service == "ec2" else "Throttling")
    assert caught.value.response["ResponseMetadata"]["RetryAttempts"] >= 1  # retried
    gate.throttle = 0.3  # some refused: retries absorb them
    patient = client(10)
    for _ in range(5):
        calls[service](patient)
    assert gate.forwarded >= 5


def test_a_cycle_through_a_throttling_proxy_has_no_gaps(
        fleet: Fleet, proxied: tuple[str, _latency_proxy.Gate], tmp_path: Path) -> None:
    url, gate = proxied
    gate.latency_s, gate.throttle = 0.005, 0.2
    spec = {"accounts": len(fleet.accounts), "regions": REGIONS, "now": NOW.isoformat(),
            "workers": 4}
    engine, _ = make_engine(url, spec, f"sqlite:///{tmp_path / 'cg.db'}")
    _, _, gaps = _outcome(engine)
    assert gate.throttled > 0
    assert gaps == 0
    state = json.loads(urllib.request.urlopen(f"{url}/_state", timeout=10).read())
    assert set(state["stopped"]) == fleet.expected_stopped()


def test_a_daemon_back_after_six_hours_catches_up_and_stops_what_went_idle(
        fleet: Fleet, proxied: tuple[str, _latency_proxy.Gate], tmp_path: Path) -> None:
    """org-catch-up's scenario (bench/org_catch_up.py): a cold cycle, then a new engine on
    the same store 6 hours later reads the downtime's points (the fake serves them that far
    on), with no gap, and stops the GPUs that went idle meanwhile, and nothing else."""
    from bench.org_catch_up import DOWN, expected_after

    url, gate = proxied
    gate.latency_s = 0.002
    went_idle = expected_after(fleet) - fleet.expected_stopped()
    assert went_idle  # the fleet has some: the catch-up has something to find
    db = f"sqlite:///{tmp_path / 'cg.db'}"
    spec = {"accounts": len(fleet.accounts), "regions": REGIONS, "now": NOW.isoformat(),
            "workers": 4}
    _outcome(make_engine(url, spec, db)[0])
    state = json.loads(urllib.request.urlopen(f"{url}/_state", timeout=10).read())
    assert set(state["stopped"]) == fleet.expected_stopped()  # went idle too recently
    engine, _ = make_engine(url, {**spec, "now": (NOW + DOWN).isoformat()}, db)
    summary = engine.run_cycle()
    engine.db.dispose()
    assert summary.gaps == []
    assert summary.actions["stopped"]["idle-gpu-stop"] == len(went_idle)
    # the downtime's 5-minute points were stored (`readings` counts the minutes they
    # cover); the window holds the idle policy's last hour of them: a sixth
    assert summary.readings > len(went_idle) * (DOWN // timedelta(minutes=1))
    assert engine.window.readings() * 6 == summary.readings // 5
    state = json.loads(urllib.request.urlopen(f"{url}/_state", timeout=10).read())
    assert set(state["stopped"]) == expected_after(fleet)


def test_one_cycle_over_both_clouds_through_throttling_fakes_is_correct_and_counted(
        fleet: Fleet, proxied: tuple[str, _latency_proxy.Gate], tmp_path: Path) -> None:
    """The bench's GCP side: its fakes seeded as bench/gcp.py seeds them over several
    projects, Compute behind the latency proxy and Monitoring refusing calls itself; one
    engine governs both clouds (bench/policies/org-both-clouds.yml) with no gap, and both
    fleets end as expected. The floor counts the GCP calls such a cycle cannot do without,
    and the calls are split by cycle from their times."""
    from bench._org_gcp import _Stamped, _StampedList, floor, project_ids
    from bench.gcp import seed_fleet, verify
    from bench.org_scale import gcp_calls
    from costguard.demo.gcp_fake.server import FakeGcp

    url, gate = proxied
    gate.latency_s, gate.throttle = 0.002, 0.1
    gcp = FakeGcp()
    gcp.monitoring.throttle, gcp.monitoring.latency_s = 0.3, 0.002
    calls = gcp.compute.calls = _Stamped()
    gcp.compute.batch_sizes = _StampedList("compute calls in batches", calls.events)
    with gcp:
        projects = project_ids(4)
        gcp_fleet = seed_fleet(gcp, 90, NOW, projects)
        gcp_floor = floor(gcp, gcp_fleet)
        gcp_server, gcp_gate = _latency_proxy.serve(gcp.compute.url, latency_ms=2,
                                                    throttle=0.1)
        thread = threading.Thread(target=gcp_server.serve_forever, daemon=True)
        thread.start()
        try:
            spec = {"accounts": len(fleet.accounts), "regions": REGIONS,
                    "now": NOW.isoformat(), "workers": 4,
                    "gcp": {"projects": projects, "monitoring": gcp.monitoring.endpoint,
                            "compute": f"http://127.0.0.1:{gcp_server.server_address[1]}"}}
            engine, _ = make_engine(url, spec, f"sqlite:///{tmp_path / 'cg.db'}")
            started = time.time()
            _, actions, gaps = _outcome(engine)
            ended = time.time()
        finally:
            gcp_server.shutdown()
            gcp_server.server_close()
        assert verify(gcp, gcp_fleet) == "ok"
    assert gaps == 0
    assert gcp_gate.throttled > 0 and gcp.monitoring.throttled > 0 and gate.throttled > 0
    assert actions["stopped"]["gcp-idle-gpu-stop"] == len(gcp_fleet.expected_stop) > 0
    assert actions["tagged"]["gcp-missing-team-label"] == len(gcp_fleet.expected_label)
    state = json.loads(urllib.request.urlopen(f"{url}/_state", timeout=10).read())
    assert set(state["stopped"]) == fleet.expected_stopped()
    # the floor: a listing page and ten metric reads per project (seven metric types, three
    # of them read for their mean and their maximum), one batch per action kind (90 VMs, far
    # below a page, a batch or a filter's length)
    assert gcp_floor["monitoring ListTimeSeries"] == 4 * 10
    acting = {vm.project for vm in gcp.compute._vms.values()
              if str(vm.id) in gcp_fleet.expected_stop | gcp_fleet.expected_label}
    assert gcp_floor["compute aggregatedList instances"] == 4 + len(acting)
    assert gcp_floor["compute batch"] == 2
    # each call of a batch counted, the batch once as a request; nothing outside the cycle
    events = [list(e) for e in calls.events]
    got, requests = gcp_calls(events, started, ended)
    assert got["compute POST stop"] == len(gcp_fleet.expected_stop)
    assert got["compute POST batch"] >= 2
    assert requests == sum(got.values()) - sum(gcp.compute.batch_sizes)
    assert gcp_calls(events, ended + 1, ended + 2) == (Counter(), 0)


def test_the_gcp_fleet_is_the_same_whatever_minutes_it_reaches_past_now() -> None:
    """bench/gcp.seed_fleet's `after` (the org-scale steady cycle's five minutes): the same
    VMs, labels, profiles and first 75 minutes; then each series goes on past NOW with its
    profile (a GPU that went idle stays idle), where without it the later cycle read nothing
    new on GCP."""
    from bench.gcp import MINUTES, seed_fleet
    from costguard.demo.gcp_fake.server import FakeGcp
    from costguard.providers.gcp.metrics import UTIL

    plain, longer = FakeGcp(), FakeGcp()
    fleet = seed_fleet(plain, 60, NOW)
    reaching = seed_fleet(longer, 60, NOW, after=5)

    assert (fleet.expected_stop, fleet.expected_label, fleet.labels) == (
        reaching.expected_stop, reaching.expected_label, reaching.labels)
    assert len(plain.monitoring.series) == len(longer.monitoring.series) > 0
    for short, long in zip(plain.monitoring.series, longer.monitoring.series, strict=True):
        assert (short.project, short.metric_type, short.metric_labels) == (
            long.project, long.metric_type, long.metric_labels)
        assert long.points[:MINUTES] == short.points
        past = long.points[MINUTES:]
        assert [t for t, _ in past] == [short.points[-1][0] + timedelta(minutes=k)
                                        for k in range(1, 6)]
        assert min(t for t, _ in past) > NOW
        if short.metric_type == UTIL:  # idle (or went idle) stays idle, busy stays busy
            assert (max(v for _, v in short.points[-20:]) < 2) == (max(v for _, v in past) < 2)


def test_an_hour_on_the_gcp_gpus_that_went_idle_are_expected_stopped_too() -> None:
    """org-catch-up's GCP verdict (bench/gcp.verify `an_hour_on`): a cycle six hours on
    must also have stopped the GPUs that had gone idle 20 minutes before the cold cycle."""
    from bench.gcp import LABEL, seed_fleet, verify
    from costguard.demo.gcp_fake.server import FakeGcp

    fake = FakeGcp()
    fleet = seed_fleet(fake, 200, NOW)
    assert fleet.went_idle and fleet.expected_stop and not fleet.went_idle & fleet.expected_stop
    vms = {str(vm.id): vm for vm in fake.compute._vms.values()}
    for vm_id in fleet.expected_stop:  # what the cold cycle stops, and labels
        vms[vm_id].status = "TERMINATED"
    for vm_id in fleet.expected_label:
        vms[vm_id].labels[LABEL] = NOW.isoformat()
    assert verify(fake, fleet) == "ok"
    assert verify(fake, fleet, an_hour_on=True).startswith(
        f"stopped {len(fleet.expected_stop)} (expected "
        f"{len(fleet.expected_stop | fleet.went_idle)}; missing {len(fleet.went_idle)}, extra 0)")
    for vm_id in fleet.went_idle:  # and what the catch-up stops
        vms[vm_id].status = "TERMINATED"
    assert verify(fake, fleet, an_hour_on=True) == "ok"
    assert verify(fake, fleet).startswith("stopped")  # the cold cycle alone stops fewer
