"""costguard's own keys work on GCE, whose label keys cannot contain ':'."""

from __future__ import annotations

from datetime import UTC, datetime

from costguard.actions.safety import is_protected, snoozed_until
from costguard.model import Instance, InstanceState
from costguard.providers.gcp.actions import label_key
from costguard.providers.gcp.inventory import labels_as_tags


def _inst(tags: dict[str, str]) -> Instance:
    now = datetime(2026, 11, 23, tzinfo=UTC)
    return Instance(provider="gcp", account="ml-prod", region="us-central1", instance_id="1",
                    instance_type="a2-highgpu-1g", state=InstanceState.RUNNING, launch_time=now,
                    observed_at=now, tags=tags)


def test_costguard_labels_read_back_as_the_tags_policies_name() -> None:
    tags = labels_as_tags({label_key("costguard:protect"): "true", "team": "research"})
    assert tags == {"costguard:protect": "true", "team": "research"}
    assert is_protected(_inst(tags))


def test_a_label_safe_snooze_time_is_understood() -> None:
    tags = labels_as_tags({"costguard_snooze-until": "2026-11-23t14-30z"})
    assert snoozed_until(_inst(tags)) == datetime(2026, 11, 23, 14, 30, tzinfo=UTC)
    assert snoozed_until(_inst({"costguard:snooze-until": "not a time"})) is None
