"""An owner tag is written by whoever may tag the instance: it is an email address only when
it is one plain address, a Slack name only when it is one word, and otherwise nobody
costguard can reach, so the fallback takes the alert (it used to be taken whole: a line
break made a message that could not be built, a list mailed every address in it)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from costguard.actions.messages import recipients
from costguard.alerts.addresses import owner_recipient
from costguard.alerts.email import build_email
from costguard.alerts.routing import EXAMPLE, Router, Target, parse_routing
from costguard.model import Instance
from costguard.store.tables import AlertRow
from tests.costs.fleet import instance

NOW = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
HOSTILE = ["ana@example.com\nBcc: eve@evil.example", "ana@example.com, eve@evil.example",
           "Ana <ana@example.com>", "ana@example.com\r\n", "ana@localhost",
           "\u00e4na@example.com", "ana@@example.com", "a" * 250 + "@example.com",
           ".ana@example.com", "ana@-example.com"]


@pytest.mark.parametrize(("owner", "recipient"), [
    ("ana@example.com", "email:ana@example.com"),
    ("ana.smith+gpu@ml.example.co.uk", "email:ana.smith+gpu@ml.example.co.uk"),
    ("ana", "slack:@ana"), ("ana.smith", "slack:@ana.smith"), ("j\u00fcrgen", "slack:@j\u00fcrgen"),
    ("Ana Smith", "unowned"), ("ana\n", "unowned"), ("<ana>", "unowned"), ("", "unowned"),
    (None, "unowned"), *((h, "unowned") for h in HOSTILE),
])
def test_what_an_owner_tag_names(owner: str | None, recipient: str) -> None:
    assert owner_recipient(owner) == recipient


def _instance(owner: str) -> Instance:
    return instance("i-1", "p4d.24xlarge").model_copy(update={"tags": {"owner": owner}})


def _alert(owner: str, recipients: list[str], team: str | None = "research") -> AlertRow:
    return AlertRow(dedupe_key="k", kind="idle-warning", severity="warning", created_at=NOW,
                    subject="s", body="b", recipients=recipients, team=team, owner=owner)


@pytest.mark.parametrize("owner", HOSTILE)
def test_a_hostile_owner_tag_reaches_the_fallback_not_the_address(owner: str) -> None:
    said = recipients(("owner", "team"), _instance(owner), "research")
    assert said == ["unowned", "team:research"]
    # with no routing file, the default channel takes what names nobody
    bare = Router(None, default_channel="#alerts").resolve(_alert(owner, ["unowned"], None))
    assert bare.targets == (Target("slack", "#alerts"),)
    # with one, the route's `owner` names no one: its team still hears, and the fallback
    # takes what reached nobody, as for any recipient the routing file cannot resolve
    routed = Router(parse_routing(EXAMPLE, "routes.yaml")).resolve(_alert(owner, said))
    assert routed.targets == (Target("slack", "#research-gpu"),
                              Target("email", "research-leads@example.com"),
                              Target("slack", "#finops"))
    unrouted = Router(parse_routing(EXAMPLE, "routes.yaml")).resolve(
        _alert(owner, ["unowned"], None))
    assert unrouted.targets == (Target("slack", "#finops"),)


def test_a_plain_owner_address_is_still_mailed_and_the_message_builds() -> None:
    said = recipients(("owner",), _instance("ana.smith@example.com"), None)
    assert said == ["email:ana.smith@example.com"]
    target = Router(None).resolve(_alert("ana.smith@example.com", said, None)).targets
    assert target == (Target("email", "ana.smith@example.com"),)
    msg = build_email(subject="s", text="t", html="<p>t</p>", to=target[0].address,
                      from_addr="costguard@example.com", dedupe_key="k")
    assert msg["To"] == "ana.smith@example.com"


@pytest.mark.parametrize("to", [["unowned"], ["owner"]])  # a policy's `owner`, a route's
def test_an_owners_entry_still_reaches_an_owner_the_tag_cannot(to: list[str]) -> None:
    routing = parse_routing('owners:\n  "Ana Smith": {email: ana@example.com}\n'
                            'routes:\n  - match: {kind: idle-warning}\n    to: [owner]\n'
                            'fallback: ["slack:#finops"]\n', "routes.yaml")
    alert = _alert("Ana Smith", to, None)
    assert Router(routing).resolve(alert).targets == (Target("email", "ana@example.com"),)
