"""JSON from outside, parsed under one rule: nesting bounded before the parser recurses,
numbers of at most 40 characters (a 5,000-digit integer raised ValueError past the
handlers), no NUL in any string (PostgreSQL refuses it in text), and no unpaired surrogate
(a `\\ud800` escape, or its bytes, is valid JSON but not Unicode text: no store and no UTF-8
writer takes it, so it was refused at the store, after the parse, as a 503 an agent retried
for ever).
What it refuses is `JsonRefused` with the reason. The daemon's routes (daemon/bodies.py)
and the billing importer's JSON cells and lines (billing/lines.py, focus_files.py) use it.
Answers of an API costguard reads whole (Kubernetes', Prometheus') are parsed with
`mend_text`: a NUL or an unpaired surrogate in one free-form string (a pod's annotation or
environment value may hold any text) becomes U+FFFD there, instead of the whole answer,
and with it the cluster's inventory, being refused.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32
MAX_NUMBER_CHARS = 40
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')
# where a text may carry a surrogate: an escape of one (json reads a valid pair as one
# character), or its UTF-8-like bytes (json reads bytes with "surrogatepass")
_MAY_HOLD_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
# text no store, cloud API or UTF-8 writer takes: NUL, or half a surrogate pair (the YAML
# loader refuses the same, yamlpos/loader.py)
ODD_TEXT = re.compile("[\x00\ud800-\udfff]")


class JsonRefused(ValueError):
    """A JSON text outside what costguard takes (a 400 for a route; a skipped line in a bill)."""


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
        raise JsonRefused(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return text


def _int(text: str) -> int:
    return int(_number(text))


def _float(text: str) -> float:
    return float(_number(text))  # 1e999 is inf: the model that reads it refuses non-finite


def _text_only(value: Any) -> None:
    """Every string in `value` (keys too) without NUL or an unpaired surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if (found := ODD_TEXT.search(item)) is None:
                continue
            if found.group() == "\x00":
                raise JsonRefused("a string holds a NUL character (\\u0000)")
            raise JsonRefused(f"a string holds an unpaired surrogate "
                              f"(\\u{ord(found.group()):04x}): not Unicode text")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _mended(value: Any) -> Any:
    """`value` with each NUL and unpaired surrogate in its strings (keys too) as U+FFFD
    (recursion bounded: the depth was checked before parsing)."""
    if isinstance(value, str):
        return ODD_TEXT.sub("\ufffd", value)
    if isinstance(value, list):
        return [_mended(v) for v in value]
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    return value


def parse_json(text: bytes | str, *, max_depth: int = MAX_DEPTH,
               mend_text: bool = False) -> Any:
    """`text` parsed under the rules above; JsonRefused says which one it broke. With
    `mend_text`, a NUL or an unpaired surrogate in a string is replaced, not refused."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if json_depth(raw) > max_depth:
        raise JsonRefused(f"JSON nests deeper than {max_depth} levels")
    try:
        # NaN and Infinity (Python's tokens) are read as floats: the model that reads the
        # value says which field is not finite (a 422 naming it, for ingest)
        value = json.loads(text, parse_int=_int, parse_float=_float)
    except JsonRefused:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise JsonRefused(f"not JSON: {exc}") from None
    # the only ways JSON text carries NUL or a lone surrogate: walk only where it may
    if b"\\u0000" in raw or _MAY_HOLD_SURROGATE.search(raw):
        if mend_text:
            return _mended(value)
        _text_only(value)
    return value
