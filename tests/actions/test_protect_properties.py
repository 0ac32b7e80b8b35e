"""costguard:protect, widened (hypothesis): every spelling of the value, the GCP label form,
stop and terminate, the Slack "stop now" path, and a tag set after the stop. Whatever the
policy, a protected instance is never stopped, started or terminated."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costguard.alerts.snooze import NothingToSnooze, request_stop
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.policy.load import parse_policy_text
from costguard.providers.gcp.inventory import labels_as_tags
from costguard.store.db import Database
from tests.fakes.cloud import IDLE, OWNER_TAGS, T0, full_cloud

SPELLINGS = ["true", "True", "TRUE", "yes", "1", "on", "keep", "", "false", "False", "FALSE",
             "0", "no", "No", "off", "OFF", " off "]
POLICY = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true}
    condition:
      idle: {below: 5, for: 30m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 10m}
      - terminate: {after_stopped: 1h, snapshot: false, warn_before: 10m}
    limits: {max_actions_per_cycle: 20}
"""

def protected(value: str | None) -> bool:
    """The documented rule, restated here on purpose (not the code's function): any value
    but false/0/no/off, in any case, spaces ignored, protects."""
    return value is not None and value.strip().lower() not in ("false", "0", "no", "off")


boxes = st.lists(st.tuples(st.one_of(st.none(), st.sampled_from(SPELLINGS)),
                           st.booleans(),  # as a GCP label (costguard_protect)
                           st.booleans()),  # someone clicks "stop now" in Slack
                 min_size=1, max_size=6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=boxes, late=st.sampled_from(SPELLINGS))
def test_no_spelling_of_protect_lets_anything_touch_the_instance(
        fleet: list[tuple[str | None, bool, bool]], late: str) -> None:
    cloud = full_cloud(ManualClock(T0))
    for i, (value, as_label, _) in enumerate(fleet):
        tags = dict(OWNER_TAGS)
        if value is not None:
            tags |= (labels_as_tags({"costguard_protect": value}) if as_label
                     else {"costguard:protect": value})
        cloud.add(f"i-{i}", IDLE, tags=tags)
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud},
                    parse_policy_text(POLICY), cloud.clock,
                    alert_printer=lambda kind, subject, body: None)
    late_tagged: set[str] = set()
    for step in range(18):  # 3 hours: warn, stop, (late tag), terminate-warn, terminate
        engine.run_cycle()
        if step == 3:  # clicks in Slack while warned
            with engine.db.session() as s:
                for i, (_, _, clicks) in enumerate(fleet):
                    if clicks:
                        with contextlib.suppress(NothingToSnooze):
                            request_stop(s, instance_id=f"i-{i}", policy="idle",
                                         now=cloud.clock.now(), who="U1")
        if step == 6:  # someone protects the stopped boxes before the terminate
            for iid, inst in cloud.instances.items():
                if inst.state == "stopped":
                    cloud.set(iid, tags={**inst.tags, "costguard:protect": late})
                    late_tagged.add(iid)
        cloud.clock.advance(timedelta(minutes=10))
    for verb, iid in cloud.acted_on:
        tags = cloud.instances[iid].tags
        if verb in ("stop", "start"):
            box = fleet[int(iid.removeprefix("i-"))]
            assert not protected(box[0]), (verb, iid, box)
        if verb == "terminate":
            assert not protected(tags.get("costguard:protect")), (verb, iid, tags)
    if protected(late):
        assert not any(v == "terminate" and i in late_tagged for v, i in cloud.acted_on)
