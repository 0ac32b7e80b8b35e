"""What the instance pipeline's match (policy/evaluate.py) selects across kinds of resource:
a policy selects only machines of its kind (an instance policy instances, a notebook policy
notebooks, a workload policy workloads), a volume, snapshot or address policy no machine,
whatever its filters; and the one tag and age match instances and storage share, at its
edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.model import Instance, InstanceKind, InstanceState
from costguard.policy.evaluate import age_matches, matches, tags_match
from costguard.policy.filters import AgeFilter, TagFilter
from costguard.policy.kinds import KINDS
from costguard.policy.load import parse_policy_text

NOW = datetime(2026, 12, 1, tzinfo=UTC)
INST = Instance(provider="sim", account="1", region="r", instance_id="i-1",
                instance_type="g5.xlarge", state=InstanceState.RUNNING, gpu_count=1,
                launch_time=NOW - timedelta(days=3), tags={"team": "ml"}, observed_at=NOW)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_policy_selects_only_machines_of_its_kind(kind: str) -> None:
    (policy,) = parse_policy_text(KINDS[kind].example, "p.yml").policies
    bare = policy.model_copy(update={"providers": ("sim",), "filters": type(policy.filters)()})
    # (a workload policy's providers are k8s's; given the machine's, only its kind counts)
    for machine in InstanceKind:
        inst = INST.model_copy(update={"kind": machine})
        assert matches(bare, inst, NOW) is (kind == machine), machine


@pytest.mark.parametrize(("tags", "ok"), [
    ({"team": "ml", "env": "dev"}, True), ({"team": "ml"}, False),  # env must be present
    ({"team": "ml", "env": "dev", "costguard:protect": "no"}, False),  # absent key present
    ({"team": "ml", "env": "prod"}, False),  # a value not accepted
])
def test_tags_match(tags: dict[str, str], ok: bool) -> None:
    t = TagFilter(present=("env",), absent=("costguard:protect",), values={"env": ("dev",)})
    assert tags_match(t, tags) is ok


@pytest.mark.parametrize(("age", "ok"), [
    (timedelta(hours=1), False), (timedelta(hours=2), True), (timedelta(days=1), True),
    (timedelta(days=3), False), (timedelta(days=4), False)])
def test_age_matches_at_its_edges(age: timedelta, ok: bool) -> None:
    assert age_matches(AgeFilter(older_than=timedelta(hours=2),
                                 younger_than=timedelta(days=3)), age) is ok


@pytest.mark.parametrize(("namespace", "ok"), [("team-vision", True), ("ops", False)])
def test_a_workload_policy_selects_by_namespace_pattern(namespace: str, ok: bool) -> None:
    """A workload is an instance of the k8s provider whose region is its namespace."""
    (policy,) = parse_policy_text(KINDS["workload"].example, "p.yml").policies
    pod = INST.model_copy(update={"provider": "k8s", "region": namespace,
                                  "instance_type": "Deployment",
                                  "kind": InstanceKind.WORKLOAD})
    assert matches(policy, pod, NOW) is ok
