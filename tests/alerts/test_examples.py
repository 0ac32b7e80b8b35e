"""The rendered samples in docs/examples/ are what costguard sends today.

Regenerate them after a deliberate change with:
    COSTGUARD_WRITE_EXAMPLES=1 .venv/bin/pytest tests/alerts/test_examples.py
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from costguard.alerts.content import view_of
from costguard.alerts.email import alert_email
from costguard.alerts.slack import slack_message
from costguard.alerts.slack_update import outcome_line, updated_message
from costguard.store.tables import AlertRow

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
NOW = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(minutes=15)
ALERT = AlertRow(
    id=42, dedupe_key="idle-gpu|aws|i-0f3a9c2e71b4d5a60|notify|1", kind="idle-warning",
    severity="warning", created_at=NOW, policy="idle-gpu", provider="aws",
    instance_id="i-0f3a9c2e71b4d5a60", team="research", owner="ana@example.com",
    recipients=["email:ana@example.com", "team:research"],
    subject="trainer-7 (i-0f3a9c2e71b4d5a60) will be stopped at 2026-03-02 14:15 UTC unless "
            "it gets busy (idle-gpu)",
    body="Why: all 8 GPUs idle for 1h (SM activity < 5%)\nCost: $32.77/h (p4d.24xlarge, "
         "on-demand, us-east-1)\nDeadline: 2026-03-02T14:15:00+00:00\n"
         "Checkpoint your work if the job is done.",
    context={"reason": "all 8 GPUs idle for 1h (SM activity < 5%)",
             "evidence": "sm_active p95 0.4% over 60 min on 8/8 GPUs, 0 processes, "
                         "GPU memory 1% used",
             "usd_per_hour": 32.77, "deadline": DEADLINE.isoformat(),
             "instance_type": "p4d.24xlarge"})


def _rendered() -> dict[str, str]:
    view = view_of(ALERT, timedelta(hours=24))
    message = slack_message(view, f"{ALERT.dedupe_key}|slack:#research-gpu")
    mail = alert_email(view, to="ana@example.com", from_addr="costguard@example.com",
                       dedupe_key=f"{ALERT.dedupe_key}|email:ana@example.com", max_snooze="1d")
    # after two clicks: a snooze, then "stop now" from someone else (the buttons go)
    clicked = updated_message({"type": "message", **message}, [
        outcome_line("snooze", "U0ANA0001", "i-0f3a9c2e71b4d5a60 snoozed until 2026-03-02 "
                                            "18:00 UTC"),
        outcome_line("stop-now", "U0BO000002", "asked to stop i-0f3a9c2e71b4d5a60 now: it "
                                               "stops at the next cycle if still idle"),
    ], final=True)
    html = mail.get_body(("html",))
    text = mail.get_body(("plain",))
    assert html is not None and text is not None
    return {
        "slack-idle-warning.json": json.dumps({"channel": "#research-gpu", **message},
                                              indent=2, ensure_ascii=False) + "\n",
        "slack-idle-warning-clicked.json": json.dumps(clicked, indent=2,
                                                      ensure_ascii=False) + "\n",
        "email-idle-warning.html": html.get_content(),
        "email-idle-warning.txt": text.get_content(),
    }


def test_saved_examples_match_what_costguard_renders() -> None:
    rendered = _rendered()
    if os.environ.get("COSTGUARD_WRITE_EXAMPLES"):
        for name, content in rendered.items():
            (EXAMPLES / name).write_text(content, encoding="utf-8")
    for name, content in rendered.items():
        saved = (EXAMPLES / name).read_text(encoding="utf-8")
        assert saved == content, f"docs/examples/{name} is stale: regenerate it (see docstring)"


def test_examples_say_what_why_evidence_dollars_deadline_and_how_to_snooze() -> None:
    slack = json.loads((EXAMPLES / "slack-idle-warning.json").read_text())
    email = (EXAMPLES / "email-idle-warning.html").read_text()
    blocks = json.dumps(slack["blocks"])
    for text in (blocks, email):
        for expected in ("i-0f3a9c2e71b4d5a60", "research", "all 8 GPUs idle for 1h",
                         "sm_active p95 0.4%", "$32.77/h", "2026-03-02 14:15 UTC",
                         "costguard snooze i-0f3a9c2e71b4d5a60 --for 4h"):
            assert expected in text, expected
    buttons = [e for b in slack["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [b["text"]["text"] for b in buttons] == [
        "Snooze 1h", "Snooze 4h", "Until tomorrow 09:00 UTC", "Stop now"]
    assert json.loads(buttons[0]["value"]) == {
        "a": "snooze", "p": "idle-gpu", "pr": "aws", "i": "i-0f3a9c2e71b4d5a60", "for": "1h"}
    assert "&lt;" in email  # "< 5%" escaped: the HTML template autoescapes


def test_clicked_example_says_who_did_what_and_has_no_buttons_left() -> None:
    clicked = json.loads((EXAMPLES / "slack-idle-warning-clicked.json").read_text())
    assert clicked["replace_original"] is True
    assert not [b for b in clicked["blocks"] if b["type"] == "actions"]
    outcome = json.dumps(clicked["blocks"][-1])
    assert "<@U0ANA0001>" in outcome and "<@U0BO000002>" in outcome
    assert "$32.77/h" in json.dumps(clicked["blocks"])
