"""launched_by on GCP: the VM's service account email from the listing itself."""

from __future__ import annotations

from collections.abc import Callable

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp import GcpProvider


def test_launched_by_is_the_service_account_email(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    sa = "trainer@ml-prod.iam.gserviceaccount.com"
    fake.compute.add_instance("ml-prod", "us-central1-a", "a", service_account=sa)
    fake.compute.add_instance("ml-prod", "us-central1-a", "b")

    seen = {i.name: i for i in make_provider().list_instances().instances}

    assert seen["a"].launched_by == sa
    assert seen["b"].launched_by is None
    assert fake.compute.calls["GET aggregated_list"] == 1  # nothing asked beyond the listing
