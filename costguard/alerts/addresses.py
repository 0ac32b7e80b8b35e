"""Who an instance's `owner` tag names, when costguard is to tell them.

A tag is written by whoever may tag the instance, and it was taken as an address whole: any
value with an `@` was an email address, anything else a Slack `@name`. A value holding a
line break ("a@x.com\\nBcc: b@y.com") made a message that could not be built, retried on
every pass; a list ("a@x.com, b@y.com") mailed the alert, with the instance's details, to
every address in it; a full name ("Ana Smith") was a Slack `@name` no workspace has. Now
the tag is an address only when it is one plain address (ASCII, dot-atom, a dotted domain),
a Slack name only when it is one word; anything else is `unowned`, which the routing
file's fallback (or the default channel) takes, so the alert still reaches someone.
"""

from __future__ import annotations

import re

_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
PLAIN_ADDRESS = re.compile(rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+")
SLACK_NAME = re.compile(r"[\w.-]{1,80}")
MAX_ADDRESS = 254  # RFC 5321's limit on a forward path


def owner_recipient(owner: str | None) -> str:
    """`email:ADDRESS`, `slack:@NAME`, or `unowned` for an owner tag's value."""
    if not owner:
        return "unowned"
    if "@" in owner:
        plain = len(owner) <= MAX_ADDRESS and PLAIN_ADDRESS.fullmatch(owner) is not None
        return f"email:{owner}" if plain else "unowned"
    return f"slack:@{owner}" if SLACK_NAME.fullmatch(owner) else "unowned"
