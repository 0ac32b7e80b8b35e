"""The one rule for the agent token, on both ends: it travels in an HTTP header
(`Authorization: Bearer TOKEN`), which carries printable ASCII. A token with any other
character (an accented letter, a space, or a byte that is not UTF-8 in the environment) was
accepted by both sides and then failed: the agent's HTTP client refused to send it (an
exception past the push loop), and the daemon could never match it. Both sides refuse it
when they start, with this message; the token itself is never shown."""

from __future__ import annotations

FIX = "use printable ASCII, e.g. the output of `openssl rand -hex 32`"


def token_problem(token: str) -> str | None:
    """Why `token` cannot be sent as a bearer token, or None when it can."""
    for position, char in enumerate(token, 1):
        if "!" <= char <= "~":
            continue
        kind = ("a space" if char == " " else "a control character" if char < " " or
                char == "\x7f" else "not ASCII")
        return (f"character {position} of {len(token)} is {kind}, which an HTTP header "
                f"cannot carry; {FIX}")
    return None
