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
