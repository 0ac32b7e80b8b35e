"""A FOCUS CSV export imported a column at a time (Apache Arrow's CSV reader and compute
kernels), for speed: a bill has tens of millions of lines, and reading them one Python dict
at a time managed ~20,000 a second.

Every value a bill repeats (times, tag sets with their attribution, categories, providers)
is parsed once per batch, by the same functions as the line-by-line reader (billing.lines);
amounts become micro-dollars in Arrow decimals, rounded half away from zero as there;
lines are keyed exactly as there (a file imported one way is known to the other), and
summed per day with Arrow's group-by before they reach the store.

This reader takes the well-formed case only. A file with anything it leaves to the
line-by-line reader (a value that does not parse, a null amount, a row of the wrong width,
a currency other than US dollars, text that is not UTF-8) raises `NotColumnar`; the caller
undoes what it stored and reads the file line by line, which skips or refuses each bad
line by its number, as before.
"""

from __future__ import annotations

import hashlib
import queue
import sys
import threading
from array import array
from collections.abc import Generator, Iterator, Sequence
from contextlib import closing
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from costguard.billing.arrow_text import (
    Unsupported,
    as_text,
    by_value,
    dictionary_of,
    pairs_of,
)
from costguard.billing.errors import BillingImportError
from costguard.billing.focus_batches import tables
from costguard.billing.focus_files import FocusFile, final_names
from costguard.billing.line_digests import Digests
from costguard.billing.line_keys import LineKeys, Replacing
from costguard.billing.lines import (
    BASE_CURRENCY,
    KEPT_CHARS,
    MAX_CHARGE_PERIOD,
    MAX_LINE_MICROS,
    NULLS,
    PROVIDER_COLUMNS,
    STORED_TEXT,
    LineReader,
    category_of,
    fold_schemes,
    provider_of,
)
from costguard.billing.store import (
    GROUP_COLUMNS,
    ImportResult,
    add_day_sums,
    hash64,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

_BLOCK_BYTES = 1 << 20
_BATCH_ROWS = 100_000
_HOLD_GROUPS = 200_000  # day sums held across batches before they are stored
_ATTRIBUTION = ("team", "project", "env", "cost-center")


class NotColumnar(Exception):
    """The file has something only the line-by-line reader handles (the reason)."""


def reads(source: FocusFile) -> bool:
    """Whether this reader takes the file: a FOCUS export (not a native one), CSV or
    Parquet."""
    return source.native is None and source.kind in ("csv", "csv.gz", "parquet")


def import_columns(session: Session, source: FocusFile, reader: LineReader,
                   result: ImportResult, seen: Any, now: datetime,
                   replacing: Replacing | None = None) -> None:
    """Import `source` into the store, or raise NotColumnar (what was stored is the
    caller's to undo). `seen` counts identical lines (billing._Occurrences); `replacing`:
    the days the file covers are emptied of earlier imports first (line_keys)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    names = _final_names(source.columns)
    pending: list[pa.Table] = []  # day sums not yet stored: a day spans batches
    held = 0
    keys = LineKeys(session, "focus", replacing)
    try:
        # (closing: the batches' reader thread stops when this does, whatever it raises)
        with Digests(source.path, source.kind, len(source.columns), names,
                     _sizes()) as digests, closing(_batches(source)) as batches:
            for batch in batches:
                table = batch.rename_columns(names)
                sums = _import_batch(table, digests.of(table), reader, result, seen, keys)
                pending.append(sums)
                held += sums.num_rows
                if held >= _HOLD_GROUPS:
                    _store_sums(session, pending, result, now)
                    pending, held = [], 0
        _store_sums(session, pending, result, now)
        keys.finish()
    except pa.ArrowException as exc:
        raise NotColumnar(f"a value the column reader cannot read: {exc}") from None
    except (BillingImportError, Unsupported) as exc:
        raise NotColumnar(str(exc)) from None


def _final_names(columns: Sequence[str]) -> list[str]:
    """The columns under the names the line-by-line reader keys them by."""
    if len(set(columns)) != len(columns):
        raise NotColumnar("a column name appears twice")
    return final_names(columns)


def _batches(source: FocusFile) -> Generator[pa.Table, None, None]:
    """The file's batches, the next one parsed on another thread (Arrow lets go of the GIL)
    while this one is imported: one batch ahead, where Arrow's own threaded reader read
    ahead by hundreds of megabytes."""
    ahead: queue.Queue[Any] = queue.Queue(maxsize=1)
    done = threading.Event()

    def hand_over(item: Any) -> bool:
        while not done.is_set():
            try:
                ahead.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in _parsed(source):
                if not hand_over(batch):
                    return
            hand_over(_END)
        except BaseException as exc:  # handed to the importing thread, which raises it
            hand_over(exc)

    reader = threading.Thread(target=read, name="focus-csv", daemon=True)
    reader.start()
    try:
        while (item := ahead.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        done.set()
        reader.join()


_END = object()


def _parsed(source: FocusFile) -> Iterator[pa.Table]:
    return tables(source.path, source.kind, len(source.columns), _sizes())


def _sizes() -> tuple[int, int]:
    """How the file is cut: Arrow's block and the lines of a table."""
    return _BLOCK_BYTES, _BATCH_ROWS


def _import_batch(table: pa.Table, digests: bytes, reader: LineReader,
                  result: ImportResult, seen: Any, line_keys: LineKeys) -> pa.Table:
    """Record the keys of the batch's new lines; their sums per day and group."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    n = table.num_rows
    lines = _lines(table, reader)
    days = pc.cast(lines["day"], pa.int32()).to_pylist()
    known = line_keys.add(days, _keys(digests, seen))
    if any(known):
        lines = lines.filter(pa.array([not k for k in known]))
    result.read += n
    result.added += lines.num_rows
    result.duplicates += n - lines.num_rows
    return _sums(lines, count="billed_micros_count")


_GROUP = ["day", *GROUP_COLUMNS]
_SUM_COLUMNS = [*_GROUP, "charge_start", "charge_end", "billed_micros", "effective_micros",
                "lines"]


def _sums(table: pa.Table, count: str) -> pa.Table:
    """`table`'s rows summed per day and group, as _SUM_COLUMNS (`count`: how to count the
    lines: the count of a column of lines, or the sum of a column of sums)."""
    how = "count" if count.endswith("_count") else "sum"
    summed = table.group_by(_GROUP, use_threads=False).aggregate([
        ("charge_start", "min"), ("charge_end", "max"), ("billed_micros", "sum"),
        ("effective_micros", "sum"), (count.removesuffix(f"_{how}"), how)])
    return summed.rename_columns([*_GROUP, "charge_start", "charge_end", "billed_micros",
                                  "effective_micros", "lines"]).select(_SUM_COLUMNS)


def _store_sums(session: Session, pending: list[pa.Table], result: ImportResult,
                now: datetime) -> None:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    if not pending:
        return
    merged = pa.concat_tables(pending)
    if len(pending) > 1:
        merged = _sums(merged, count="lines_sum")
    columns = [_pylist(merged[c]) for c in _SUM_COLUMNS]
    add_day_sums(session, "focus", zip(*columns, strict=True), now, _group_keys(merged))
    at = {c: i for i, c in enumerate(_SUM_COLUMNS)}
    for billed, category, provider, currency, start, end in zip(
            columns[at["billed_micros"]], columns[at["charge_category"]],
            columns[at["provider"]], columns[at["currency"]], columns[at["charge_start"]],
            columns[at["charge_end"]], strict=True):
        result.cover(start, end)
        result.billed_micros += billed
        result.by_category[category or "(none)"] += billed
        result.by_provider[provider or "(none)"] += billed
        result.currencies.add(currency)


def _group_keys(sums: pa.Table) -> list[int]:
    """store.group_key of each row (its day and GROUP_COLUMNS), the text it hashes
    joined by Arrow: the per-row Python was a tenth of an import."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    joined = pc.binary_join_element_wise(
        as_text(sums["day"]), *(sums[c] for c in GROUP_COLUMNS), "\x1f",
        null_handling="replace", null_replacement="\x00")
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    return [from_bytes(blake2b(text, digest_size=8).digest(), "big", signed=True)
            for text in pc.cast(joined, pa.binary()).to_pylist()]


def _pylist(values: Any) -> list[Any]:
    """`values` as Python values: one object per distinct text, day or time (the groups
    repeat them; making each anew was most of a flush)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    if pa.types.is_integer(values.type):
        return list(values.to_pylist())
    encoded = dictionary_of(values)
    distinct = [*encoded.dictionary.to_pylist(), None]
    at = pc.fill_null(encoded.indices, len(distinct) - 1).to_pylist()
    return list(map(distinct.__getitem__, at))


def _keys(digests: bytes, seen: Any) -> list[int]:
    """Each line's key, as billing.parse_focus gives it: its digest (line_digests, 8 bytes
    big-endian a line, read as a signed integer), and a hash of the digest and its
    occurrence where the same line came before in the file (`seen` counts the integers)."""
    packed = array("q", digests)
    if sys.byteorder == "little":
        packed.byteswap()
    keys = packed.tolist()
    counts = seen.count_all(keys)
    if counts.count(1) == len(counts):  # the usual case: no line seen before
        return keys
    return [k if n == 1 else hash64(k.to_bytes(8, "big", signed=True) + b"#%d" % n)
            for k, n in zip(keys, counts, strict=True)]


def _lines(table: pa.Table, reader: LineReader) -> pa.Table:
    """The lines as billing_costs' columns, one row a line, plus `day`."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    def text(name: str) -> pa.ChunkedArray | pa.Array:
        if name not in table.column_names:
            return pa.nulls(table.num_rows, pa.string())
        return by_value(as_text(table[name]), _opt)

    for name in STORED_TEXT:  # what is stored as it is written: NUL is no text a store takes
        if name in table.column_names and pc.any(
                pc.match_substring(as_text(table[name]), "\x00")).as_py():
            raise NotColumnar(f"a {name} holds a NUL character (those lines are skipped)")
    account = pc.coalesce(text("SubAccountId"), text("BillingAccountId"))
    currency = pc.utf8_upper(pc.coalesce(text("BillingCurrency"), pa.scalar(BASE_CURRENCY)))
    if pc.any(pc.not_equal(currency, pa.scalar(BASE_CURRENCY))).as_py():
        raise NotColumnar("a currency other than US dollars (converted line by line)")
    provider = _mapped(pc.coalesce(*(text(c) for c in PROVIDER_COLUMNS)), provider_of)
    category = _mapped(as_text(table["ChargeCategory"]) if "ChargeCategory" in table.column_names
                       else pa.nulls(table.num_rows, pa.string()),
                       lambda v: category_of(v, "ChargeCategory"), pa.string())
    start = _time(table["ChargePeriodStart"], reader, "ChargePeriodStart")
    end = _time(table["ChargePeriodEnd"], reader, "ChargePeriodEnd")
    span = pc.subtract(end, start)
    if (pc.any(pc.less(span, pa.scalar(timedelta(0)))).as_py()
            or pc.any(pc.greater(span, pa.scalar(MAX_CHARGE_PERIOD))).as_py()):
        # the line reader skips those lines and names each (lines.check_period)
        raise BillingImportError("a charge period that ends before it starts or spans more "
                                 "than a year")
    day = pc.cast(start, pa.date32())
    billed = _micros(table["BilledCost"])
    if billed.null_count:
        raise NotColumnar("a BilledCost is empty")
    effective = (pc.coalesce(_micros(table["EffectiveCost"]), billed)
                 if "EffectiveCost" in table.column_names else billed)
    dims = _attribution(table, account, reader)
    columns = {"day": day, "provider": provider, "account": account,
               "region": text("RegionId"), "service": text("ServiceName"),
               "resource_id": text("ResourceId"), **dims, "charge_category": category,
               "charge_class": text("ChargeClass"), "currency": currency,
               "charge_start": start, "charge_end": end, "billed_micros": billed,
               "effective_micros": effective}
    for name, most in KEPT_CHARS.items():  # as lines.kept cuts them
        if (pc.max(pc.utf8_length(columns[name])).as_py() or 0) > most:
            columns[name] = pc.utf8_slice_codeunits(columns[name], 0, most)
    return pa.table(columns)


def _time(values: Any, reader: LineReader, name: str) -> Any:
    """UTC times: a timestamp column as it is (no zone: UTC, as lines.parse_time
    reads it), any other parsed once per distinct value."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    utc = pa.timestamp("us", tz="UTC")
    if pa.types.is_timestamp(values.type):
        if values.null_count:
            raise NotColumnar(f"a {name} is empty")
        return values.cast(utc)
    return _mapped(as_text(values), lambda v: reader.time(v, name), utc)


def _opt(values: Any) -> Any:
    """Trimmed text, null where empty or a null written as text (lines._opt)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    trimmed = pc.utf8_trim_whitespace(values)
    is_null = pc.is_in(pc.utf8_lower(trimmed), value_set=pa.array(sorted(NULLS)))
    return pc.if_else(is_null, pa.scalar(None, pa.string()), trimmed)


def _mapped(values: Any, parse: Any, kind: Any = None) -> Any:
    """`parse` of each distinct value (None stays None), spread over the rows."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    return by_value(values, lambda distinct: pa.array(
        [parse(v) for v in distinct.to_pylist()], kind or pa.string()))


def _micros(values: Any) -> Any:
    """Amounts as integer micro-dollars, half away from zero (lines.micros); null for
    an empty cell or a null written as text. Worked out once per distinct amount."""
    return by_value(values, _distinct_micros)


_LONGEST_AMOUNT = 64  # characters: a trillion dollars to 40 places, a sign and a point


def _distinct_micros(values: Any) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    # 40 places: a double's shortest text below a cent has up to 20 and more
    if pa.types.is_decimal(values.type):
        exact = values
    else:
        text = _opt(as_text(values))
        # Arrow reads 5,000 nines as -1: text that long is the line reader's to refuse
        longest = pc.max(pc.utf8_length(text)).as_py()
        if longest is not None and longest > _LONGEST_AMOUNT:
            raise BillingImportError(f"an amount written in more than {_LONGEST_AMOUNT} "
                                     "characters")
        exact = pc.cast(text, pa.decimal256(76, 40))
    rounded = pc.cast(pc.round(exact, ndigits=6, round_mode="half_towards_infinity"),
                      pa.decimal128(30, 6))
    scaled = pc.multiply(rounded, pa.scalar(Decimal(1_000_000), pa.decimal128(7, 0)))
    out = pc.cast(scaled, pa.int64())
    top = pc.max(pc.abs_checked(out)).as_py()
    if top is not None and top > MAX_LINE_MICROS:  # the line reader skips and names them
        raise BillingImportError("an amount of more than a trillion dollars")
    return out


def _attribution(table: pa.Table, account: Any, reader: LineReader) -> dict[str, Any]:
    """team, project, env and cost_center of each line, from its tag set and account:
    worked out once per distinct pair by the attribution rules."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    def text_of(name: str) -> tuple[Any, bool]:
        """A tag column as text (empty where null), and whether it was a nested one."""
        column = (table[name] if name in table.column_names
                  else pa.nulls(table.num_rows, pa.string()))
        nested = pa.types.is_map(column.type) or pa.types.is_list(column.type)
        return pc.fill_null(as_text(column), ""), nested

    def tag_set(text: str, nested: bool, name: str) -> dict[str, str]:
        return fold_schemes(pairs_of(text)) if nested else reader.tag_set(text, name)

    tags, nested = text_of("Tags")
    # AWS's FOCUS 1.0 keeps cost categories in a column of their own, below every tag
    categories, nested_categories = text_of("x_CostCategories")
    pairs = pc.binary_join_element_wise(tags, categories, pc.fill_null(account, "\x00"),
                                        "\x1e")
    encoded = pc.dictionary_encode(pairs)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    found: dict[str, list[str | None]] = {d: [] for d in _ATTRIBUTION}
    for pair in encoded.dictionary.to_pylist():
        tag_text, category_text, account_id = pair.rsplit("\x1e", 2)
        found_tags = tag_set(tag_text, nested, "Tags")
        if category_text:
            found_tags = {**tag_set(category_text, nested_categories, "x_CostCategories"),
                          **found_tags}
        dims = reader.attribute(found_tags, None if account_id == "\x00" else account_id)
        for d in _ATTRIBUTION:
            found[d].append(dims.get(d))
    return {d.replace("-", "_"): pc.take(pa.array(found[d], pa.string()), encoded.indices)
            for d in _ATTRIBUTION}
