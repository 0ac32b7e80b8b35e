"""Volume, snapshot and address policies in the language (their kinds' conditions, filters,
limits and the `delete` step, each error at FILE:LINE:COL), their evaluation, and the IAM
rights `costguard iam` grants for them: exactly what the enforced policies do, and never on
a resource tagged costguard:protect."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.errors import PolicyError
from costguard.policy.load import parse_policy_text
from costguard.providers.aws.iam import standing_statements
from costguard.standing.evaluate import evaluate
from costguard.standing.model import Standing, StandingKind
from tests.providers.iam_eval import allows

NOW = datetime(2026, 12, 1, tzinfo=UTC)
runner = CliRunner()


def _error(text: str) -> tuple[int, int, str]:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, "p.yml")
    (e,) = caught.value.errors
    return e.line, e.column, e.message


@pytest.mark.parametrize(("body", "where", "says"), [
    ("    condition: {idle: {below: 5}}\n    actions: [notify]\n", (4, 5),
     "condition.idle judges instances or notebooks or workloads, not volumes; a volume policy's "
     "conditions are unused, missing_tags"),
    ("    condition: {missing_tags: [team]}\n    actions: [notify, delete]\n", (5, 5),
     "delete acts only on what nothing uses: add condition.unused"),
    ("    condition: {unused: {for: 30m}}\n    actions: [notify]\n", (4, 31),
     "a resource detached a moment ago may be reattached"),
    ("    filters: {gpu: true}\n    condition: {unused: {}}\n    actions: [notify]\n", (4, 5),
     "filters.gpu selects instances or notebooks or workloads, not volumes"),
    ("    condition: {unused: {}}\n    actions: [notify, stop]\n", (5, 5),
     "stop does not apply to a volume: its actions are notify, tag, delete"),
])
def test_a_volume_policy_is_checked_against_its_kind(body: str, where: tuple[int, int],
                                                     says: str) -> None:
    line, col, message = _error(f"policies:\n  - name: v\n    resource: volume\n{body}")
    assert says in message, message
    assert (line, col) == where, message


def test_a_monthly_cap_is_for_storage_only() -> None:
    _, _, message = _error("""\
policies:
  - name: i
    condition: {running_longer_than: 1h}
    actions: [notify]
    limits: {max_usd_per_month: 10}
""")
    assert "max_usd_per_month caps deletes of volumes" in message
    assert "an instance policy caps with max_usd_per_hour" in message


def _volume(**kw: object) -> Standing:
    base: dict[str, object] = dict(
        kind=StandingKind.VOLUME, provider="aws", account="1", region="us-east-1",
        resource_id="vol-1", state="available", in_use=False, created_at=NOW - timedelta(
            days=90), usd_per_month=8.0, tags={"team": "ml"}, observed_at=NOW)
    return Standing(**(base | kw))  # type: ignore[arg-type]


POLICY = parse_policy_text("""\
policies:
  - name: v
    resource: volume
    filters: {attached: false, age: {older_than: 60d}, tags: {absent: ["costguard:protect"]}}
    condition: {unused: {for: 30d}}
    actions: [notify]
""", "p.yml").policies[0]


@pytest.mark.parametrize(("item", "since", "holds"), [
    (_volume(), NOW - timedelta(days=31), True),
    (_volume(), NOW - timedelta(days=29), False),  # not unused long enough
    (_volume(), None, False),  # costguard never saw it unused
    (_volume(in_use=True, used_by=("i-1",)), NOW - timedelta(days=31), None),  # attached
    (_volume(tags={"costguard:protect": "yes"}), NOW - timedelta(days=31), None),
    (_volume(created_at=NOW - timedelta(days=10)), NOW - timedelta(days=31), None),  # young
    (_volume(created_at=None), NOW - timedelta(days=31), None),  # age unknown: no match
    (_volume(kind=StandingKind.SNAPSHOT), NOW - timedelta(days=31), None),  # other kind
])
def test_evaluation(item: Standing, since: datetime | None, holds: bool | None) -> None:
    f = evaluate(POLICY, item.model_copy(update={"unused_since": since}), NOW)
    assert (f.holds if f is not None else None) is holds
    if holds:
        assert f is not None and f.reason == "attached to nothing for 31d"


def test_stopped_holders_are_named() -> None:
    p = POLICY.model_copy(update={"filters": POLICY.filters.model_copy(
        update={"attached": True, "age": None})})
    f = evaluate(p, _volume(used_by=("i-9",), unused_since=NOW - timedelta(days=40)), NOW)
    assert f is not None and f.reason == "attached only to stopped i-9 for 40d"


def test_iam_grants_deletes_only_off_protected_resources() -> None:
    doc = {"Statement": standing_statements({"volume": frozenset({"delete"}),
                                             "snapshot": frozenset(),
                                             "address": frozenset({"delete", "tag"})})}
    for action in ("ec2:DeleteVolume", "ec2:ReleaseAddress"):
        assert allows(doc, action, {})
        assert allows(doc, action, {"costguard:protect": "false"})
        assert not allows(doc, action, {"costguard:protect": "yes"})
    assert not allows(doc, "ec2:DeleteSnapshot", {})  # no enforced snapshot delete
    assert allows(doc, "ec2:CreateSnapshot", {}) and allows(doc, "ec2:DescribeImages", {})


def _iam(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> set[str]:
    monkeypatch.chdir(tmp_path)
    for var in ("COSTGUARD_DATABASE_URL", "COSTGUARD_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "p.yml").write_text(text)
    out = runner.invoke(app, ["iam", "--provider", "aws"])
    assert out.exit_code == 0, out.output
    return {a for st in json.loads(out.output)["Statement"]
            for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}


@pytest.mark.parametrize(("mode", "deleting"), [("dry-run", False), ("enforce", True)])
def test_costguard_iam_follows_the_storage_policies(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    mode: str, deleting: bool) -> None:
    actions = _iam(tmp_path, monkeypatch, f"""\
policies:
  - name: v
    resource: volume
    mode: {mode}
    condition: {{unused: {{for: 30d}}}}
    actions: [notify, delete]
""")
    assert "ec2:DescribeVolumes" in actions and "ec2:DescribeAddresses" not in actions
    assert ("ec2:DeleteVolume" in actions) is deleting
    assert ("ec2:CreateSnapshot" in actions) is deleting
    assert "ec2:ReleaseAddress" not in actions


def test_the_standing_kinds_are_the_registry_s() -> None:
    """The kinds the standing stage governs are exactly the registry's standing ones."""
    from costguard.policy.kinds import KINDS

    assert {k.value for k in StandingKind} == {n for n, k in KINDS.items() if k.standing}


def test_an_action_a_kind_does_not_take_is_named_with_its_article() -> None:
    _, _, message = _error("""\
policies:
  - name: a
    resource: address
    condition: {unused: {}}
    actions: [notify, stop]
""")
    assert "stop does not apply to an address: its actions are notify, tag, delete" in message


def test_costguard_iam_reads_reservations_and_never_acts_on_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = """\
policies:
  - name: r
    resource: reservation
    mode: enforce
    condition: {unused: {for: 2d}}
    actions: [notify]
"""
    actions = _iam(tmp_path, monkeypatch, policy)
    assert {"ec2:DescribeCapacityReservations", "ec2:DescribeInstances"} <= actions
    assert not {a for a in actions if "CapacityReservation" in a and "Describe" not in a}
    out = runner.invoke(app, ["iam", "--provider", "gcp", "--format", "json"])
    assert out.exit_code == 0, out.output
    granted = json.loads(out.output)["includedPermissions"]
    assert {"compute.reservations.list", "compute.reservations.get"} <= set(granted)
    assert not [p for p in granted if p.startswith("compute.reservations.")
                and p.rsplit(".", 1)[1] not in ("list", "get")]
    volumes = policy.replace("reservation", "volume").replace(
        "[notify]", "[notify, {tag: {set: {a: b}}}]")
    (tmp_path / "policies" / "p.yml").write_text(volumes)
    out = runner.invoke(app, ["iam", "--provider", "gcp", "--format", "json"])
    assert "compute.reservations.list" not in json.loads(out.output)["includedPermissions"]


def test_a_reservation_takes_no_action_but_notify() -> None:
    _, _, message = _error("""\
policies:
  - name: a
    resource: reservation
    condition: {unused: {for: 1d}}
    actions: [notify, stop]
""")
    assert "stop does not apply to a reservation: its actions are notify (cancelling a " \
        "reservation is its owner's decision" in message


@pytest.mark.parametrize(("mode", "deleting"), [("dry-run", False), ("enforce", True)])
def test_the_gcp_role_follows_the_volume_policies(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  mode: str, deleting: bool) -> None:
    _iam(tmp_path, monkeypatch, f"""\
policies:
  - name: v
    resource: volume
    mode: {mode}
    condition: {{unused: {{for: 30d}}}}
    actions: [notify, delete]
""")
    out = runner.invoke(app, ["iam", "--provider", "gcp", "--format", "json"])
    assert out.exit_code == 0, out.output
    granted = set(json.loads(out.output)["includedPermissions"])
    assert {"compute.disks.list", "compute.disks.get"} <= granted
    assert ({"compute.disks.delete", "compute.disks.createSnapshot",
             "compute.snapshots.get"} <= granted) is deleting
    assert "compute.disks.setLabels" not in granted  # no tag step
