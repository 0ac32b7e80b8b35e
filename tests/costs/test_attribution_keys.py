"""Which tag a dimension reads: its keys as written, then in another case, then in the
flattened form a CUR for Athena gives tag columns (`resource_tags_user_cost_center`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from costguard.costs.attribution import Attributor, flat_key
from costguard.model import Instance
from costguard.policy.load import parse_policy_text

RULES = parse_policy_text("""\
attribution:
  dimensions:
    team: {keys: [team, Team]}
    cost-center: {keys: [CostCenter], case: upper}
  derive:
    - {dimension: team, from: account, map: {"111122223333": from-account}}
""").attribution


def inst(**tags: str) -> Instance:
    return Instance(provider="aws", instance_id="i-1", account="111122223333",
                    region="us-east-1", instance_type="p4d.24xlarge", state="running",
                    launch_time=datetime(2026, 5, 1, tzinfo=UTC),
                    observed_at=datetime(2026, 5, 1, tzinfo=UTC), tags=tags)


@pytest.mark.parametrize(("key", "flat"), [
    ("CostCenter", "cost_center"), ("cost-center", "cost_center"), ("cost_center", "cost_center"),
    ("aws:createdBy", "aws_created_by"), ("user:Cost Center", "user_cost_center"),
    ("--a..b--", "a_b"), ("team", "team"),
    # AWS splits every capital, as CUR 2.0's reservation_reservation_a_r_n shows
    ("ReservationARN", "reservation_a_r_n"), ("GPU2Type", "g_p_u2_type"),
])
def test_flat_key_is_awss_column_spelling(key: str, flat: str) -> None:
    assert flat_key(key) == flat


def test_keys_as_written_win_then_another_case_then_the_flattened_form() -> None:
    attributor = Attributor(RULES)
    both = inst(team="exact", TEAM="upper", **{"cost_center": "cc-1"})
    assert attributor.dimensions(both) == {"team": "exact", "cost-center": "CC-1"}
    assert attributor.dimensions(inst(TEAM="upper"))["team"] == "upper"
    # a tag no spelling of the keys names still falls to the derive rules
    assert attributor.dimensions(inst(**{"cost-centre": "x"})) == {
        "team": "from-account", "cost-center": None}
    # an empty tag is no value in any form
    assert attributor.dimensions(inst(cost_center=""))["cost-center"] is None


def test_each_chance_finds_what_the_others_cannot() -> None:
    rules = parse_policy_text("""\
attribution:
  dimensions:
    team: {keys: [costcenter]}
    cost-center: {keys: [cost_center]}
""").attribution
    attributor = Attributor(rules)
    # in another case only: flattened, CostCenter is cost_center, not costcenter
    assert attributor.dimensions(inst(CostCenter="cc-1"))["team"] == "cc-1"
    # flattened only: `Cost-Center` in any case is not cost_center, and its key is not flat
    assert attributor.dimensions(inst(**{"Cost-Center": "cc-2"}))["cost-center"] == "cc-2"
    # without rules a key that is not flat itself takes no part in the flattened match
    assert Attributor().dimensions(inst(**{"Cost-Center": "cc-2"}))["cost-center"] is None


def test_without_rules_a_dimension_reads_its_flattened_name_but_not_another_case() -> None:
    dims = Attributor().dimensions(inst(cost_center="cc-7", Team="vision", ENV="prod"))
    assert dims == {"team": None, "project": None, "env": None, "cost-center": "cc-7"}
    # the name as written still wins over its flattened form
    dims = Attributor().dimensions(inst(**{"cost-center": "a", "cost_center": "b"}))
    assert dims["cost-center"] == "a"
