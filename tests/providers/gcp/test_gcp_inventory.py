"""Inventory through the real google-cloud-compute client against the local REST fake."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import InstanceState, Lifecycle
from costguard.providers.base import Provider
from costguard.providers.gcp import GcpProvider


def test_gcp_provider_satisfies_the_provider_protocol(
    make_provider: Callable[..., GcpProvider],
) -> None:
    assert isinstance(make_provider(), Provider)


def test_inventory_pages_through_every_zone(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    zones = ["us-central1-a", "us-central1-b", "europe-west4-a", "asia-southeast1-c"]
    for i in range(23):
        fake.compute.add_instance("ml-prod", zones[i % 4], f"vm-{i:02d}")
    inv = make_provider(page_size=5).list_instances()
    assert inv.gaps == []
    assert sorted(i.name or "" for i in inv.instances) == [f"vm-{i:02d}" for i in range(23)]
    assert fake.compute.calls["GET aggregated_list"] == 5  # 23 instances / 5 per page
    by_name = {i.name: i for i in inv.instances}
    assert by_name["vm-02"].zone == "europe-west4-a"
    assert by_name["vm-02"].region == "europe-west4"
    assert by_name["vm-03"].region == "asia-southeast1"


def test_instance_fields_are_mapped_from_the_api(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    created = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    vm = fake.compute.add_instance(
        "ml-prod",
        "us-east1-b",
        "trainer",
        "n1-standard-8",
        labels={"team": "vision", "owner": "ana"},
        created=created,
    )
    (inst,) = make_provider().list_instances().instances
    assert inst.instance_id == str(vm.id)  # the numeric id, as Cloud Monitoring names it
    assert inst.name == "trainer"
    assert inst.account == "ml-prod"
    assert inst.instance_type == "n1-standard-8"
    assert inst.tags == {"team": "vision", "owner": "ana"}
    assert inst.launch_time == created
    assert inst.state == InstanceState.RUNNING
    assert inst.lifecycle == Lifecycle.ON_DEMAND
    assert inst.gpu_count == 0 and not inst.has_gpu


def test_launch_time_is_the_last_start_as_on_ec2(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    # lastStartTimestamp, as EC2's LaunchTime: a VM created in March and started an hour
    # ago has run an hour (`running_longer_than`, `explain`'s age, the re-check before a
    # stop); stopped, it keeps its last start; never started, its creation
    created = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    started = datetime(2026, 11, 29, 6, 0, 1, 250000, tzinfo=UTC)
    c = fake.compute
    c.add_instance("ml-prod", "us-east1-b", "restarted", created=created, last_start=started)
    c.add_instance("ml-prod", "us-east1-b", "stopped", created=created, last_start=started,
                   status="TERMINATED")
    c.add_instance("ml-prod", "us-east1-b", "never", created=created, status="TERMINATED")
    c.add_instance("ml-prod", "us-east1-b", "running", created=created)
    got = {i.name: i.launch_time for i in make_provider().list_instances().instances}
    assert got == {"restarted": started, "stopped": started, "never": created,
                   "running": created}


def test_a_reservation_bound_vm_is_a_capacity_block(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    # provisioningModel RESERVATION_BOUND: a calendar-mode reservation's VM, paid for the
    # reservation's time whether it runs or not; FLEX_START is priced as on-demand
    c = fake.compute
    for name, model in (("bound", "RESERVATION_BOUND"), ("flex", "FLEX_START"),
                        ("standard", "STANDARD"), ("spot", "SPOT")):
        c.add_instance("ml-prod", "us-east1-b", name, "a3-highgpu-8g").provisioning_model = model
    got = {i.name: i.lifecycle for i in make_provider().list_instances().instances}
    assert got == {"bound": Lifecycle.CAPACITY_BLOCK, "flex": Lifecycle.ON_DEMAND,
                   "standard": Lifecycle.ON_DEMAND, "spot": Lifecycle.SPOT}


def test_statuses_map_to_costguard_states(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    expected = {
        "RUNNING": InstanceState.RUNNING,
        "STAGING": InstanceState.PENDING,
        "STOPPING": InstanceState.STOPPING,
        "TERMINATED": InstanceState.STOPPED,
        "SUSPENDED": InstanceState.STOPPED,
        "SUSPENDING": InstanceState.STOPPING,
    }
    for status in expected:
        fake.compute.add_instance("ml-prod", "us-central1-a", status.lower(), status=status)
    got = {i.name: i.state for i in make_provider().list_instances().instances}
    assert got == {s.lower(): state for s, state in expected.items()}


def test_spot_and_preemptible_vms_are_spot(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "spot", spot=True)
    fake.compute.add_instance("ml-prod", "us-central1-a", "preempt", preemptible=True)
    fake.compute.add_instance("ml-prod", "us-central1-a", "standard")
    got = {i.name: i.lifecycle for i in make_provider().list_instances().instances}
    assert got == {
        "spot": Lifecycle.SPOT,
        "preempt": Lifecycle.SPOT,
        "standard": Lifecycle.ON_DEMAND,
    }


def test_gpus_come_from_guest_accelerators_and_from_machine_types(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance(
        "ml-prod",
        "us-central1-a",
        "n1-t4x2",
        "n1-standard-16",
        accelerators=[("nvidia-tesla-t4", 2)],
    )
    fake.compute.add_instance("ml-prod", "us-central1-a", "a2-4", "a2-highgpu-4g")
    fake.compute.add_instance("ml-prod", "us-central1-a", "a2u-8", "a2-ultragpu-8g")
    fake.compute.add_instance("ml-prod", "us-central1-a", "a3", "a3-highgpu-8g")
    fake.compute.add_instance("ml-prod", "us-central1-a", "g2-48", "g2-standard-48")
    fake.compute.add_instance("ml-prod", "us-central1-a", "g2-32", "g2-standard-32")
    # An A2 whose API answer lists its accelerators too: counted once, not twice.
    fake.compute.add_instance(
        "ml-prod",
        "us-central1-a",
        "a2-listed",
        "a2-highgpu-2g",
        accelerators=[("nvidia-tesla-a100", 2)],
    )
    got = {
        i.name: (i.gpu_count, i.gpu_model, i.gpu_memory_mib)
        for i in make_provider().list_instances().instances
    }
    assert got == {
        "n1-t4x2": (2, "T4", 16 * 1024),
        "a2-4": (4, "A100", 40 * 1024),
        "a2u-8": (8, "A100", 80 * 1024),
        "a3": (8, "H100", 80 * 1024),
        "g2-48": (4, "L4", 24 * 1024),
        "g2-32": (1, "L4", 24 * 1024),
        "a2-listed": (2, "A100", 40 * 1024),
    }


def test_forbidden_and_disabled_projects_are_gaps_while_others_are_listed(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "visible")
    fake.compute.add_instance("locked-proj", "us-central1-a", "hidden")
    fake.compute.add_instance("no-api-proj", "us-central1-a", "hidden-too")
    fake.compute.forbid_project("locked-proj")
    fake.compute.forbid_project("no-api-proj", api_disabled=True)
    inv = make_provider(projects=["ml-prod", "locked-proj", "no-api-proj"]).list_instances()
    assert [i.name for i in inv.instances] == ["visible"]
    gaps = {g.scope: g.error for g in inv.gaps}
    assert set(gaps) == {"locked-proj", "no-api-proj"}
    assert "permission denied" in gaps["locked-proj"]
    assert "deploy/iam/gcp/costguard-role.yaml" in gaps["locked-proj"]
    assert (
        "gcloud services enable compute.googleapis.com --project no-api-proj" in gaps["no-api-proj"]
    )


def test_throttling_is_retried_until_the_listing_succeeds(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "vm")
    fake.compute.inject(429, times=2, path_contains="/aggregated/")
    fake.compute.inject(503, times=1, path_contains="/aggregated/")
    inv = make_provider().list_instances()
    assert inv.gaps == []
    assert [i.name for i in inv.instances] == ["vm"]
    assert fake.compute.calls["GET injected-429"] == 2
    assert fake.compute.calls["GET injected-503"] == 1


def test_throttling_that_never_ends_becomes_a_gap_not_a_crash(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "vm")
    fake.compute.add_instance("ml-other", "us-central1-a", "other")
    fake.compute.inject(429, times=10_000, path_contains="/projects/ml-prod/")
    retry = {"initial_s": 0.01, "maximum_s": 0.02, "deadline_s": 0.3}
    inv = make_provider(projects=["ml-prod", "ml-other"], retry=retry).list_instances()
    assert [i.name for i in inv.instances] == ["other"]
    assert [g.scope for g in inv.gaps] == ["ml-prod"]
    assert "retries" in inv.gaps[0].error


def test_projects_under_a_folder_are_discovered_recursively(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.folders = {"folders/100": ["folders/200"]}
    fake.compute.folder_projects = {"folders/100": ["team-a"], "folders/200": ["team-b"]}
    fake.compute.add_instance("team-a", "us-central1-a", "a")
    fake.compute.add_instance("team-b", "us-central1-a", "b")
    fake.compute.add_instance("ml-prod", "us-central1-a", "p")
    provider = make_provider(projects=["ml-prod"], folder="folders/100")
    assert provider.projects() == (["ml-prod", "team-a", "team-b"], [])
    assert sorted(i.name or "" for i in provider.list_instances().instances) == ["a", "b", "p"]


def test_project_discovery_retries_throttling_and_an_unreadable_folder_is_one_gap(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.folders = {"organizations/7": ["folders/300"]}
    fake.compute.folder_projects = {"organizations/7": ["org-a"], "folders/300": ["org-b"]}
    fake.compute.inject(429, times=2, path_contains="/v3/projects")
    fake.compute.inject(503, times=1, path_contains="/v3/folders")
    provider = make_provider(projects=["ml-prod"], organization="organizations/7")
    assert provider.projects() == (["ml-prod", "org-a", "org-b"], [])
    assert fake.compute.calls["GET injected-429"] == 2
    assert fake.compute.calls["GET injected-503"] == 1

    fake.compute.inject(403, times=1, path_contains="/v3/projects")
    names, gaps = provider.projects()
    assert names == ["ml-prod", "org-b"]  # the organization's own listing failed, not below
    assert [g.scope for g in gaps] == ["organizations/7"]
    assert "resourcemanager.projects.list" in gaps[0].error
