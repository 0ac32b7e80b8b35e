"""A call's readings as rows of plain values (`MinuteRows`): what a cloud's metric answer
becomes, checked a column at a time (`providers.cloud_readings.validated`) and handed to the
store (`store.readings.write_minutes`) and the reading window (`store.window`) without a
`GpuMinute` model per reading.

A cold cycle at organisation scale reads millions of cloud readings. Built one model each
(from a field dict each), they cost more to make than to store: the dict, the model's
validation, then 28 attributes read back from it for the store's row and 14 for the
window's record. Rows keep a reading's values in one tuple, in the order of its `names`
(the seven of `LEAD` first, then the value fields the call's metrics give, in `GpuMinute`'s
order): the store binds them as they are and the window packs them by position.

The first cycle's split read decides from the rows too (as the window's light readings,
`store.packed.row_reading`); anything else that asks for a reading (an observer, a test)
gets a `GpuMinute` built from its row, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from typing import Annotated, Any, overload

from pydantic import ConfigDict, TypeAdapter

from costguard.model import GpuMinute

# every row begins with these, in this order: a reading's key, where it came from, and the
# minutes and samples it covers (the fields a reading always has)
LEAD = ("provider", "instance_id", "gpu_index", "minute", "source", "span_minutes", "samples")
PROVIDER, INSTANCE, GPU, MINUTE, SOURCE, SPAN, SAMPLES = range(len(LEAD))
_ORDER = {name: n for n, name in enumerate(GpuMinute.model_fields)}


def names_of(fields: Iterable[str]) -> tuple[str, ...]:
    """`LEAD` and the value `fields`, in `GpuMinute`'s order (the order its validation reports
    the first invalid field in). Raises KeyError for a name no reading has."""
    values = sorted({f for f in fields if f not in LEAD}, key=_ORDER.__getitem__)
    return LEAD + tuple(values)


@cache
def _rows_named(names: tuple[str, ...]) -> bool:
    """Whether `names` name readings' rows: `LEAD`, then value fields in the model's order
    (asked for every call's rows: a handful of distinct answers)."""
    try:
        return names == names_of(names)
    except KeyError:
        return False


class MinuteRows(Sequence[GpuMinute]):
    """Readings as rows: `rows[i][j]` is reading i's value of `names[j]` (None: not given).
    Iterated or indexed, it hands out `GpuMinute`s (built from the row: the rows are valid
    readings, checked when they were made)."""

    __slots__ = ("names", "rows")

    def __init__(self, names: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        if not _rows_named(names):
            raise ValueError(f"not the names of readings' rows: {names}")
        self.names = names
        self.rows = rows

    @classmethod
    def of(cls, minutes: Iterable[GpuMinute]) -> MinuteRows:
        """`minutes` as rows: the fields any of them was given."""
        given = list(minutes)
        names = names_of({f for m in given for f in m.model_fields_set})
        return cls(names, [tuple(getattr(m, n) for n in names) for m in given])

    @classmethod
    def joined(cls, parts: Sequence[MinuteRows], names: tuple[str, ...]) -> MinuteRows:
        """One call's parts (its scopes, its spans), each of `names`, as one."""
        rows: list[tuple[Any, ...]] = []
        for part in parts:
            if part.names != names:
                raise ValueError(f"rows of {part.names} joined to rows of {names}")
            rows += part.rows
        return cls(names, rows)

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> GpuMinute: ...

    @overload
    def __getitem__(self, index: slice) -> MinuteRows: ...

    def __getitem__(self, index: int | slice) -> GpuMinute | MinuteRows:
        if isinstance(index, slice):
            return MinuteRows(self.names, self.rows[index])
        return self.minute(self.rows[index])

    def __iter__(self) -> Iterator[GpuMinute]:
        return map(self.minute, self.rows)

    def minute(self, row: tuple[Any, ...]) -> GpuMinute:
        """One row as the reading it is."""
        return GpuMinute.model_validate(
            {n: v for n, v in zip(self.names, row, strict=True) if v is not None})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __add__(self, other: Iterable[GpuMinute]) -> list[GpuMinute]:
        """The readings of both, as a list's `+` gives them (rows of the same names are
        joined with `joined`)."""
        return [*self, *other]

    def __radd__(self, other: Iterable[GpuMinute]) -> list[GpuMinute]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"MinuteRows({len(self.rows)} readings of {', '.join(self.names[len(LEAD):])})"


# a reading's fields checked as the model checks them (`providers.cloud_readings.validated`)
_CHECKS = ConfigDict(allow_inf_nan=GpuMinute.model_config.get("allow_inf_nan", True))


def _kind(name: str) -> Any:
    """`GpuMinute`'s field `name`: its type and bounds, as one annotation."""
    info = GpuMinute.model_fields[name]
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


@cache
def value_check(name: str) -> TypeAdapter[Any]:
    """One value of `GpuMinute`'s field `name`, checked as the model checks it."""
    return TypeAdapter(_kind(name), config=_CHECKS)


@cache
def column_check(name: str) -> TypeAdapter[list[Any]]:
    """A column of `GpuMinute`'s field `name`, each value checked as the model checks it:
    one call for the column (pydantic's core), not one per value."""
    return TypeAdapter(list[_kind(name)], config=_CHECKS)  # type: ignore[arg-type,misc]
