"""The registry of resource kinds (costguard/policy/kinds.py): each kind's example loads, a
policy is checked against its kind at FILE:LINE:COL, every filter and action belongs to some
kind, and the reference and `costguard validate` describe the kinds from the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.errors import PolicyError, SourceError
from costguard.model import ActionKind
from costguard.policy.docs import render_kinds
from costguard.policy.filters import Filters
from costguard.policy.kinds import KINDS
from costguard.policy.load import parse_policy_text


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_s_example_loads_as_that_kind(name: str) -> None:
    kind = KINDS[name]
    (policy,) = parse_policy_text(kind.example, f"{name}.yml").policies
    assert policy.resource == name
    assert tuple(policy.providers) == kind.providers  # the kind's providers by default
    assert {a.kind for a in policy.actions} <= set(kind.actions)


def test_every_filter_and_action_belongs_to_some_kind() -> None:
    taken = {f for kind in KINDS.values() for f in kind.filters}
    assert taken == set(Filters.model_fields)
    assert {a for kind in KINDS.values() for a in kind.actions} == set(ActionKind)
    for kind in KINDS.values():
        assert kind.permissions(False) and all(kind.permissions(True).values())
        assert set(kind.permissions(True)) == set(kind.providers) - {"sim"}


def _error(text: str) -> SourceError:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, "p.yml")
    (error,) = caught.value.errors
    return error


POLICY = """\
policies:
  - name: p
    resource: {resource}
{extra}    condition: {{idle: {{}}}}
    actions: [notify{action}]
"""


@pytest.mark.parametrize(("resource", "extra", "action", "where", "says"), [
    ("workload", "    filters: {instance_type: [p4d.*]}\n", "", (4, 5),
     "filters.instance_type selects instances or notebooks, not workloads; a workload policy "
     "selects with "
     "gpu, state, accounts, regions, tags, age, min_gpus, namespaces, kinds (or give it "
     "`resource: instance`)"),
    ("instance", "    filters: {namespaces: [ml]}\n", "", (4, 5),
     "filters.namespaces selects workloads, not instances"),
    ("instance", "    providers: [aws, k8s]\n", "", (4, 5),
     "k8s holds no instances (an instance policy governs cloud instances"),
    ("instance", "    providers: [k8s]\n", "", (4, 5),
     "give this policy `resource: workload`, or leave k8s out"),
    ("workload", "    providers: [gcp]\n", "", (4, 5), "gcp holds no workloads"),
    ("workload", "", ", {stop: {}}, terminate", (5, 5),
     "terminate does not apply to a workload: its actions are notify, tag, stop, start"),
])
def test_a_policy_is_checked_against_its_kind(resource: str, extra: str, action: str,
                                              where: tuple[int, int], says: str) -> None:
    error = _error(POLICY.format(resource=resource, extra=extra, action=action))
    assert says in error.message, error.message
    assert (error.line, error.column) == where


def test_an_unknown_kind_is_named_with_the_known_ones() -> None:
    error = _error(POLICY.format(resource="bucket", extra="", action=""))
    assert (error.line, error.column) == (3, 15)
    assert ("unknown kind of resource 'bucket': costguard governs `instance`, `notebook`, "
            "`workload`, `volume`, `snapshot`, `address`, `reservation`") in error.message


def test_the_reference_describes_every_kind_from_the_registry() -> None:
    text = render_kinds()
    for name, kind in KINDS.items():
        assert f"### `{name}`" in text and kind.example in text
        assert ", ".join(f"`{a}`" for a in kind.actions) in text
    assert "`tpu.nodes.stop`" in text and "apps/deployments: get, list, patch" in text
    reference = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
    assert text in reference.read_text(encoding="utf-8")


def test_validate_names_the_kinds_it_governs(tmp_path: Path) -> None:
    for name, kind in KINDS.items():
        (tmp_path / f"{name}.yml").write_text(kind.example, encoding="utf-8")
    runner = CliRunner()
    text = runner.invoke(app, ["validate", str(tmp_path)])
    assert text.exit_code == 0, text.output
    said = " ".join(text.output.split())
    assert ("governing 1 address policy, 1 instance policy, 1 notebook policy, 1 "
            "reservation policy, 1 snapshot policy, 1 volume policy, 1 workload policy "
            "(resource kinds") in said
    doc = json.loads(runner.invoke(app, ["validate", str(tmp_path), "--format", "json"]).output)
    assert {p["resource"] for p in doc["policies"]} == set(KINDS)
    assert doc["kinds"]["volume"]["actions"] == ["notify", "tag", "delete"]
    assert doc["kinds"]["workload"]["actions"] == ["notify", "tag", "stop", "start"]
    assert doc["kinds"]["reservation"]["actions"] == ["notify"]
    assert doc["kinds"]["notebook"]["actions"] == ["notify", "tag", "stop", "start"]
