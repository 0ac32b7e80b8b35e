"""After a button click: the original Slack message shows who did what.

The update goes to the click's `response_url` (valid 30 minutes, for webhook and bot-token
messages alike) with `replace_original`: the message keeps its facts and gains an outcome
line per click (`<@U…> snoozed it until …`). A "stop now" that took effect also removes the
buttons, since there is nothing left to choose. The URL is a capability: it is never logged.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.webhook import WebhookClient

from costguard.alerts.slack import escape_mrkdwn as _esc
from costguard.alerts.slack import quiet_logger

log = logging.getLogger("costguard.alerts.slack")

OUTCOME_BLOCK = "costguard_outcome"
ACTIONS_BLOCK = "costguard_actions"
_MAX_LINES = 10  # a context block holds at most 10 elements
_ICON = {"snooze": ":zzz:", "stop-now": ":octagonal_sign:"}


def outcome_line(action: str, user_id: str, text: str) -> str:
    return f"{_ICON.get(action, ':white_check_mark:')} <@{_esc(user_id)}>: {_esc(text)}"


def updated_message(original: dict[str, Any] | None, lines: list[str], *,
                    final: bool) -> dict[str, Any]:
    """The body to post to `response_url`: the original message with the outcome lines
    added (earlier clicks' lines kept), or, without an original, an ephemeral note."""
    if not original or not original.get("blocks"):
        return {"replace_original": False, "response_type": "ephemeral",
                "text": "\n".join(lines)}
    blocks: list[dict[str, Any]] = []
    earlier: list[dict[str, Any]] = []
    for block in original["blocks"]:
        if block.get("block_id") == OUTCOME_BLOCK:
            earlier = list(block.get("elements") or [])
        elif not (final and block.get("block_id") == ACTIONS_BLOCK):
            blocks.append(block)
    elements = earlier + [{"type": "mrkdwn", "text": line} for line in lines]
    blocks.append({"type": "context", "block_id": OUTCOME_BLOCK,
                   "elements": elements[-_MAX_LINES:]})
    return {"replace_original": True, "text": original.get("text") or "costguard alert",
            "blocks": blocks}


def post_update(response_url: str, body: dict[str, Any], timeout_s: float = 10.0) -> bool:
    """Post to the click's response_url; False (and a log line without the URL) on failure."""
    client = WebhookClient(response_url, timeout=int(timeout_s), logger=quiet_logger(),
                           retry_handlers=[])
    try:
        resp = client.send_dict(body)
    except Exception as exc:  # the click is journaled already; only the display is stale
        log.warning("could not update the Slack message after a click: %s",
                    type(exc).__name__)
        return False
    if resp.status_code != 200:
        log.warning("could not update the Slack message after a click: Slack answered %s %s",
                    resp.status_code, resp.body[:200])
        return False
    return True
