"""The Compute fake's list filter, through the real client: the regex form works, the rest
is refused (so code that starts to rely on more fails here, not in production)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp import GcpProvider


def _names(client: compute_v1.InstancesClient, expr: str) -> set[str]:
    request = compute_v1.AggregatedListInstancesRequest(project="ml-prod", filter=expr)
    return {vm.name for _, scoped in client.aggregated_list(request=request)
            for vm in scoped.instances}


def test_regex_filters_match_whole_names_and_other_forms_are_refused(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    for name, zone in (("vm-1", "us-central1-a"), ("vm-10", "us-central1-b"),
                       ("gpu-1", "us-central1-b")):
        fake.compute.add_instance("ml-prod", zone, name)
    client = make_provider().clients.instances
    assert _names(client, 'name eq "(vm-1|gpu-1)"') == {"vm-1", "gpu-1"}  # not vm-10
    assert _names(client, "name eq 'vm-.*'") == {"vm-1", "vm-10"}
    assert _names(client, "name ne vm-1") == {"vm-10", "gpu-1"}
    with pytest.raises(gexc.BadRequest):
        _names(client, "name = vm-1")


def test_monitoring_label_filters_select_series_and_other_forms_are_refused(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    """`metric.labels.KEY = "V"` (the Monitoring filter syntax's label equality) selects the
    series that have that value; a label function the fake cannot evaluate is refused."""
    from datetime import UTC, datetime, timedelta

    from google.cloud import monitoring_v3

    from costguard.demo.gcp_fake.monitoring import FakeSeries
    from costguard.providers.gcp.metrics import HOST_MEM, metric_filter
    from costguard.providers.gcp.series import aligned_request

    t0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    for state in ("used", "free", "cached"):
        fake.monitoring.series.append(FakeSeries(
            project="ml-prod", metric_type=HOST_MEM,
            resource_labels={"project_id": "ml-prod", "instance_id": "1",
                             "zone": "us-central1-a"},
            metric_labels={"state": state}, points=[(t0 + timedelta(seconds=30), 1.0)]))
    client = make_provider().clients.metrics
    aligner = monitoring_v3.Aggregation.Aligner.ALIGN_MAX

    def states(filter_: str) -> list[str]:
        request = aligned_request("ml-prod", filter_, aligner, t0, t0 + timedelta(minutes=1))
        return sorted(s.metric.labels["state"] for s in client.list_time_series(request=request))

    assert states(metric_filter(HOST_MEM)) == ["cached", "free", "used"]
    assert states(metric_filter(HOST_MEM, (("state", "used"),))) == ["used"]
    assert states(metric_filter(HOST_MEM, (("state", "slab"),))) == []
    with pytest.raises(gexc.InvalidArgument):
        states(metric_filter(HOST_MEM) +
               ' AND metric.labels.state = monitoring.regex.full_match("u.*")')
