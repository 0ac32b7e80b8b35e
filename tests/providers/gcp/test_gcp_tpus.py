"""Cloud TPU nodes: the real `google-cloud-tpu` client over REST against the fake's TPU API
(shapes from the v2 REST reference), TPU readings from the Monitoring fake's `tpu_worker`
series, and the catalog."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.actions.safety import pet_refusal
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import ActionOutcome, InstanceState, Lifecycle, OwnerKind
from costguard.providers.gcp import GcpProvider, tpus
from costguard.providers.gcp.gpus import detect
from costguard.providers.gcp.tpu_metrics import IDLE, TENSORCORE, busy_percent
from tests.providers.gcp.conftest import NOW

P, Z = "ml-prod", "us-central1-a"


@pytest.mark.parametrize(("accelerator_type", "chips", "hosts", "model"), [
    ("v5litepod-1", 1, 1, "TPU v5e"),
    ("v5litepod-8", 8, 1, "TPU v5e"),  # v5e counts chips: eight on one host
    ("v5litepod-16", 16, 4, "TPU v5e"),
    ("v4-8", 4, 1, "TPU v4"),  # v4 counts TensorCores, two to a chip
    ("v4-32", 16, 4, "TPU v4"),
    ("v5p-8", 4, 1, "TPU v5p"),
    ("v6e-8", 8, 1, "TPU v6e"),
    ("v6e-16", 16, 4, "TPU v6e"),
    ("v2-8", 4, 1, "TPU v2"),
    ("v3-32", 16, 4, "TPU v3"),
])
def test_accelerator_types_give_chips_and_hosts(accelerator_type: str, chips: int, hosts: int,
                                                model: str) -> None:
    shape = tpus.shape(accelerator_type)
    assert shape is not None
    assert (shape.chips, shape.hosts, shape.generation.model) == (chips, hosts, model)


def test_topology_and_listed_hosts_win_over_the_name() -> None:
    # Ironwood's name is not parsed (what its number counts was not confirmed): topology is
    assert tpus.shape("tpu7x-8") is None
    shape = tpus.shape("tpu7x-8", topology="2x2x1", config_type="TPU7X")
    assert shape is not None and (shape.chips, shape.generation.model) == (4, "TPU7x")
    listed = tpus.shape("v5litepod-16", hosts=2)
    assert listed is not None and listed.hosts == 2
    assert tpus.shape("v5litepod-8", topology="2x4") == tpus.shape("v5litepod-8")


def test_only_tpu_types_read_as_tpus() -> None:
    for name in ("v5litepod-8", "v6e-16", "tpu7x-8", "v9z-4"):
        assert tpus.is_tpu_type(name), name
    for name in ("n1-standard-8", "a3-highgpu-8g", "ct5lp-hightpu-4t", "g2-standard-4", ""):
        assert not tpus.is_tpu_type(name), name


def test_gke_tpu_hosts_count_their_chips() -> None:
    for machine_type, chips, model in (("ct5lp-hightpu-4t", 4, "TPU v5e"),
                                       ("ct5lp-hightpu-8t", 8, "TPU v5e"),
                                       ("ct6e-standard-4t", 4, "TPU v6e"),
                                       ("ct5p-hightpu-4t", 4, "TPU v5p"),
                                       ("ct4p-hightpu-4t", 4, "TPU v4")):
        found = detect(machine_type, [])
        assert found is not None and found.spec is not None
        assert (found.count, found.spec.model) == (chips, model), machine_type


def test_every_generation_is_sourced_and_priced_or_said_unpriced() -> None:
    table = tpus.load_table()
    assert table["as_of"] and "cloud.google.com/tpu/pricing" in table["price_source"]
    for gen in tpus.generations():
        assert gen.hbm_mib_per_chip > 0 and gen.chips_per_host > 0
        if gen.usd_per_chip_hour is None:  # unpriced: the source says why, by name
            assert gen.model in table["price_source"]
    assert tpus.list_price("TPU v5e", 8) == pytest.approx(9.6)
    assert tpus.list_price("TPU7x", 4) is None  # no public rate: unpriced, not guessed
    assert tpus.list_price("H100", 8) is None


def test_nodes_are_listed_across_zones_priced_and_owned(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    compute = fake.compute
    compute.add_instance(P, Z, "gpu-vm", "a2-highgpu-1g")
    compute.add_tpu_node(P, Z, "v5e-dev", "v5litepod-8", labels={"team": "nlp"},
                         topology="2x4", service_account="tpu@ml-prod.iam.gserviceaccount.com",
                         created=NOW - timedelta(days=2))
    compute.add_tpu_node(P, "us-west4-a", "v5e-slice", "v5litepod-16", hosts=4)
    compute.add_tpu_node(P, "us-east5-b", "queued", "v6e-4", queued_resource="qr-1")
    compute.add_tpu_node(P, "us-east5-b", "cheap", "v6e-1", spot=True)
    compute.add_tpu_node(P, "us-east5-b", "held", "v5p-8", reserved=True, state="STOPPED")
    inv = make_provider(page_size=2).list_instances()  # pages of two nodes
    assert inv.gaps == []
    by_name = {i.name: i for i in inv.instances}
    assert set(by_name) == {"gpu-vm", "v5e-dev", "v5e-slice", "queued", "cheap", "held"}
    dev = by_name["v5e-dev"]
    assert (dev.instance_type, dev.gpu_count, dev.gpu_model, dev.gpu_memory_mib) == (
        "v5litepod-8", 8, "TPU v5e", 16 * 1024)
    assert (dev.zone, dev.region, dev.state, dev.owner) == (
        Z, "us-central1", InstanceState.RUNNING, None)
    assert dev.tags == {"team": "nlp"}
    assert dev.launched_by == "tpu@ml-prod.iam.gserviceaccount.com"
    assert dev.launch_time == NOW - timedelta(days=2)
    provider = make_provider()
    quote = provider.price(dev)
    assert quote is not None and quote.usd_per_hour == pytest.approx(8 * 1.2)
    assert "TPU v5e" in quote.source
    slice_ = by_name["v5e-slice"]
    assert slice_.owner is not None and slice_.owner.kind is OwnerKind.TPU_SLICE
    assert "4 hosts" in slice_.owner.via and slice_.gpu_count == 16
    queued = by_name["queued"]
    assert queued.owner is not None and queued.owner.kind is OwnerKind.TPU_QUEUED_RESOURCE
    assert queued.owner.name == "qr-1"
    assert by_name["cheap"].lifecycle is Lifecycle.SPOT
    assert provider.price(by_name["cheap"]) is None  # no spot rate shipped: not guessed
    held = by_name["held"]
    assert (held.lifecycle, held.state) == (Lifecycle.CAPACITY_BLOCK, InstanceState.STOPPED)
    assert compute.calls["GET tpu_list"] == 3  # five nodes, two a page


def test_a_project_without_the_tpu_api_has_no_tpus_and_no_gap(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_instance(P, Z, "gpu-vm", "a2-highgpu-1g")
    fake.compute.tpu_disabled.add(P)
    inv = make_provider().list_instances()
    assert [i.name for i in inv.instances] == ["gpu-vm"] and inv.gaps == []


def test_an_unreadable_tpu_listing_is_a_gap_of_its_own(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_instance(P, Z, "gpu-vm", "a2-highgpu-1g")
    fake.compute.inject(403, times=1, path_contains="/nodes")
    inv = make_provider().list_instances()
    assert [i.name for i in inv.instances] == ["gpu-vm"]
    assert [g.scope for g in inv.gaps] == [f"{P}/tpu"]
    assert "permission denied in project ml-prod" in inv.gaps[0].error


def test_tpus_false_lists_no_tpus(fake: FakeGcp,
                                  make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_tpu_node(P, Z, "v5e-dev", "v5litepod-8")
    assert make_provider(tpus=False).list_instances().instances == []
    assert fake.compute.calls["GET tpu_list"] == 0


def test_a_single_host_node_is_stopped_started_and_labelled(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_tpu_node(P, Z, "v5e-dev", "v5litepod-8")
    provider = make_provider()
    node = provider.list_instances().instances[0]
    dry = provider.stop(node, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and "would stop TPU node v5e-dev" in dry.detail
    assert fake.compute.tpu_node(P, Z, "v5e-dev").state == "READY"
    done = provider.stop_many([node], dry_run=False)[node.instance_id]
    assert done.outcome is ActionOutcome.DONE and done.state_after is InstanceState.STOPPED
    assert fake.compute.tpu_node(P, Z, "v5e-dev").state == "STOPPED"
    again = provider.stop(node, dry_run=False)  # stopped already: nothing to do
    assert again.outcome is ActionOutcome.SKIPPED and "STOPPED" in again.detail
    labelled = provider.set_tags_many([node], {"costguard:stopped-by": "idle-tpus"},
                                      dry_run=False)[node.instance_id]
    assert labelled.outcome is ActionOutcome.DONE
    assert fake.compute.tpu_node(P, Z, "v5e-dev").labels == {"costguard_stopped-by": "idle-tpus"}
    started = provider.start(node, dry_run=False)
    assert started.outcome is ActionOutcome.DONE
    assert fake.compute.tpu_node(P, Z, "v5e-dev").state == "READY"
    seen = provider.describe_many([node])[node.instance_id]
    assert seen is not None and seen.state is InstanceState.RUNNING
    assert provider.terminate(node, snapshot=True, dry_run=False).outcome is ActionOutcome.SKIPPED
    assert fake.compute.tpu_node(P, Z, "v5e-dev").state == "READY"  # never deleted


def test_a_node_recreated_under_its_name_is_left_alone(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_tpu_node(P, Z, "v5e-dev", "v5litepod-8")
    provider = make_provider()
    node = provider.list_instances().instances[0]
    fake.compute.add_tpu_node(P, Z, "v5e-dev", "v5litepod-8")  # a new node, same name
    result = provider.stop(node, dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED and "recreated" in result.detail
    assert fake.compute.calls["POST tpu_stop"] == 0


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["v5litepod", "v6e", "v4", "v5p"]),
       hosts=st.integers(min_value=2, max_value=16), queued=st.booleans())
def test_a_multi_host_slice_is_never_acted_on_in_part(kind: str, hosts: int,
                                                      queued: bool) -> None:
    """As for managed groups: a slice (or a queued resource's node) is refused by the safety
    rule before any call, and the provider's own last check refuses it too."""
    chips = hosts * 4
    name = f"{kind}-{chips * (2 if kind in ('v4', 'v5p') else 1)}"
    with FakeGcp() as fake:
        fake.compute.add_tpu_node(P, Z, "big", name, hosts=hosts,
                                  queued_resource="qr" if queued else "")
        provider = GcpProvider(fake.settings(projects=[P]))
        try:
            node = provider.list_instances().instances[0]
            assert node.owner is not None
            for verb in ("stop", "start", "terminate"):
                refusal = pet_refusal(node, verb)
                assert refusal is not None and "refused" in refusal
            for result in (provider.stop(node, dry_run=False),
                           provider.stop_many([node], dry_run=False)[node.instance_id]):
                assert result.outcome is ActionOutcome.SKIPPED
                assert "not acted on as if it were alone" in result.detail
            assert fake.compute.calls["POST tpu_stop"] == 0
            assert fake.compute.tpu_node(P, Z, "big").state == "READY"
        finally:
            provider.close()


def test_idle_duration_reads_as_the_busy_share_of_a_minute() -> None:
    assert busy_percent(0) == 100.0
    assert busy_percent(30) == 50.0
    assert busy_percent(60) == 0.0
    assert busy_percent(86_400) == 0.0  # idle all day
    assert busy_percent(-5) == 100.0


def test_chip_minutes_come_from_tpu_worker_series(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_tpu_node(P, Z, "idle-v5e", "v5litepod-8")
    fake.compute.add_tpu_node(P, "us-west4-a", "busy-slice", "v5litepod-16", hosts=4)
    provider = make_provider()
    nodes = {i.name: i for i in provider.list_instances().instances}
    start = NOW - timedelta(minutes=10)
    minutes = [NOW - timedelta(minutes=m, seconds=-1) for m in range(9, 0, -1)]
    for chip in range(8):  # idle for hours: the idle duration only grows
        fake.monitoring.add_tpu_series(P, IDLE, "idle-v5e", [
            (t, 7200 + 60 * i) for i, t in enumerate(minutes)], chip=chip, integer=True)
    fake.monitoring.add_tpu_series(P, IDLE, "busy-slice", [(t, 0) for t in minutes],
                                   zone="us-west4-a", worker=3, chip=2, integer=True)
    fake.monitoring.add_tpu_series(P, TENSORCORE, "busy-slice", [(t, 71.5) for t in minutes],
                                   zone="us-west4-a", worker=3, chip=2,
                                   chip_label="accelerator_id")
    # a series of a node costguard does not know, and a chip number no host has: left out
    fake.monitoring.add_tpu_series(P, IDLE, "someone-else", [(minutes[0], 0)])
    fake.monitoring.add_tpu_series(P, IDLE, "idle-v5e", [(minutes[0], 0)], chip=8)
    readings = provider.gpu_metrics(list(nodes.values()), start, NOW)
    idle = [r for r in readings if r.instance_id == nodes["idle-v5e"].instance_id]
    assert {r.gpu_index for r in idle} == set(range(8))
    assert all(r.util_max == 0.0 and r.util_mean == 0.0 for r in idle)
    busy = [r for r in readings if r.instance_id == nodes["busy-slice"].instance_id]
    assert {r.gpu_index for r in busy} == {3 * 4 + 2}  # worker 3, chip 2, four a host
    assert all(r.util_max == 100.0 and r.sm_max == 71.5 for r in busy)
    assert {r.instance_id for r in readings} == {n.instance_id for n in nodes.values()}
    tpu_calls = {t for t in fake.monitoring.calls if t.startswith("tpu.googleapis.com")}
    assert tpu_calls == {IDLE, TENSORCORE}


def test_projects_without_tpus_ask_for_no_tpu_metrics(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_instance(P, Z, "gpu-vm", "a2-highgpu-1g")
    provider = make_provider()
    provider.gpu_metrics(provider.list_instances().instances, NOW - timedelta(minutes=5), NOW)
    assert not [t for t in fake.monitoring.calls if t.startswith("tpu.googleapis.com")]


def test_every_tpu_type_the_client_knows_is_in_the_catalog() -> None:
    """The Cloud TPU client's AcceleratorConfig.Type lists the generations the API serves:
    each has a catalog row (a newer client with a type the table lacks fails here)."""
    from google.cloud import tpu_v2

    served = {name for name in tpu_v2.AcceleratorConfig.Type.__members__
              if name != "TYPE_UNSPECIFIED"}
    assert served <= {g.config_type for g in tpus.generations()}


def test_a_generation_the_catalog_does_not_know_is_listed_without_chips(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider],
        caplog: pytest.LogCaptureFixture) -> None:
    fake.compute.add_tpu_node(P, Z, "future", "v9x-8")
    (node,) = make_provider().list_instances().instances
    assert (node.instance_type, node.gpu_count, node.gpu_model) == ("v9x-8", 0, None)
    assert not node.has_gpu  # never judged idle, never stopped as idle
    assert "'v9x-8' is not in costguard's TPU catalog" in caplog.text


@pytest.mark.parametrize(("accelerator_type", "topology"), [
    ("v5litepod-" + "9" * 5000, ""),  # past int()'s digit limit: never parsed
    ("v5litepod-8", "999999x999999x999999"),  # more chips than any pod
    ("v5litepod-8", "0x4"),
    ("v5litepod-0", ""),
    ("v4-99999998", ""),
])
def test_absurd_types_and_topologies_are_not_believed(accelerator_type: str,
                                                      topology: str) -> None:
    shape = tpus.shape(accelerator_type, topology=topology)
    if shape is not None:  # the name alone can still say it (v5litepod-8)
        assert shape.chips == 8 and accelerator_type == "v5litepod-8"
    assert tpus.from_machine_type("ct5lp-hightpu-" + "9" * 5000 + "t") is None


def test_readings_of_a_host_or_chip_the_node_lacks_are_left_out(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_tpu_node(P, Z, "dev", "v5litepod-8")
    provider = make_provider()
    nodes = provider.list_instances().instances
    at = [NOW - timedelta(minutes=2, seconds=-30)]
    fake.monitoring.add_tpu_series(P, IDLE, "dev", [(at[0], 0)], worker=1)  # no host 1
    fake.monitoring.add_tpu_series(P, IDLE, "dev", [(at[0], 0)], worker=2**40)
    fake.monitoring.add_tpu_series(P, IDLE, "dev", [(at[0], 0)], chip=3)
    readings = provider.gpu_metrics(nodes, NOW - timedelta(minutes=5), NOW)
    assert [(r.gpu_index, r.util_max) for r in readings] == [(3, 100.0)]


def test_a_node_counted_from_its_topology_is_read_too(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    """TPU7x's type number is not parsed: its chips come from the topology, and its chips'
    readings are matched on the chips inventory counted, not on the type's name."""
    fake.compute.add_tpu_node(P, Z, "ironwood", "tpu7x-8", topology="2x2x1")
    provider = make_provider()
    (node,) = provider.list_instances().instances
    assert (node.gpu_count, node.gpu_model) == (4, "TPU7x")
    at = NOW - timedelta(minutes=2, seconds=-30)
    for chip in range(4):
        fake.monitoring.add_tpu_series(P, IDLE, "ironwood", [(at, 9000)], chip=chip)
    readings = provider.gpu_metrics([node], NOW - timedelta(minutes=5), NOW)
    assert sorted((r.gpu_index, r.util_max) for r in readings) == [(c, 0.0) for c in range(4)]
