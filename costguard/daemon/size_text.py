"""`costguard db size` as a person reads it (80 columns) and as JSON (store/size.py measures)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from costguard.config import Settings
from costguard.policy.base import format_duration
from costguard.store.size import Sample, StoreSize, TableSize

_MIB = 2**20


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / _MIB:,.1f} MiB" if n >= _MIB else f"{n / 1024:,.0f} KiB"


def _each(value: float | None, unit: str) -> str:
    return "" if value is None else f"{value:,.0f} B a {unit}"


def _line(*parts: str) -> str:
    """An indented line of the parts that say something, the last (in brackets) after a
    space."""
    *said, note = parts
    return "    " + ", ".join(p for p in said if p) + (" " if any(said) else "") + note


def _kept(span: timedelta) -> str:
    days = span / timedelta(days=1)
    return f"{days:g} days" if days == int(days) else format_duration(span)


def _sampled(s: Sample, table: TableSize, what: str) -> str:
    bad = f"; {s.unreadable:,} did not decode" if s.unreadable else ""
    if not s.blobs and not s.unreadable:
        return f"(no {what} yet)"
    which = "all" if s.blobs + s.unreadable >= table.rows else "the newest"
    return f"({which} {s.blobs + s.unreadable:,} decoded{bad})"


def size_text(got: StoreSize, settings: Settings) -> list[str]:
    """The lines of `costguard db size`."""
    acc = settings.accounting
    rows, row_bytes = got.raw_rows()
    blocks = got.table("reading_blocks")
    history = got.table("reading_hours")
    free = (f", {_size(got.free_bytes)} of it free (reused as the store grows)"
            if got.free_bytes else "")
    lines = [f"{got.backend}: {_size(got.total_bytes)} in all{free}",
             f"bytes by table: {got.measured}", "",
             "Readings",
             f"  not settled yet: {rows:,} GPU-minutes as rows"
             + (f", {_each(row_bytes, 'row')}" if row_bytes is not None else "")]
    if blocks is not None:
        per = got.blocks.per_blob()
        since = f" from {got.oldest_block:%Y-%m-%d %H:00} UTC" if got.oldest_block else ""
        lines += [f"  raw minutes, kept {_kept(acc.readings_raw)} (accounting.readings_raw):",
                  f"    {blocks.rows:,} instance-hours in blocks{since}, {_size(blocks.bytes)}",
                  _line("" if per is None else f"{per:,.0f} readings a block",
                        _each(got.settled_per_minute(), "GPU-minute"),
                        _sampled(got.blocks, blocks, "blocks"))]
    if history is not None:
        per = got.history.per_blob()
        since = f" from {got.oldest_history:%Y-%m-%d %H:00} UTC" if got.oldest_history else ""
        lines += [f"  hourly history, kept {_kept(acc.readings_history)} "
                  "(accounting.readings_history):",
                  f"    {history.rows:,} instance-hours{since}, {_size(history.bytes)}",
                  _line("" if per is None else f"{per:,.1f} GPU-hours each",
                        _each(got.history_per_gpu_hour(), "GPU-hour"),
                        _sampled(got.history, history, "hours"))]
    lines += ["", f"{'Table':<28}{'rows':>16}{'bytes':>16}{'share':>8}"]
    total = sum(t.bytes or 0 for t in got.tables)
    for t in sorted(got.tables, key=lambda t: (-(t.bytes or 0), -t.rows, t.name)):
        share = f"{t.bytes / total:.0%}" if t.bytes is not None and total else ""
        lines.append(f"{t.name:<28}{t.rows:>16,}{_size(t.bytes):>16}{share:>8}")
    return lines


def _sample_json(s: Sample) -> dict[str, Any]:
    return {"decoded": s.blobs, "readings_or_gpu_hours": s.items, "gpu_minutes": s.minutes,
            "payload_bytes": s.payload_bytes, "unreadable": s.unreadable}


def size_json(got: StoreSize, settings: Settings) -> dict[str, Any]:
    """`costguard db size --format json`."""
    rows, row_bytes = got.raw_rows()
    return {
        "backend": got.backend, "measured": got.measured, "total_bytes": got.total_bytes,
        "free_bytes": got.free_bytes,
        "tables": [{"name": t.name, "rows": t.rows, "bytes": t.bytes} for t in got.tables],
        "readings": {
            "rows_gpu_minutes": rows, "bytes_per_row": row_bytes,
            "bytes_per_settled_gpu_minute": got.settled_per_minute(),
            "bytes_per_history_gpu_hour": got.history_per_gpu_hour(),
            "oldest_block": got.oldest_block.isoformat() if got.oldest_block else None,
            "oldest_history": got.oldest_history.isoformat() if got.oldest_history else None,
            "blocks_sample": _sample_json(got.blocks),
            "history_sample": _sample_json(got.history),
            "raw_kept": format_duration(settings.accounting.readings_raw),
            "history_kept": format_duration(settings.accounting.readings_history)}}
