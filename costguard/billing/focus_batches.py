"""A FOCUS export in CSV (plain or gzip) or Parquet as Arrow tables of about a given
number of lines, the same tables every time for the same sizes: the column reader
(focus_columns) and its digest helper (line_digests) each read the file through this.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from costguard.billing.bounded_input import check_parquet, open_bounded


def tables(path: Path, kind: str, width: int, sizes: tuple[int, int]) -> Iterator[Any]:
    """The file's tables of about `sizes[1]` lines, columns named c0, c1, ... for CSV (the
    same batches every time for the same sizes: line_digests' helper reads them too)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    from pyarrow import csv  # type: ignore[import-untyped,unused-ignore]

    block_bytes, batch_rows = sizes

    if kind == "parquet":
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

        with pq.ParquetFile(path) as parquet:
            check_parquet(path, parquet.metadata)
            for batch in parquet.iter_batches(batch_size=batch_rows):
                yield pa.Table.from_batches([batch])
        return

    # Arrow reads up to 32 blocks ahead of the parser: small blocks, gathered into tables of
    # `batch_rows` lines (a 32 MB block had Arrow hold 600 MB). A Python file, as Arrow's
    # own file stream read the whole file ahead, and a memory map's pages count as the
    # process's memory.
    names = [f"c{i}" for i in range(width)]  # the header may repeat a name
    with open_bounded(path, kind == "csv.gz") as raw, csv.open_csv(
            raw,
            read_options=csv.ReadOptions(column_names=names, skip_rows=1, use_threads=False,
                                         block_size=block_bytes),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False,
                quoted_strings_can_be_null=False)) as batches:
        held: list[Any] = []
        rows = 0
        for batch in batches:
            held.append(batch)
            rows += batch.num_rows
            if rows >= batch_rows:
                yield pa.Table.from_batches(held)
                held, rows = [], 0
        if held:
            yield pa.Table.from_batches(held)
