"""Arrow columns of a bill as text, for the column reader (focus_columns) and for the keys
of Parquet lines: both readers key a Parquet line by the same text of its values, so a file
imported one way adds nothing imported the other.

Strings stay as they are; numbers, decimals, booleans, dates and times are Arrow's text of
them (times cast once per distinct value: Arrow's time formatting is slow, and a bill
repeats its hours); a tag map (`map<string, string>`) or a list of `{key, value}` structs
(GCP's labels) is `key\\x1fvalue` pairs joined by `\\x1d`. Any other nested type is `Unsupported`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# a line's key text in a row the line-by-line reader reads (focus_files._parquet_rows)
CONTENT = "\x00content"
PAIR, ITEM = "\x1f", "\x1d"


class Unsupported(Exception):
    """A column type, or a value, this text cannot stand for exactly."""


def as_text(values: Any) -> Any:
    """`values` (an Arrow array or chunked array) as a string array, nulls kept."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    kind = values.type
    if pa.types.is_dictionary(kind):
        return as_text(values.cast(kind.value_type))
    if pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _pairs_text(values)
    if pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        raise Unsupported(f"a column of {kind}")
    try:
        if pa.types.is_temporal(kind):
            return by_value(values, lambda distinct: distinct.cast(pa.string()))
        return values.cast(pa.string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
        raise Unsupported(f"a column of {kind}: {exc}") from None


def by_value(values: Any, convert: Callable[[Any], Any]) -> Any:
    """`convert` (an Arrow array of `values`' distinct values, no nulls, to an array as
    long) spread back over `values`' rows, nulls kept: a bill repeats most of its values
    (hours, accounts, services, amounts), so work per distinct value is a fraction of the
    same work per row."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    encoded = dictionary_of(values)
    return pc.take(convert(encoded.dictionary), encoded.indices)


def dictionary_of(values: Any) -> Any:
    """`values` dictionary-encoded, as one array (its distinct values, and each row's
    index into them; a null row has a null index)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    if isinstance(values, pa.ChunkedArray):  # (Arrow unifies few kinds of dictionaries)
        values = values.combine_chunks()
    return pc.dictionary_encode(values)


def _pairs_text(values: Any) -> Any:
    """A map, or a list of {key, value} structs, as `k\\x1fv\\x1dk\\x1fv` per row."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    if pa.types.is_map(kind):
        first, last = values.offsets[0].as_py(), values.offsets[-1].as_py()
        # (a map's keys and items are its whole children, not cut to a slice)
        keys = values.keys.slice(first, last - first)
        items = values.items.slice(first, last - first)
    else:
        entry = kind.value_type
        names = {entry.field(i).name.lower(): i for i in range(entry.num_fields)} if (
            pa.types.is_struct(entry)) else {}
        if "key" not in names:
            raise Unsupported(f"a column of {kind}: not key/value pairs")
        flat = values.flatten()
        keys = flat.field(names["key"])
        items = (flat.field(names["value"]) if "value" in names
                 else pa.nulls(len(flat), pa.string()))
    for part in (keys, items):
        if not (pa.types.is_string(part.type) or pa.types.is_large_string(part.type)
                or pa.types.is_boolean(part.type) or pa.types.is_null(part.type)):
            raise Unsupported(f"tags of {part.type}")
    keys = keys.cast(pa.string())
    items = pc.fill_null(items.cast(pa.string()), "")
    for part in (keys, items):
        if pc.any(pc.match_substring_regex(pc.fill_null(part, ""), f"[{PAIR}{ITEM}]")).as_py():
            raise Unsupported("a tag holds a separator character")
    joined = pc.binary_join_element_wise(pc.fill_null(keys, ""), items, PAIR)
    offsets = values.offsets
    if len(offsets) and offsets[0].as_py() != 0:
        offsets = pc.subtract(offsets, offsets[0])
    rows = pa.ListArray.from_arrays(offsets, joined, mask=values.is_null())
    return pc.binary_join(rows, ITEM)


def pairs_of(text: str) -> dict[str, str]:
    """The tags `_pairs_text` wrote (the last of a repeated key, as a dict keeps it)."""
    if not text:
        return {}
    return dict(item.split(PAIR, 1) for item in text.split(ITEM))


def contents(table: Any) -> list[bytes]:
    """Each row's key text: `name\\x1evalue` for every column in name order, joined by
    \\x1f; a null value is \\x00. For CSV (every value text, none null) this is exactly
    what billing.parse_focus keys a CSV row by."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    parts: list[Any] = []
    for i, name in enumerate(sorted(table.column_names)):
        parts += [pa.scalar(("\x1f" if i else "") + name + "\x1e"),
                  pc.fill_null(as_text(table[name]), "\x00")]
    joined = pc.binary_join_element_wise(*parts, "")
    return list(pc.cast(joined, pa.binary()).to_pylist())
