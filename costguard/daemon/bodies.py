"""Request bodies read within a limit while they stream in: an oversized or endless upload
is refused after `limit` bytes, before anything (a signature check, a JSON parser) holds it
whole. Shared by every route that reads a body (agent ingest, identity, Slack
interactivity).

`parse_json` is the one rule for every JSON text the daemon takes from outside (a body, a
Slack payload, an identity document): nesting bounded before the parser recurses, numbers of
at most 40 characters (a 5,000-digit integer raised ValueError past the handlers), no NaN or
Infinity, and no NUL in any string (PostgreSQL refuses it in text: a 503 an agent retried
for ever). What it refuses is `BodyRefused` with the reason, a 400 for the routes."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.requests import Request

MAX_DEPTH = 32
MAX_NUMBER_CHARS = 40
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')


class BodyRefused(ValueError):
    """A JSON text outside what costguard takes (400, with the reason)."""


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), found
    before the parser recurses into it."""
    depth = deepest = 0
    in_string = escaped = False
    for match in _STRUCTURE.finditer(body):
        char = match.group()
        if in_string:
            if escaped:
                escaped = False
            elif char == b"\\":
                escaped = True
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            in_string = True
        elif char in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif char in (b"]", b"}"):
            depth -= 1
    return deepest


def _number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise BodyRefused(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return text


def _int(text: str) -> int:
    return int(_number(text))


def _float(text: str) -> float:
    value = float(_number(text))
    if not math.isfinite(value):
        raise BodyRefused(f"the number {text[:20]} is out of range")
    return value


def _constant(text: str) -> float:
    raise BodyRefused(f"{text} is not a JSON number")


def _no_nul(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise BodyRefused("a string holds a NUL character (\\u0000)")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_json(text: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """`text` parsed under the rules above; BodyRefused says which one it broke."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if json_depth(raw) > max_depth:
        raise BodyRefused(f"JSON nests deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except BodyRefused:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise BodyRefused(f"not JSON: {exc}") from None
    _no_nul(value)
    return value


class BodyTooLarge(Exception):
    """The body is over the route's limit (413)."""


async def read_limited(request: Request, limit: int) -> bytes:
    """The body, or BodyTooLarge as soon as it passes `limit` bytes (a declared
    Content-Length over the limit is refused before reading anything)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:  # chunked uploads have no Content-Length to trust
            raise BodyTooLarge
    return bytes(body)
