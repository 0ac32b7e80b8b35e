"""Partial responses, as Google's APIs give them: the `fields` system parameter (a query
parameter, or the `X-Goog-FieldMask` header) names the parts of a response to return.

The syntax, as Compute Engine's "Improve performance" guide and Google's system-parameters
page give it: a comma-separated list of selections (`a,b`); `a/b` selects `b` inside `a`;
`a(b,c)` selects `b` and `c` inside `a`; `*` selects every field (of an object, or every key
of a map, as `items/*/instances` does in an aggregated list). A selection inside an array
applies to each of its elements. What a selection names that the response lacks is left
out; a malformed value is a 400.

The real API also rejects a name its schema lacks ("Invalid field selection"); this fake
has no schema and cannot. `FakeCompute.reject_field_masks` makes it answer any selection
with that 400, as a proxy or an API that does not take the parameter would.
"""

from __future__ import annotations

from typing import Any

# a selection tree: field name ("*" for any) -> what to keep inside it (None: all of it)
Selection = dict[str, "Selection | None"]

_PUNCT = ",/()"


def parse(value: str) -> Selection:
    """The selection tree of a `fields` value; ValueError when it is malformed."""
    tokens = _tokens(value)
    tree, at = _list(tokens, 0)
    if at != len(tokens):
        raise ValueError(f"Invalid field selection {value!r}: unexpected {tokens[at]!r}")
    return tree


def _tokens(value: str) -> list[str]:
    out: list[str] = []
    name = ""
    for ch in value:
        if ch in _PUNCT:
            if name.strip():
                out.append(name.strip())
            name = ""
            out.append(ch)
        else:
            name += ch
    if name.strip():
        out.append(name.strip())
    return out


def _list(tokens: list[str], at: int) -> tuple[Selection, int]:
    """selection (',' selection)*"""
    tree: Selection = {}
    while True:
        at = _selection(tokens, at, tree)
        if at < len(tokens) and tokens[at] == ",":
            at += 1
            continue
        return tree, at


def _selection(tokens: list[str], at: int, into: Selection) -> int:
    """name ('/' name)* ['(' list ')']: merged into `into`."""
    path: list[str] = []
    while True:
        if at >= len(tokens) or tokens[at] in _PUNCT:
            got = tokens[at] if at < len(tokens) else "the end"
            raise ValueError(f"Invalid field selection: a field name expected, not {got!r}")
        path.append(tokens[at])
        at += 1
        if at < len(tokens) and tokens[at] == "/":
            at += 1
            continue
        break
    inner: Selection | None = None
    if at < len(tokens) and tokens[at] == "(":
        inner, at = _list(tokens, at + 1)
        if at >= len(tokens) or tokens[at] != ")":
            raise ValueError("Invalid field selection: a '(' is not closed")
        at += 1
    node = into
    for name in path[:-1]:
        child = node.get(name, {})
        if child is None:  # already selected whole
            return at
        node = node.setdefault(name, child)  # type: ignore[assignment]
    last = path[-1]
    if inner is None or node.get(last, {}) is None:
        node[last] = None
    else:
        node[last] = _merged(node.get(last) or {}, inner)
    return at


def _merged(into: Selection, more: Selection) -> Selection:
    """Both selections: `a(b/c),a(b/d)` keeps c and d."""
    for name, inner in more.items():
        have = into.get(name, {})
        into[name] = None if inner is None or have is None else _merged(have, inner)
    return into


def apply(payload: Any, tree: Selection | None) -> Any:
    """`payload` with only what `tree` selects (None: all of it)."""
    if tree is None:
        return payload
    if isinstance(payload, list):
        return [apply(item, tree) for item in payload]
    if not isinstance(payload, dict):
        return payload  # a selection below a scalar keeps the scalar
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if key in tree:
            inner = tree[key]
        elif "*" in tree:
            inner = tree["*"]
        else:
            continue
        out[key] = apply(value, inner)
    return out
