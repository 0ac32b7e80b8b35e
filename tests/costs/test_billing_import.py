"""Billing import: FOCUS CSV exports and Cost Explorer (a loopback moto server), and the
billed-versus-estimated gap per team."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import boto3
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto.server import ThreadedMotoServer

from costguard.billing.importer import (
    BillingImportError,
    _Occurrences,
    import_cost_explorer,
    import_focus,
)
from costguard.billing.lines import micros
from costguard.costs.attribution import Attributor
from costguard.report.queries import spend
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.costs.fleet import T0, add_interval, billing_lines, instance

NOW = datetime(2026, 3, 20, tzinfo=UTC)
HEADER = ("BilledCost,EffectiveCost,ChargePeriodStart,ChargePeriodEnd,ResourceId,ServiceName,"
          "ProviderName,SubAccountId,RegionId,Tags\n")


def focus_line(billed: str, team: str | None, resource: str = "i-0abc") -> str:
    tags = json.dumps({"team": team} if team else {}).replace('"', '""')
    return (f'{billed},{billed},2026-03-08T00:00:00Z,2026-03-09T00:00:00Z,{resource},'
            f'Amazon Elastic Compute Cloud,AWS,111111111111,us-east-1,"{tags}"\n')


def test_focus_csv_import_is_attributed_idempotent_and_compared_per_team(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "focus.csv"
    export.write_text(HEADER + focus_line("100.005", "research") + focus_line("100.005", "research")
                      + focus_line("7.25", None, "vol-1") + focus_line("40", "vision"))
    with db.session() as s:
        first = import_focus(s, export, Attributor(), NOW)
    with db.session() as s:
        again = import_focus(s, export, Attributor(), NOW)
        record_inventory(s, "aws", [instance("i-0abc", "p4d.24xlarge", team="research")
                                    .model_copy(update={"provider": "aws"})], T0, complete=True)
        add_interval(s, "i-0abc", T0, 4, 20.0, team="research", provider="aws")  # est. $80
    assert (first.added, first.billed_micros) == (4, 247_260_000)  # identical lines both count
    assert (again.added, again.duplicates) == (0, 4)
    day = datetime(2026, 3, 8, tzinfo=UTC)
    with db.session() as s:
        rep = spend(s, ["team"], day, day + timedelta(days=1), compare="billed")
    # i-0abc is watched: compared under each line's team; the volume is not compared
    billed = {r.key[0]: (r.cost_micros, r.billed_micros) for r in rep.rows}
    assert billed == {"research": (80_000_000, 200_010_000), "vision": (0, 40_000_000)}
    assert rep.billed_not_compared == (("aws", "Amazon Elastic Compute Cloud", 7_250_000),)
    assert (rep.total.billed_micros, rep.bill_total_micros) == (240_010_000, 247_260_000)


def test_a_file_that_is_not_focus_names_the_missing_columns(db: Database, tmp_path: Path) -> None:
    export = tmp_path / "cur.csv"
    export.write_text("lineItem/UnblendedCost,lineItem/UsageStartDate\n1.0,2026-03-08\n")
    with db.session() as s, pytest.raises(BillingImportError, match=r"missing column.*BilledCost"):
        import_focus(s, export, Attributor(), NOW)


def test_a_bad_amount_is_skipped_naming_its_line_and_strict_refuses_it(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "focus.csv"
    export.write_text(HEADER + focus_line("12", "a") + focus_line("twelve", "b"))
    with db.session() as s, pytest.raises(BillingImportError, match=r"focus.csv:3.*'twelve'"):
        import_focus(s, export, Attributor(), NOW, strict=True)
    assert billing_lines(db) == []
    with db.session() as s:
        result = import_focus(s, export, Attributor(), NOW)
    assert (result.added, result.skipped_count) == (1, 1)
    assert result.skipped == [("focus.csv:3", "BilledCost: 'twelve' is not a number")]


@pytest.fixture
def moto_ce() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_cost_explorer_spend_per_team_tag_is_imported_once(db: Database, moto_ce: str) -> None:
    result = {"results": [{"ResultsByTime": [
        {"TimePeriod": {"Start": "2026-03-08", "End": "2026-03-09"}, "Estimated": False,
         "Groups": [
             {"Keys": ["team$research"], "Metrics": {"UnblendedCost": {"Amount": "1234.5678",
                                                                          "Unit": "USD"}}},
             {"Keys": ["team$"], "Metrics": {"UnblendedCost": {"Amount": "10", "Unit": "USD"}}},
         ]}]}]}
    queue = f"{moto_ce}/moto-api/static/ce/cost-and-usage-results"
    httpx.post(queue, json=result).raise_for_status()
    ce = boto3.client("ce", region_name="us-east-1", endpoint_url=moto_ce,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    with db.session() as s:
        got = import_cost_explorer(s, ce, date(2026, 3, 8), date(2026, 3, 9), NOW)
    with db.session() as s:
        again = import_cost_explorer(s, ce, date(2026, 3, 8), date(2026, 3, 9), NOW)
    assert (got.added, got.billed_micros) == (2, 1_244_567_800)
    assert again.added == 0
    day = datetime(2026, 3, 8, tzinfo=UTC)
    with db.session() as s:
        rep = spend(s, ["team"], day, day + timedelta(days=1), compare="billed")
    assert {r.key[0]: r.billed_micros for r in rep.rows} == {
        "research": 1_234_567_800, "unattributed": 10_000_000}


@given(st.decimals(allow_nan=False, allow_infinity=False, places=9,
                   min_value=-10**9, max_value=10**9))
def test_plain_decimal_text_reads_exactly_as_decimal_rounds_it(value: Decimal) -> None:
    # the integer fast path must agree with Decimal's ROUND_HALF_UP, sign and all
    text = f"{value:f}"
    exact = int((Decimal(text) * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    assert micros(text, "x") == exact
    assert micros(f"+{text.lstrip('-')}", "x") == abs(exact)


@pytest.mark.parametrize("text", ["1e-3", " 4.5 ", "1.2.3", "-", ".", "", "NULL"])
def test_text_the_fast_path_declines_goes_through_decimal(text: str) -> None:
    try:
        expected: int | str = int((Decimal(text.strip()) * 1_000_000).quantize(
            Decimal(1), rounding=ROUND_HALF_UP))
    except ArithmeticError:
        expected = "error"
    try:
        got: int | str = micros(text, "x")
    except BillingImportError:
        got = "error"
    assert got == expected


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0662\u0663", "\u0663.\u0665", "\uff11\uff12",
                                  "1,000", "0x10", "Infinity", "1e5e5"])
def test_an_amount_is_a_plain_ascii_decimal_or_refused(text: str) -> None:
    # Decimal() alone read `1_000` as $1,000 and Arabic-Indic digits as theirs
    with pytest.raises(BillingImportError, match="is not a number"):
        micros(text, "BilledCost")


def test_identical_lines_count_within_the_window_and_memory_stays_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Occurrences, "WINDOW", 3)
    seen = _Occurrences()
    assert [seen.count(b"a"), seen.count(b"a"), seen.count(b"b")] == [1, 2, 1]
    for d in (b"c", b"d", b"e", b"f", b"g", b"h", b"i"):  # the window turns over twice
        seen.count(d)
    assert seen.count(b"a") == 1  # forgotten: as if exported once more
    assert len(seen.current) + len(seen.previous) <= 2 * 3
