"""Text in a Slack message that is not costguard's own (an instance's name, a team or owner
tag, a reason quoting them) is escaped wherever Slack reads mrkdwn: `<!channel>` in a Name
tag pinged the whole channel through the notification's text, which was sent as it was."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from costguard.alerts.content import view_of
from costguard.alerts.slack import digest_blocks, slack_message
from costguard.alerts.slack_update import outcome_line, updated_message
from tests.alerts.test_examples import ALERT

HOSTILE = "<!channel> <@U0EVE0001> <https://evil.example|docs> & co"


def _mrkdwn(node: Any, plain: bool = False) -> Iterator[str]:
    """Every string Slack reads as mrkdwn: a `text` whose object is not plain_text, and
    the top-level notification text."""
    if isinstance(node, dict):
        if node.get("type") == "plain_text":
            return
        for key, value in node.items():
            if key == "text" and isinstance(value, str):
                yield value
            elif key not in ("value", "action_id", "block_id", "metadata"):
                yield from _mrkdwn(value)
    elif isinstance(node, list):
        for item in node:
            yield from _mrkdwn(item)


def _hostile_view() -> Any:
    alert = ALERT.model_copy(update={
        "subject": f"{HOSTILE} (i-0f3a9c2e71b4d5a60) will be stopped at 14:15 UTC",
        "team": HOSTILE, "owner": HOSTILE,
        "context": {**ALERT.context, "reason": f"idle; name {HOSTILE}", "evidence": HOSTILE}})
    return view_of(alert, timedelta(hours=24))


def _assert_escaped(texts: list[str]) -> None:
    assert texts, "nothing read as mrkdwn"
    joined = "\n".join(texts)
    assert "&lt;!channel&gt;" in joined
    for text in texts:
        assert "<!" not in text and "<https://evil" not in text and "<@U0EVE" not in text, text
        assert "& co" not in text, text


def test_an_alert_message_escapes_every_text_it_did_not_write() -> None:
    message = slack_message(_hostile_view(), "k")
    texts = list(_mrkdwn(message))
    assert message["text"] in texts  # the notification's own text is read as mrkdwn too
    _assert_escaped(texts)


def test_a_digest_and_a_clicked_message_escape_it_too() -> None:
    view = _hostile_view()
    _assert_escaped(list(_mrkdwn(digest_blocks("Daily digest", [view, view]))))
    clicked = updated_message({"type": "message", **slack_message(view, "k")},
                              [outcome_line("snooze", "U0ANA0001", f"snoozed: {HOSTILE}")],
                              final=False)
    texts = list(_mrkdwn(clicked))
    assert any("<@U0ANA0001>" in t for t in texts)  # costguard's own mention of the clicker
    _assert_escaped([t.replace("<@U0ANA0001>", "") for t in texts])


def test_a_long_text_is_never_cut_inside_an_escape() -> None:
    """Block Kit cuts a section at 3,000 characters: costguard cuts first, with an ellipsis,
    and an escape cut in two (`&am`) would show as text."""
    for shift in range(5):  # the cut falls at each character of an escape in turn
        alert = ALERT.model_copy(update={"context": {
            **ALERT.context, "evidence": "x" * shift + "<&>" * 2000}})
        texts = list(_mrkdwn(slack_message(view_of(alert, timedelta(hours=24)), "k")))
        cut = [t for t in texts if t.startswith("*Evidence:*")]
        assert len(cut) == 1 and cut[0].endswith("…") and len(cut[0]) <= 2900
        assert not re.search(r"&(?!(amp|lt|gt);)", cut[0]), cut[0][-12:]
