"""CloudWatch GPU/CPU readings against moto: discovery, both agent layouts, 500-query batches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances
from botocore.exceptions import EndpointConnectionError

from costguard.clock import ManualClock
from costguard.minutes import slots
from costguard.model import Instance, TelemetrySource
from costguard.providers.aws.metrics import GPU_MEM_TOTAL, GPU_MEM_USED, GPU_UTIL
from costguard.providers.base import ReadsWindowOnce

pytestmark = pytest.mark.usefixtures("moto")


def _minute(clock: ManualClock, ago: int) -> datetime:
    return clock.now().replace(second=0, microsecond=0) - timedelta(minutes=ago)


def _dims(
    raw: dict[str, Any], index: int, *, with_id: bool, host: str | None = None
) -> list[dict[str, str]]:
    dims = [
        {"Name": "host", "Value": host or raw["PrivateDnsName"]},
        {"Name": "index", "Value": str(index)},
        {"Name": "name", "Value": "NVIDIA A100-SXM4-40GB"},
    ]
    if with_id:
        dims.append({"Name": "InstanceId", "Value": raw["InstanceId"]})
    return dims


def _put(datums: list[dict[str, Any]], namespace: str = "CWAgent", region: str = REGION) -> None:
    cw: Any = boto3.client("cloudwatch", region_name=region)
    for start in range(0, len(datums), 1000):
        cw.put_metric_data(Namespace=namespace, MetricData=datums[start : start + 1000])


def _calls(session: boto3.Session, operation: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    session.events.register(  # a copy: the queries leave the dict once recorded
        f"provide-client-params.cloudwatch.{operation}",
        lambda params, **_: seen.append(dict(params)),
    )
    return seen


def _inventory(make_provider: ProviderFactory, **settings: Any) -> tuple[Any, list[Instance]]:
    provider = make_provider(**settings)
    return provider, provider.list_instances().instances


def test_640_series_in_both_layouts_take_three_get_metric_data_calls(
    make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock
) -> None:
    raws = run_instances(count=80, itype="p4d.24xlarge")  # 80 x 8 GPUs = 640 series
    when = _minute(clock, 1)
    datums = [
        {
            "MetricName": GPU_UTIL,
            "Dimensions": _dims(raw, gpu, with_id=n % 2 == 0),  # half carry InstanceId
            "Timestamp": when,
            "Value": float((n + gpu) % 100),
        }
        for n, raw in enumerate(raws)
        for gpu in range(8)
    ]
    _put(datums)
    provider, instances = _inventory(make_provider)
    listed, fetched = _calls(session, "ListMetrics"), _calls(session, "GetMetricData")

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    # 640 GPU series (each its Average and its Maximum) and the 80 instances'
    # CPUUtilization, in the same three calls
    assert [len(c["MetricDataQueries"]) for c in fetched] == [500, 500, 360]
    assert provider.get_metric_data_calls == 3
    # One discovery per GPU metric name for the region; 640 series page at 500 a page.
    assert [c["MetricName"] for c in listed if "NextToken" not in c] == [
        GPU_UTIL,
        GPU_MEM_USED,
        GPU_MEM_TOTAL,
    ]
    assert len(listed) == 4
    assert len(rows) == 640
    got = {(r.instance_id, r.gpu_index): r.util_mean for r in rows}
    assert got == {
        (raw["InstanceId"], gpu): float((n + gpu) % 100)
        for n, raw in enumerate(raws)
        for gpu in range(8)
    }
    assert {r.minute for r in rows} == {when}
    assert {r.source for r in rows} == {TelemetrySource.CLOUDWATCH}
    assert all(r.sm_mean is None and r.sm_p95 is None for r in rows)


def test_memory_is_converted_from_mib_and_rows_merge_per_gpu_minute(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = [_minute(clock, 3), _minute(clock, 2)]
    datums = []
    for m, when in enumerate(minutes):
        for metric, value in (
            (GPU_UTIL, 40.0 + m),
            (GPU_MEM_USED, 1024.0),
            (GPU_MEM_TOTAL, 23028.0),
        ):
            datums.append(
                {
                    "MetricName": metric,
                    "Dimensions": _dims(raw, 0, with_id=True),
                    "Timestamp": when,
                    "Value": value,
                }
            )
    _put(datums)
    provider, instances = _inventory(make_provider)

    rows = provider.gpu_metrics(instances, minutes[0], minutes[1] + timedelta(minutes=1))

    assert [(r.minute, r.util_mean, r.mem_used_bytes, r.mem_total_bytes) for r in rows] == [
        (minutes[0], 40.0, 1024 * 1024 * 1024, 23028 * 1024 * 1024),
        (minutes[1], 41.0, 1024 * 1024 * 1024, 23028 * 1024 * 1024),
    ]


@pytest.mark.parametrize(("by_id", "by_host"), [(77.0, 11.0), (11.0, 77.0)])
def test_auto_layout_reads_both_series_of_a_gpu_and_the_busier_wins(
    make_provider: ProviderFactory, clock: ManualClock, by_id: float, by_host: float
) -> None:
    # anyone allowed PutMetricData can add a series that claims a GPU: read together,
    # whichever is the agent's, an added one can only make the GPU look busier
    (raw,) = run_instances()
    when = _minute(clock, 1)
    _put(
        [
            {
                "MetricName": GPU_UTIL,
                "Dimensions": _dims(raw, 0, with_id=True),
                "Timestamp": when,
                "Value": by_id,
            },
            {
                "MetricName": GPU_UTIL,
                "Dimensions": _dims(raw, 0, with_id=False),
                "Timestamp": when,
                "Value": by_host,
            },
        ]
    )
    provider, instances = _inventory(make_provider)

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    assert [(r.instance_id, r.util_mean, r.util_max) for r in rows] == [
        (raw["InstanceId"], 77.0, 77.0)]


@pytest.mark.parametrize(("layout", "expected"), [(True, [77.0]), (False, [11.0])])
def test_fixed_layout_reads_only_its_own_series(
    make_provider: ProviderFactory, clock: ManualClock, layout: bool, expected: list[float]
) -> None:
    id_raw, host_raw = run_instances(count=2)
    when = _minute(clock, 1)
    _put(
        [
            {
                "MetricName": GPU_UTIL,
                "Dimensions": _dims(id_raw, 0, with_id=True),
                "Timestamp": when,
                "Value": 77.0,
            },
            {
                "MetricName": GPU_UTIL,
                "Dimensions": _dims(host_raw, 0, with_id=False),
                "Timestamp": when,
                "Value": 11.0,
            },
        ]
    )
    provider, instances = _inventory(make_provider, cloudwatch={"instance_dimension": layout})

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    assert [r.util_mean for r in rows] == expected


def test_short_hostname_is_matched_without_a_prior_inventory(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    (raw,) = run_instances()
    short = raw["PrivateDnsName"].split(".", 1)[0]
    when = _minute(clock, 1)
    _put(
        [
            {
                "MetricName": GPU_UTIL,
                "Dimensions": _dims(raw, 0, with_id=False, host=short),
                "Timestamp": when,
                "Value": 3.0,
            }
        ]
    )
    inventory_seen = make_provider().list_instances().instances
    fresh = make_provider()  # a new process: no host names cached, they are described again

    rows = fresh.gpu_metrics(inventory_seen, when, when + timedelta(minutes=1))

    assert [(r.instance_id, r.util_mean) for r in rows] == [(raw["InstanceId"], 3.0)]


def test_instance_without_agent_metrics_has_no_rows(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    reporting, silent = run_instances(count=2)
    when = _minute(clock, 1)
    _put(
        [
            {
                "MetricName": GPU_UTIL,
                "Dimensions": _dims(reporting, 0, with_id=True),
                "Timestamp": when,
                "Value": 1.0,
            }
        ]
    )
    provider, instances = _inventory(make_provider)

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    assert {r.instance_id for r in rows} == {reporting["InstanceId"]}
    assert silent["InstanceId"] not in {r.instance_id for r in rows}


def test_cpu_utilisation_is_returned_per_instance_per_minute(
    make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock
) -> None:
    raws = run_instances(count=3, itype="m5.large")
    minutes = [_minute(clock, 4), _minute(clock, 2)]
    _put(
        [
            {
                "MetricName": "CPUUtilization",
                "Dimensions": [{"Name": "InstanceId", "Value": raw["InstanceId"]}],
                "Timestamp": when,
                "Value": 10.0 * n + m,
            }
            for n, raw in enumerate(raws)
            for m, when in enumerate(minutes)
        ],
        namespace="AWS/EC2",
    )
    provider, instances = _inventory(make_provider)
    fetched = _calls(session, "GetMetricData")

    cpu = provider.cpu_metrics(instances, minutes[0], minutes[1] + timedelta(minutes=1))

    assert len(fetched) == 1
    assert cpu == {
        raw["InstanceId"]: {minutes[0]: 10.0 * n, minutes[1]: 10.0 * n + 1}
        for n, raw in enumerate(raws)
    }


def test_host_cpu_joins_each_gpu_minute_in_the_same_call(
    make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = [_minute(clock, ago) for ago in range(12, 0, -1)]  # 12 GPU minutes
    _put([{"MetricName": GPU_UTIL, "Dimensions": _dims(raw, 0, with_id=True),
           "Timestamp": when, "Value": 20.0} for when in minutes])
    # basic monitoring: one CPUUtilization point per 5 minutes, none for the last two
    cpu_at = {minutes[0]: 91.5, minutes[5]: 12.25}
    _put([{"MetricName": "CPUUtilization",
           "Dimensions": [{"Name": "InstanceId", "Value": raw["InstanceId"]}],
           "Timestamp": when, "Value": value} for when, value in cpu_at.items()],
         namespace="AWS/EC2")
    provider, instances = _inventory(make_provider)
    fetched = _calls(session, "GetMetricData")

    rows = provider.gpu_metrics(instances, minutes[0], minutes[-1] + timedelta(minutes=1))

    assert len(fetched) == 1
    assert [q["MetricStat"]["Metric"]["MetricName"] for q in fetched[0]["MetricDataQueries"]
            if q["Id"].startswith("c")] == ["CPUUtilization"]
    assert [r.host_cpu_pct for r in rows] == [91.5] * 5 + [12.25] * 5 + [None] * 2
    assert all(r.host_iowait_pct is None and r.host_cpus is None for r in rows)

    off, instances = _inventory(make_provider, cloudwatch={"host_cpu": False})
    rows = off.gpu_metrics(instances, minutes[0], minutes[-1] + timedelta(minutes=1))
    assert not any(q["Id"].startswith("c") for q in fetched[-1]["MetricDataQueries"])
    assert {r.host_cpu_pct for r in rows} == {None} and len(rows) == 12


def test_unreachable_cloudwatch_region_is_a_metric_gap_and_other_regions_are_read(
    make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock
) -> None:
    (east,) = run_instances(region="us-east-1")
    (west,) = run_instances(region="us-west-2")
    when = _minute(clock, 1)
    for raw, region in ((east, "us-east-1"), (west, "us-west-2")):
        _put(
            [
                {
                    "MetricName": GPU_UTIL,
                    "Dimensions": _dims(raw, 0, with_id=True),
                    "Timestamp": when,
                    "Value": 5.0,
                }
            ],
            region=region,
        )
    provider, instances = _inventory(
        make_provider, regions=["us-east-1", "us-west-2"], max_attempts=1
    )

    def unreachable(request: Any, **_: Any) -> None:
        if "us-east-1" in (request.url or ""):
            raise EndpointConnectionError(endpoint_url=request.url)

    session.events.register_first("before-send.cloudwatch", unreachable)

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    assert [r.instance_id for r in rows] == [west["InstanceId"]]
    assert [g.scope for g in provider.metric_gaps] == ["123456789012/us-east-1"]


def test_five_minute_agent_datapoints_cover_their_whole_period(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    by_id = [{"Name": "InstanceId", "Value": raw["InstanceId"]}]
    # an agent with metrics_collection_interval 300: one datapoint every 5 minutes
    _put([{"MetricName": GPU_UTIL, "Dimensions": by_id, "Timestamp": _minute(clock, 5 * k),
           "Value": 2.0} for k in range(1, 13)])
    coarse, instances = _inventory(
        make_provider, cloudwatch={"instance_dimension": True, "period_seconds": 300})
    start, end = _minute(clock, 60), _minute(clock, 0)

    rows = coarse.gpu_metrics(instances, start, end)

    # one reading per point, standing for its 5 minutes: 60 minutes, none outside
    assert len(rows) == 12 and {r.span_minutes for r in rows} == {5}
    minutes = [t for r in rows for t in slots(r, start, end)]
    assert len(minutes) == len(set(minutes)) == 60
    assert min(minutes) == start and max(minutes) == end - timedelta(minutes=1)
    # read at the default 60 s period the same series covers 12 minutes in 60: too little
    fine, _ = _inventory(make_provider, cloudwatch={"instance_dimension": True})
    assert len(fine.gpu_metrics(instances, start, end)) == 12


def test_period_seconds_must_be_whole_minutes() -> None:
    from pydantic import ValidationError

    from costguard.providers.aws.settings import CloudWatchSettings

    with pytest.raises(ValidationError, match="metrics_collection_interval"):
        CloudWatchSettings(period_seconds=90)


def test_instance_rollup_series_stands_for_every_gpu_with_the_busiest_gpus_peak(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    rolled, split = run_instances(count=2, itype="p4d.24xlarge")
    when = _minute(clock, 3)
    # aggregation_dimensions [["InstanceId"]]: one series for all 8 GPUs; one GPU works
    _put([{"MetricName": GPU_UTIL, "Timestamp": when, "Value": v,
           "Dimensions": [{"Name": "InstanceId", "Value": rolled["InstanceId"]}]}
          for v in [1.0] * 7 + [40.0]])
    # an instance with both a roll-up and a per-GPU series: both are read, and the busier
    # reading of each GPU's minute wins (the roll-up's 90 % is some GPU's)
    _put([{"MetricName": GPU_UTIL, "Timestamp": when, "Value": 90.0,
           "Dimensions": [{"Name": "InstanceId", "Value": split["InstanceId"]}]},
          {"MetricName": GPU_UTIL, "Timestamp": when, "Value": 3.0,
           "Dimensions": _dims(split, 5, with_id=True)}])
    provider, instances = _inventory(make_provider, cloudwatch={"instance_dimension": True})

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    mine = [r for r in rows if r.instance_id == rolled["InstanceId"]]
    assert sorted(r.gpu_index for r in mine) == list(range(8))
    assert {r.util_max for r in mine} == {40.0}  # the busiest GPU: not idle
    assert [r.util_mean for r in mine] == [pytest.approx(47.0 / 8)] * 8
    theirs = [(r.gpu_index, r.util_max) for r in rows if r.instance_id == split["InstanceId"]]
    assert theirs == [(gpu, 90.0) for gpu in range(8)]


def test_a_single_gpu_rollup_is_asked_for_its_maximum_too(
    make_provider: ProviderFactory, clock: ManualClock, session: boto3.Session
) -> None:
    # a one-GPU instance's roll-up is that GPU's own series, and like every utilisation
    # series its Maximum decides: points anyone may add can pull the Average down
    small = run_instances(count=1, itype="g5.xlarge")[0]
    big = run_instances(count=1, itype="p4d.24xlarge")[0]
    when = _minute(clock, 3)
    _put([{"MetricName": GPU_UTIL, "Timestamp": when, "Value": v,
           "Dimensions": [{"Name": "InstanceId", "Value": raw["InstanceId"]}]}
          for raw, v in ((small, 2.0), (small, 6.0), (big, 1.0), (big, 30.0))])
    seen = _calls(session, "GetMetricData")
    provider, instances = _inventory(make_provider, cloudwatch={"instance_dimension": True})

    rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    stats = sorted(q["MetricStat"]["Stat"] for call in seen for q in call["MetricDataQueries"]
                   if q["Id"][0] != "c")  # c: the host CPU queries
    assert stats == ["Average", "Average", "Maximum", "Maximum"]
    one = [(r.gpu_index, r.util_mean, r.util_max) for r in rows
           if r.instance_id == small["InstanceId"]]
    assert one == [(0, 4.0, 6.0)]
    assert {r.util_max for r in rows if r.instance_id == big["InstanceId"]} == {30.0}


def test_an_hour_of_history_is_read_in_quarter_hour_spans_when_asked_with_the_same_result(
    make_provider: ProviderFactory, clock: ManualClock, session: boto3.Session
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    by_id = [{"Name": "InstanceId", "Value": raw["InstanceId"]}]
    _put([{"MetricName": GPU_UTIL, "Dimensions": by_id, "Timestamp": _minute(clock, 5 * k),
           "Value": float(k)} for k in range(1, 13)])
    settings = {"instance_dimension": True, "period_seconds": 300}
    start, end = _minute(clock, 60), _minute(clock, 0)
    seen = _calls(session, "GetMetricData")
    spanned, instances = _inventory(make_provider, cloudwatch={**settings,
                                                               "max_span_minutes": 15})
    whole, _ = _inventory(make_provider, cloudwatch=settings)  # unset: the datapoint limit

    by_span = spanned.gpu_metrics(instances, start, end)
    at_once = whole.gpu_metrics(instances, start, end)
    calls = [(c["StartTime"], c["EndTime"]) for c in seen]

    quarter = timedelta(minutes=15)
    assert calls[:4] == [(start + k * quarter, start + (k + 1) * quarter) for k in range(4)]
    assert len(calls) == 5  # then, unset, the whole hour in one call
    assert calls[4] == (start, end)
    assert [(r.minute, r.util_mean) for r in by_span] == [(r.minute, r.util_mean) for r in at_once]
    assert sum(r.span_minutes for r in by_span) == 60


def test_spans_are_whole_periods() -> None:
    from costguard.providers.aws.metrics import spans

    t0 = datetime(2026, 11, 2, 12, 0)
    hour = t0 + timedelta(hours=1)
    # 7 minutes of 300 s periods: spans of one period, never a period cut in two
    assert spans(t0, t0 + timedelta(minutes=12), timedelta(minutes=7), 300) == [
        (t0, t0 + timedelta(minutes=5)), (t0 + timedelta(minutes=5), t0 + timedelta(minutes=10)),
        (t0 + timedelta(minutes=10), t0 + timedelta(minutes=12))]
    assert spans(t0, hour, None, 60) == [(t0, hour)]
    assert spans(t0, hour, timedelta(hours=2), 60) == [(t0, hour)]


def test_series_discovery_is_reused_until_a_new_instance_or_an_hour(
    make_provider: ProviderFactory, clock: ManualClock, session: boto3.Session
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    when = _minute(clock, 3)
    _put([{"MetricName": GPU_UTIL, "Timestamp": when, "Value": 2.0,
           "Dimensions": [{"Name": "InstanceId", "Value": raw["InstanceId"]}]}])
    provider, instances = _inventory(make_provider, cloudwatch={"instance_dimension": True})
    listed = _calls(session, "ListMetrics")

    provider.gpu_metrics(instances, when, when + timedelta(minutes=1))
    first = len(listed)
    provider.gpu_metrics(instances, when - timedelta(minutes=30), when)  # same cycle
    assert len(listed) == first == 3  # one discovery per GPU metric name
    clock.advance(timedelta(minutes=10))  # the next cycles, the same instances
    provider.gpu_metrics(instances, when, when + timedelta(minutes=1))
    assert len(listed) == first

    # an instance the listing was not taken for: listed again, and its series is found
    (new,) = run_instances(itype="g5.xlarge")
    _put([{"MetricName": GPU_UTIL, "Timestamp": when, "Value": 3.0,
           "Dimensions": [{"Name": "InstanceId", "Value": new["InstanceId"]}]}])
    more = provider.list_instances().instances
    rows = provider.gpu_metrics(more, when, when + timedelta(minutes=1))
    assert len(listed) == 2 * first
    assert {r.instance_id for r in rows} == {raw["InstanceId"], new["InstanceId"]}

    clock.advance(timedelta(minutes=59))
    provider.gpu_metrics(more, when, when + timedelta(minutes=1))
    assert len(listed) == 2 * first
    clock.advance(timedelta(minutes=1))  # an hour after that listing
    provider.gpu_metrics(more, when, when + timedelta(minutes=1))
    assert len(listed) == 3 * first


def test_rollup_by_instance_reads_the_instance_series_without_listing_them(
    make_provider: ProviderFactory, clock: ManualClock, session: boto3.Session
) -> None:
    # aggregation_dimensions [["InstanceId"]], measurement [utilization_gpu]: the series'
    # one dimension is known from the inventory
    small, quiet = run_instances(count=2, itype="g5.xlarge")
    (big,) = run_instances(itype="p4d.24xlarge")
    when = _minute(clock, 3)
    _put([{"MetricName": GPU_UTIL, "Timestamp": when, "Value": v,
           "Dimensions": [{"Name": "InstanceId", "Value": raw["InstanceId"]}]}
          for raw, v in ((small, 3.0), (big, 1.0), (big, 30.0))])
    settings = {"instance_dimension": True, "measurements": ["utilization_gpu"]}
    listed, fetched = _calls(session, "ListMetrics"), _calls(session, "GetMetricData")
    direct, instances = _inventory(make_provider, cloudwatch={**settings,
                                                              "rollup_by_instance": True})
    by_listing, _ = _inventory(make_provider, cloudwatch=settings)

    rows = direct.gpu_metrics(instances, when, when + timedelta(minutes=1))
    assert listed == []
    queried = sorted((q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"])
                     for q in fetched[0]["MetricDataQueries"])
    # one series per GPU instance (the one without an agent too), its Average and its
    # Maximum, and each one's host CPU
    assert queried == [("CPUUtilization", "Average")] * 3 + [(GPU_UTIL, "Average")] * 3 + [
        (GPU_UTIL, "Maximum")] * 3
    listed_rows = by_listing.gpu_metrics(instances, when, when + timedelta(minutes=1))
    assert len(listed) == 1  # one ListMetrics: utilization only, as measured
    assert [r.model_dump() for r in rows] == [r.model_dump() for r in listed_rows]
    assert quiet["InstanceId"] not in {r.instance_id for r in rows}  # no data is no rows


def test_rollup_by_instance_needs_instance_ids_and_utilisation() -> None:
    from pydantic import ValidationError

    from costguard.providers.aws.settings import CloudWatchSettings

    with pytest.raises(ValidationError, match="instance_dimension"):
        CloudWatchSettings(rollup_by_instance=True, instance_dimension=False)
    with pytest.raises(ValidationError, match="utilization_gpu"):
        CloudWatchSettings(measurements=["memory_used"])


def test_unset_max_span_asks_as_long_a_span_as_the_datapoint_limit_holds() -> None:
    """500 queries of 1-minute points: 100,800 / 500 = 201 minutes a call; 100 queries of
    5-minute points: 1,008 periods, so 6 hours is one call per 500 queries."""
    from costguard.providers.aws.metrics import get_metric_data

    asked: list[tuple[int, datetime, datetime]] = []

    class Recorder:
        def get_metric_data(self, **kw: Any) -> dict[str, Any]:
            asked.append((len(kw["MetricDataQueries"]), kw["StartTime"], kw["EndTime"]))
            return {"MetricDataResults": []}

    def queries(n: int, period: int) -> list[dict[str, Any]]:
        return [{"Id": f"q{k}", "MetricStat": {"Metric": {}, "Period": period,
                                                "Stat": "Average"}} for k in range(n)]

    t0 = datetime(2026, 11, 2, 6, 0, tzinfo=UTC)
    _, calls = get_metric_data(Recorder(), queries(500, 60), t0,  # type: ignore[arg-type]
                               t0 + timedelta(hours=6), "s")
    assert calls == 2 and [end - start for _, start, end in asked] == [
        timedelta(minutes=201), timedelta(minutes=159)]
    asked.clear()
    _, calls = get_metric_data(Recorder(), queries(600, 300), t0,  # type: ignore[arg-type]
                               t0 + timedelta(hours=6), "s")
    assert calls == 2 and [(n, end - start) for n, start, end in asked] == [
        (500, timedelta(hours=6)), (100, timedelta(hours=6))]


def _profiled(clock: ManualClock, every: int, profiles: dict[str, Any], over: int = 60
              ) -> None:
    """An agent's points every `every` minutes over the last `over`, each instance's value
    at `ago` minutes given by its profile."""
    _put([{"MetricName": GPU_UTIL, "Timestamp": _minute(clock, ago), "Value": value(ago),
           "Dimensions": [{"Name": "InstanceId", "Value": iid}]}
          for iid, value in profiles.items() for ago in range(every, over + 1, every)])


def _busy_ids(recent: list[Any]) -> set[str]:
    return {r.instance_id for r in recent if (r.util_max or 0.0) >= 5.0}


def test_a_first_cycles_window_is_read_once_keeping_what_two_reads_kept(
    make_provider: ProviderFactory, clock: ManualClock, session: boto3.Session
) -> None:
    # CloudWatch bills each metric every time a call requests it: the first cycle's hour is
    # asked once (one call, each metric once) where the quarter hour and then the rest of
    # the undecided took two; the older points of what the quarter hour decides (busy now)
    # are not built, as the second read never asked for them
    busy, idle, woke, dozed = (r["InstanceId"] for r in run_instances(count=4))
    _profiled(clock, 5, {busy: lambda ago: 60.0, idle: lambda ago: 1.0,
                         woke: lambda ago: 50.0 if ago <= 10 else 1.0,
                         dozed: lambda ago: 50.0 if ago > 30 else 1.0})
    settings = {"instance_dimension": True, "period_seconds": 300,
                "rollup_by_instance": True, "measurements": ["utilization_gpu"]}
    once, instances = _inventory(make_provider, cloudwatch=settings)
    twice, _ = _inventory(make_provider, cloudwatch=settings)
    assert isinstance(once, ReadsWindowOnce)
    end = _minute(clock, 0)
    start, mid = end - timedelta(hours=1), end - timedelta(minutes=15)
    handed: list[Any] = []
    fetched = _calls(session, "GetMetricData")

    rows = once.gpu_metrics_split(instances, start, end, mid,
                                  lambda recent: handed.extend(recent) or _busy_ids(recent))

    assert len(fetched) == 1 and once.get_metric_data_calls == 1
    assert handed and min(r.minute for r in handed) == mid  # the quarter hour, decided on
    recent = twice.gpu_metrics(instances, mid, end)
    undecided = [i for i in instances if i.instance_id not in _busy_ids(recent)]
    older = twice.gpu_metrics(undecided, start, mid)
    assert len(fetched) == 3  # two reads: two calls, the undecided's metrics asked twice
    assert ({(r.instance_id, r.minute, r.span_minutes, r.util_mean) for r in rows}
            == {(r.instance_id, r.minute, r.span_minutes, r.util_mean)
                for r in recent + older})
    first = {iid: min(r.minute for r in rows if r.instance_id == iid)
             for iid in (busy, idle, woke, dozed)}
    assert first == {busy: mid, woke: mid, idle: start, dozed: start}


def test_a_point_that_begins_before_the_quarter_hour_and_ends_inside_it_is_kept(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    # a window of 62 minutes: its 5-minute periods begin 2 minutes off the quarter hour, so
    # one spans its first minutes; kept (and decided on) with the recent ones, no minute of
    # the quarter hour goes uncovered
    busy = run_instances()[0]["InstanceId"]
    _profiled(clock, 1, {busy: lambda ago: 60.0}, over=62)
    provider, instances = _inventory(make_provider, cloudwatch={
        "instance_dimension": True, "period_seconds": 300, "rollup_by_instance": True,
        "measurements": ["utilization_gpu"]})
    end = _minute(clock, 0)
    start, mid = end - timedelta(minutes=62), end - timedelta(minutes=15)

    rows = provider.gpu_metrics_split(instances, start, end, mid, _busy_ids)

    covered = {t for r in rows for t in slots(r, start, end)}
    assert min(covered) == end - timedelta(minutes=17)  # the period that spans `mid`
    assert all(mid + timedelta(minutes=k) in covered for k in range(15))
