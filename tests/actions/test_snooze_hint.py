"""A warning says how to snooze what it names, as a person writes it on that resource: a
tag on an instance, an annotation on a Kubernetes workload (providers.base.TAG_SPELLINGS)."""

from __future__ import annotations

from datetime import UTC, datetime

from costguard.actions.messages import snooze_hint
from costguard.model import Instance, InstanceState

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def _inst(provider: str, iid: str) -> Instance:
    return Instance(provider=provider, account="a", region="r", instance_id=iid,  # type: ignore[arg-type]
                    instance_type="t", state=InstanceState.RUNNING, launch_time=NOW,
                    observed_at=NOW)


def test_an_instance_is_snoozed_by_its_tag() -> None:
    hint = snooze_hint(_inst("aws", "i-0123456789abcdef0"))
    assert hint.endswith("or set tag costguard:snooze-until=<ISO time>")
    assert "`costguard snooze i-0123456789abcdef0 --for 4h" in hint


def test_a_workload_is_snoozed_by_its_annotation() -> None:
    import costguard.k8s.workloads  # noqa: F401 (registers how a workload is tagged)

    hint = snooze_hint(_inst("k8s", "ml-prod/serving/Deployment/chat-infer"))
    assert hint.endswith("or set annotation costguard.io/snooze-until=<ISO time>")
