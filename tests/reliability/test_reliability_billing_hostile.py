"""Billing files as an attacker or an unlucky operator hands them over: every kind of bad
line is skipped with its line number and reason (the file refused only under --strict),
never a traceback; a decompression bomb is refused in bounded memory. Each case failed on
the importer before: a traceback that killed the whole import, a wrong figure imported
without a word, or 4.2 GB of memory for a 2 MB gzip."""

from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from costguard.billing.importer import BillingImportError, import_focus
from costguard.costs.attribution import Attributor
from costguard.store.db import Database
from tests.costs.test_focus_real_exports import V12, row
from tests.reliability import figures

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DEEP = "[" * 100_000 + "]" * 100_000

# each: what the bad line holds, and words of the reason it is skipped with
BAD_LINES: list[tuple[str, dict[str, Any], str]] = [
    ("year 1 with an offset", {"ChargePeriodStart": "0001-01-01T00:00:00+05:00"},
     "'0001-01-01T00:00:00+05:00' is no time a cloud bills for"),
    ("year 9999 with an offset", {"ChargePeriodEnd": "9999-12-31T23:00:00-05:00"},
     "'9999-12-31T23:00:00-05:00' is no time a cloud bills for"),
    ("a 5,000-digit amount", {"BilledCost": "9" * 5000},
     "'9999999999999999999999999999999999999999'... (5,000 characters) is more than a "
     "trillion dollars"),
    ("Tags nested 100,000 deep", {"Tags": DEEP}, "Tags is not JSON a bill holds"),
    ("Tags with a 5,000-digit integer", {"Tags": '{"team": ' + "9" * 5000 + "}"},
     "a number of 5000 characters"),
    ("an amount with an underscore", {"BilledCost": "1_000"}, "'1_000' is not a number"),
    ("Arabic-Indic digits", {"BilledCost": "\u0661\u0662\u0663"}, "is not a number"),
    ("a period that ends before it starts", {"ChargePeriodStart": "2026-05-02T00:00:00Z",
                                             "ChargePeriodEnd": "2026-05-01T00:00:00Z"},
     "ends (2026-05-01 00:00) before it starts"),
    ("a period of 1,000 years", {"ChargePeriodEnd": "3026-05-01T00:00:00Z"},
     "is no time a cloud bills for"),
    ("a period of two years", {"ChargePeriodEnd": "2028-05-01T00:00:00Z"},
     "spans 731 days"),
]


def _csv_text(rows: list[dict[str, Any]], extra: str = "") -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=V12, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow(r)
    return out.getvalue() + extra


def _import(db: Database, path: Path, **kw: Any) -> Any:
    with db.session() as s:
        return import_focus(s, path, Attributor(), NOW, **kw)


@pytest.mark.parametrize(("kind", "bad", "reason"), BAD_LINES, ids=[b[0] for b in BAD_LINES])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_bad_line_is_skipped_by_its_number_and_reason(db: Database, tmp_path: Path,
                                                        kind: str, bad: dict[str, Any],
                                                        reason: str, fmt: str) -> None:
    lines = [row(), row(**bad), row(BilledCost="2")]
    if fmt == "csv":
        path = tmp_path / "focus.csv"
        path.write_text(_csv_text(lines))
        where = "focus.csv:3"
    else:
        path = tmp_path / "focus.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        where = "focus.jsonl:2"
    result = _import(db, path)
    ok = result.added == 2 and result.skipped_count == 1
    figures.count("billing: bad-line kinds skipped without a crash", ok)
    assert ok, (kind, result.skipped)
    assert result.skipped[0][0] == where
    assert reason in result.skipped[0][1], result.skipped
    with pytest.raises(BillingImportError, match=rf"{where}: .*--strict: nothing imported"):
        _import(db, path, strict=True)


def test_a_row_with_a_cell_more_than_its_header_is_skipped(db: Database,
                                                           tmp_path: Path) -> None:
    text = _csv_text([row()])
    extra = text.splitlines()[1] + ",one-more\n"
    path = tmp_path / "focus.csv"
    path.write_text(text + extra + _csv_text([row(BilledCost="3")]).split("\n", 1)[1])
    result = _import(db, path)
    assert (result.added, result.skipped) == (2, [("focus.csv:3", f"1 more cells than the "
                                                   f"header's {len(V12)}")])


def _bomb(path: Path, expanded: int, line_breaks: bool) -> Path:
    """A FOCUS header, one line's first cells, then a quoted cell of `expanded` bytes of
    `a` that never closes (with a line break every KiB when `line_breaks`)."""
    header = ",".join(V12) + "\n"
    block = ((b"a" * 1023 + b"\n") if line_breaks else b"a" * 1024) * 1024
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header.encode())
        f.write(b"1," * (len(V12) - 1) + b'"')  # the last cell opens a quote, never closed
        for _ in range(expanded // len(block)):
            f.write(block)
    return path


@pytest.mark.parametrize("line_breaks", [False, True], ids=["one line", "quoted lines"])
def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path: Path,
                                                           line_breaks: bool) -> None:
    bomb = _bomb(tmp_path / "bomb.csv.gz", 2 << 30, line_breaks)
    assert bomb.stat().st_size < 16 << 20  # 2 GiB expanded, a few MB on disk
    (tmp_path / "costguard.yaml").write_text(
        f"database_url: sqlite:///{tmp_path / 'cg.db'}\npolicy_paths: []\n")
    # the import in a child of a child: ru_maxrss of RUSAGE_CHILDREN is that import's alone
    probe = textwrap.dedent(f"""
        import resource, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "costguard.entry", "billing", "import",
                               {str(bomb)!r}], capture_output=True, text=True,
                              cwd={str(tmp_path)!r})
        print(done.returncode)
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        print(done.stderr + done.stdout)
    """)
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=300, check=True)
    code, peak_kb, output = answer.stdout.split("\n", 2)
    peak_mb = int(peak_kb) / 1024
    shape = "quoted lines" if line_breaks else "one line"
    figures.measure(f"billing: peak RSS of a 2 GiB gzip bomb import ({shape})",
                    round(peak_mb), "MB", "< 200")
    assert code == "2", output
    assert "Traceback" not in output
    said = " ".join(output.split())
    assert ("runs past 8 MiB without a line break" in said or "field larger than field limit"
            in said or "expands more than 200 times" in said), said
    assert peak_mb < 200, peak_mb


def test_a_parquet_bomb_is_refused_from_its_metadata(db: Database, tmp_path: Path) -> None:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    columns = {name: [str(v)] for name, v in row().items()}
    columns["Tags"] = ["a" * (80 << 20)]  # one cell of 80 MiB: a few KiB compressed
    path = tmp_path / "focus.parquet"
    pq.write_table(pa.table(columns), path, compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(BillingImportError, match=r"focus.parquet: row group 0, column Tags "
                                                 r"expands to 80 MiB from \d+ KiB"):
        _import(db, path)


@pytest.mark.parametrize("cut", ["mid-stream", "header only"])
def test_a_gzip_cut_short_is_one_line_and_imports_nothing(tmp_path: Path, cut: str,
                                                          db_url: str) -> None:
    """A download or a copy cut short: gzip raised EOFError, which click takes for Ctrl-D,
    and the command said only "Aborted."."""
    whole = gzip.compress(_csv_text([row(BilledCost=str(n)) for n in range(1, 3000)]).encode())
    path = tmp_path / "bill.csv.gz"
    path.write_bytes(whole[:len(whole) // 2] if cut == "mid-stream" else whole[:12])
    Database(db_url).dispose()
    done = subprocess.run(
        [sys.executable, "-m", "costguard.entry", "--database", db_url, "billing", "import",
         str(path)], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Aborted" not in done.stderr and "Traceback" not in done.stderr
    assert ("error: bill.csv.gz: the gzip ends before its end: the download or the copy was "
            "cut short; fetch the file again (nothing of it was imported)") in done.stderr
    from sqlmodel import select

    from costguard.store.bill_tables import BillingCostRow

    db = Database(db_url)
    with db.session() as s:
        assert s.exec(select(BillingCostRow)).first() is None
    db.dispose()
