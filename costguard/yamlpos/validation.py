"""Turn pydantic validation errors into SourceErrors located in the YAML text."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Union

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from costguard.errors import SourceError
from costguard.yamlpos.loader import PositionMap


def validation_errors_to_source_errors(
    exc: ValidationError,
    positions: PositionMap,
    filename: str,
    root_model: type[BaseModel],
) -> list[SourceError]:
    """One `SourceError` per pydantic error, located with `positions`, sorted by position."""
    return located_errors(exc.errors(), positions, filename, root_model)


def located_errors(
    errors: Sequence[ErrorDetails],
    positions: PositionMap,
    filename: str,
    root_model: type[BaseModel],
) -> list[SourceError]:
    """`validation_errors_to_source_errors` for some of a `ValidationError`'s errors (those
    whose values came from the file, where others came from elsewhere)."""
    failed = {tuple(e["loc"][:i]) for e in errors for i in range(len(e["loc"]))}
    out = [
        _to_source_error(err, positions, filename, root_model)
        for err in errors
        # pydantic counts only the items that validated, so a list whose items all failed
        # is also "too short"; that second report would only confuse.
        if not (err["type"] == "too_short" and tuple(err["loc"]) in failed)
    ]
    unique = {(e.line, e.column, e.message): e for e in out}
    return sorted(unique.values(), key=lambda e: (e.line, e.column))


def _is_union_tag(segment: object) -> bool:
    # pydantic adds segments like 'list[str]', 'function-after[...]' or a model name inside
    # unions; they name no key in the document.
    return (
        isinstance(segment, str)
        and segment != "[key]"
        and ("[" in segment or "(" in segment or segment.startswith("function-"))
    )


def format_path(path: Sequence[Hashable], positions: PositionMap | None = None) -> str:
    """`("policies", 0, "mode")` -> `policies[0].mode`.

    With `positions`, integer mapping keys (`7: x`) print as keys, not list indexes.
    """
    out = ""
    for i, seg in enumerate(path):
        is_key = positions is not None and tuple(path[: i + 1]) in positions.keys
        if isinstance(seg, int) and not isinstance(seg, bool) and not is_key:
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else str(seg)
    return out or "(document)"


def _to_source_error(
    err: ErrorDetails, positions: PositionMap, filename: str, root_model: type[BaseModel]
) -> SourceError:
    loc: list[Hashable] = []
    for seg in err["loc"]:
        # a list index under a single value (`state: runing` read as a one-item list) is
        # not in the document: the value is named, not its item 0
        if (isinstance(seg, int) and not isinstance(seg, bool) and tuple(loc) in
                positions.values and (*loc, seg) not in positions.values):
            continue
        # a segment naming something in the document is real, whatever it looks like
        if (*loc, seg) in positions.values or not _is_union_tag(seg):
            loc.append(seg)
    kind = err["type"]
    if loc and loc[-1] == "[key]":
        path = tuple(loc[:-1])
        pos = positions.key_or_value(path)
        msg = f"{format_path(path, positions)}: invalid key: {_message(err)}"
        return SourceError(filename, pos.line, pos.column, msg)
    path = tuple(loc)
    if kind == "extra_forbidden" and path:
        parent, key = path[:-1], path[-1]
        pos = positions.key_or_value(path)
        msg = f"unknown key {key!r}"
        if parent:  # at the top level, the position says enough
            msg = f"{format_path(parent, positions)}: {msg}"
        model = model_at(root_model, parent)
        if model is not None:
            valid = field_keys(model)
            msg += f" (valid keys: {', '.join(valid)})"
            close = difflib.get_close_matches(str(key), valid, n=1)
            if close:
                msg += f"; did you mean {close[0]!r}?"
        return SourceError(filename, pos.line, pos.column, msg)
    if kind == "missing" and path:
        parent, key = path[:-1], path[-1]
        _, pos = positions.nearest(parent)
        msg = f"{format_path(parent, positions)}: missing required key {key!r}"
        return SourceError(filename, pos.line, pos.column, msg)
    # a model's own check that names one of its keys as its error type (`providers`,
    # `filters`, `actions`: PydanticCustomError("filters", ...)) points at that key
    if isinstance(kind, str) and (*path, kind) in positions.keys:
        path = (*path, kind)
        pos = positions.keys[path]
        return SourceError(
            filename, pos.line, pos.column, f"{format_path(path, positions)}: {_message(err)}")
    _, pos = positions.nearest(path)
    return SourceError(
        filename, pos.line, pos.column, f"{format_path(path, positions)}: {_message(err)}"
    )


_NEEDS_GOT = (
    "literal_error",
    "enum",
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "string_pattern_mismatch",
    "int_parsing",
    "float_parsing",
    "bool_parsing",
    "int_from_float",
    "bool_type",
    "int_type",
    "float_type",
)


def _message(err: ErrorDetails) -> str:
    msg = err["msg"]
    kind = err["type"]
    value = err.get("input")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind in ("string_type", "str_type") and isinstance(value, bool | int | float):
        what = "a boolean (yes/no/on/off/true/false)" if isinstance(value, bool) else "a number"
        return f"{msg}; YAML read this as {what} — quote it if you meant text: '{value}'"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping (key: value), got {_describe(value)}"
    if kind in ("list_type", "tuple_type", "sequence_type"):
        return f"expected a list, got {_describe(value)}"
    ctx = err.get("ctx") or {}
    if kind == "too_short" and "min_length" in ctx:
        n = ctx["min_length"]
        return f"needs at least {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    if kind == "too_long" and "max_length" in ctx:
        n = ctx["max_length"]
        return f"takes at most {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    if kind in _NEEDS_GOT and _is_plain(value):
        msg = f"{msg} (got {value!r})"
        if kind in ("literal_error", "enum") and isinstance(value, str):
            # pydantic names the allowed values in `expected` as "'any' or 'agent'"
            allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            close = difflib.get_close_matches(value, allowed, n=1)
            if close:
                msg += f"; did you mean {close[0]!r}?"
    return msg


def _is_plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _describe(value: object) -> str:
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


# --------------------------------------------------------------------------- model lookup


def field_keys(model: type[BaseModel]) -> list[str]:
    """The keys a model accepts in a document (aliases where set), in declaration order."""
    return [f.alias or name for name, f in model.model_fields.items()]


def model_at(root: type[BaseModel], path: Sequence[Hashable]) -> type[BaseModel] | None:
    """The pydantic model that validates the value at `path` under `root`, if any."""
    current: Any = root
    for seg in path:
        current = _step(current, seg)
        if current is None:
            return None
    return _as_model(current)


def _as_model(tp: Any) -> type[BaseModel] | None:
    for candidate in _flatten(tp):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _flatten(tp: Any) -> list[Any]:
    """Strip Annotated/Optional/unions down to the concrete alternatives."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _flatten(typing.get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [alt for arg in typing.get_args(tp) for alt in _flatten(arg)]
    return [tp]


def _step(tp: Any, seg: Hashable) -> Any:
    for alt in _flatten(tp):
        nxt = _step_one(alt, seg)
        if nxt is not None:
            return nxt
    return None


def _step_one(tp: Any, seg: Hashable) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, info in tp.model_fields.items():
            if seg in (name, info.alias):
                return info.annotation
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, tuple, set, frozenset) or (
        isinstance(origin, type) and issubclass(origin, Sequence) and origin is not str
    ):
        return args[0] if isinstance(seg, int) and args else None
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return args[1] if len(args) == 2 else None
    return None
