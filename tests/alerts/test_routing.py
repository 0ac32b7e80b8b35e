"""The routing file: validation errors that point at the text, and who gets what."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from costguard.alerts.routing import (
    EXAMPLE,
    Router,
    RoutingError,
    Target,
    parse_routing,
)
from costguard.store.tables import AlertRow

NOW = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


def _alert(**kw: object) -> AlertRow:
    base: dict[str, object] = {"dedupe_key": "k", "kind": "idle-warning", "severity": "warning",
                               "created_at": NOW, "subject": "s", "body": "b",
                               "recipients": ["team:research"], "team": "research",
                               "owner": "ana"}
    base.update(kw)
    return AlertRow(**base)  # type: ignore[arg-type]


def test_example_routing_file_resolves_team_owner_and_critical_routes() -> None:
    router = Router(parse_routing(EXAMPLE, "routes.yaml"))
    res = router.resolve(_alert())
    assert res.targets == (Target("slack", "#research-gpu"),
                           Target("email", "research-leads@example.com"),
                           Target("slack", "U0123ABCD"), Target("email", "ana@example.com"))
    critical = router.resolve(_alert(kind="cap", severity="critical", team=None,
                                     recipients=[]))
    assert critical.targets == (Target("slack", "#finops"),
                                Target("email", "finops@example.com"))
    assert not critical.digest


def test_unattributed_and_unowned_fall_back() -> None:
    router = Router(parse_routing(EXAMPLE, "routes.yaml"))
    res = router.resolve(_alert(kind="gap", team=None, owner=None,
                                recipients=["unattributed", "unowned"]))
    assert res.targets == (Target("slack", "#finops"),)


def test_without_a_routing_file_recipients_pass_through_and_default_channel_catches_rest(
) -> None:
    router = Router(None, default_channel="#alerts")
    res = router.resolve(_alert(recipients=["email:ana@example.com", "slack:@ana"]))
    assert res.targets == (Target("email", "ana@example.com"), Target("slack", "@ana"))
    assert router.resolve(_alert(recipients=["unattributed"])).targets == (
        Target("slack", "#alerts"),)


def test_digest_routes_mark_the_alert_for_the_digest() -> None:
    router = Router(parse_routing(EXAMPLE, "routes.yaml"))
    assert router.resolve(_alert(kind="finding", severity="info")).digest


def test_samples_go_only_to_the_named_recipient() -> None:
    router = Router(parse_routing(EXAMPLE, "routes.yaml"))
    res = router.resolve(_alert(recipients=["slack:#ml-costs"], context={"sample": True}))
    assert res.targets == (Target("slack", "#ml-costs"),)


@pytest.mark.parametrize(("text", "expected"), [
    ("routes:\n  - match: {kind: idle-warning}\n    to: [slack:finops]\n",
     "routes.yaml:3:10: routes[0].to[0]: invalid recipient 'slack:finops'"),
    ("teams:\n  research:\n    slak: '#x'\n",
     "routes.yaml:3:5: teams.research: unknown key 'slak' (valid keys: slack, email); "
     "did you mean 'slack'?"),
    ("routes:\n  - match: {min_severity: urgent}\n",
     "routes.yaml:2:27: routes[0].match.min_severity:"),
    ("owners:\n  ana: {email: not-an-address}\n",
     # one address, not a list: named as itself, not as item 0
     "routes.yaml:2:16: owners.ana.email: invalid email address 'not-an-address'"),
    ("fallback: [\n", "routes.yaml:2:1: invalid YAML"),
])
def test_invalid_routing_files_report_file_line_column(text: str, expected: str) -> None:
    with pytest.raises(RoutingError) as info:
        parse_routing(text, "routes.yaml")
    assert str(info.value).startswith(expected), str(info.value)


def test_every_error_is_reported_at_once() -> None:
    text = "routes:\n  - to: [bogus]\nfallback: [email:x]\n"
    with pytest.raises(RoutingError) as info:
        parse_routing(text, "r.yaml")
    assert [e.line for e in info.value.errors] == [2, 3]
