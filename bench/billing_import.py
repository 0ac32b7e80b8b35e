"""Billing import: lines per second and peak RSS of `costguard billing import` on generated
FOCUS 1.2 exports, CSV and Parquet, at two sizes (so the memory's growth with the file's
size is visible), into a fresh SQLite store. Target: >= 200,000 lines/s on 2 cores, RSS
flat in the file's size.

The file is hourly usage lines of 20,000 instances in 50 accounts (10 days at 5 M lines),
each instance with its own tags (5 teams and untagged), written in batches. Each import
runs in its own process (the installed interpreter, `python -c`), so the peak RSS is that
import's alone.
`COSTGUARD_BENCH_BILLING_LINES` (default 5,000,000) sets the larger size; the smaller is
a fifth of it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import benchmark

COLUMNS = ["BillingAccountId", "SubAccountId", "ServiceProviderName", "ChargePeriodStart",
           "ChargePeriodEnd", "ChargeCategory", "ChargeClass", "BilledCost", "EffectiveCost",
           "BillingCurrency", "ServiceName", "ResourceId", "RegionId", "Tags"]
TEAMS = ["research", "vision", "nlp", "ads", "search"]
T0 = datetime(2026, 10, 1, tzinfo=UTC)
_BATCH = 50_000
_IMPORT = """
import resource, sys, time
from datetime import UTC, datetime
from pathlib import Path
from costguard.costs.attribution import Attributor
from costguard.billing.importer import import_focus
from costguard.store.db import Database
db = Database(f"sqlite:///{sys.argv[2]}")
t0 = time.perf_counter()
with db.session() as s:
    r = import_focus(s, Path(sys.argv[1]), Attributor(), datetime.now(UTC))
print(r.added, time.perf_counter() - t0,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _rows(start: int, count: int) -> list[list[str]]:
    hours = [(T0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ") for h in range(721)]
    tags = [json.dumps({"team": t, "env": "prod"}) for t in TEAMS] + ["{}"]
    out = []
    for i in range(start, start + count):
        h = (i // 20_000) % 720
        out.append(["100000000001", f"2000000000{i % 50:02d}", "AWS", hours[h], hours[h + 1],
                    "Usage", "", f"{(i % 997) / 10:.6f}", f"{(i % 997) / 12:.6f}", "USD",
                    "Amazon Elastic Compute Cloud",
                    f"arn:aws:ec2:us-east-1:2000000000{i % 50:02d}:instance/i-{i % 20_000:08x}",
                    "us-east-1", tags[(i % 20_000) % 6]])
    return out


def write_csv(path: Path, lines: int) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for start in range(0, lines, _BATCH):
            writer.writerows(_rows(start, min(_BATCH, lines - start)))


def write_parquet(path: Path, lines: int) -> None:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    schema = pa.schema([(c, pa.float64() if c.endswith("Cost") else
                         pa.timestamp("ms", tz="UTC") if c.startswith("ChargePeriod") else
                         pa.string()) for c in COLUMNS])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, lines, _BATCH):
            rows = _rows(start, min(_BATCH, lines - start))
            columns = list(zip(*rows, strict=True))
            arrays = []
            for name, values in zip(COLUMNS, columns, strict=True):
                if name.endswith("Cost"):
                    arrays.append(pa.array([float(v) for v in values], pa.float64()))
                elif name.startswith("ChargePeriod"):
                    arrays.append(pa.array([datetime.fromisoformat(v.replace("Z", "+00:00"))
                                            for v in values], pa.timestamp("ms", tz="UTC")))
                else:
                    arrays.append(pa.array(values, pa.string()))
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))


def _import(path: Path, store: Path) -> tuple[int, float, float, float]:
    """(lines added, seconds, peak RSS MiB, the digest helper's peak RSS MiB) of one import
    in a fresh process."""
    done = subprocess.run([sys.executable, "-c", _IMPORT, str(path), str(store)],
                          capture_output=True, text=True, check=True)
    added, seconds, peak_kib, helper_kib = done.stdout.split()
    return int(added), float(seconds), int(peak_kib) / 1024, int(helper_kib) / 1024


@benchmark("billing-import", description=(
    "costguard billing import of a generated FOCUS 1.2 export (CSV and Parquet; a fifth of "
    "the lines, then all) into SQLite, each in a fresh process: lines/s and peak RSS (of "
    "the importing process, and of its digest helper, a second process for files of "
    "150,000 lines and more). "
    "Target >= 200,000 lines/s on 2 cores, RSS flat in the file's size."))
def billing_import() -> list[dict[str, object]]:
    big = int(os.environ.get("COSTGUARD_BENCH_BILLING_LINES", "5000000"))
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, write in (("csv", write_csv), ("parquet", write_parquet)):
            for lines in (big // 5, big):
                path = Path(tmp) / f"focus-{lines}.{kind}"
                t0 = time.perf_counter()
                write(path, lines)
                written = time.perf_counter() - t0
                added, seconds, rss, helper = _import(path, Path(tmp) / f"{kind}-{lines}.db")
                assert added == lines, f"{added} of {lines} lines imported"
                rows.append({"format": kind, "lines": f"{lines:,}",
                             "file_mb": round(path.stat().st_size / 2**20),
                             "import_s": round(seconds, 1),
                             "lines_per_s": f"{lines / seconds:,.0f}",
                             "peak_rss_mb": round(rss), "helper_rss_mb": round(helper),
                             "meets_200k": lines / seconds >= 200_000,
                             "generate_s": round(written, 1)})
                path.unlink()
    return rows
