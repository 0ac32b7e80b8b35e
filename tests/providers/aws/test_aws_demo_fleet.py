"""The packaged demo fleet: the AWS provider reads it end to end inside moto's mock."""

from __future__ import annotations

from datetime import timedelta
from statistics import mean

from costguard.clock import ManualClock
from costguard.demo.aws_fleet import start_demo_fleet
from costguard.model import InstanceKind, Lifecycle
from costguard.providers.aws import AwsProvider


def test_demo_fleet_is_read_with_gpu_metrics_in_both_layouts(clock: ManualClock) -> None:
    with start_demo_fleet(clock, n=40, minutes=30) as fleet:
        provider = AwsProvider(fleet.settings, clock=clock)
        provider.govern(frozenset({"instance", "notebook"}))  # as the shipped policies do
        inventory = provider.list_instances()
        gpus = [i for i in inventory.instances if i.has_gpu]
        rows = provider.gpu_metrics(gpus, clock.now() - timedelta(minutes=20), clock.now())
        quotes = [provider.price(i) for i in inventory.instances]

    # 40 EC2 instances and a SageMaker notebook left open
    assert len(inventory.instances) == 41 and inventory.gaps == []
    (notebook,) = [i for i in inventory.instances if i.kind is InstanceKind.NOTEBOOK]
    assert (notebook.name, notebook.gpu_count) == ("research-notebook", 1)
    assert {i.region for i in inventory.instances} == set(fleet.regions)
    assert {i.instance_id for i in gpus} == set(fleet.profiles)
    assert Lifecycle.SPOT in {i.lifecycle for i in inventory.instances}
    util: dict[str, list[float]] = {}
    for r in rows:
        assert r.util_mean is not None and r.mem_total_bytes and r.mem_used_bytes is not None
        util.setdefault(r.instance_id, []).append(r.util_mean)
    reporting = {i for i, p in fleet.profiles.items() if p != "no-agent"}
    assert set(util) == reporting
    for iid, values in util.items():
        assert (mean(values) < 5) == (fleet.profiles[iid] in ("idle", "went-idle"))
    # every EC2 type is priced; a SageMaker ML type is not (docs/notebooks.md, Prices)
    assert [i.instance_id for i, q in zip(inventory.instances, quotes, strict=True)
            if q is None] == [notebook.instance_id]
