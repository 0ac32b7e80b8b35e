"""The FinOps Foundation's published FOCUS 1.0 sample (anonymised real AWS, Microsoft and
Oracle bills; tests/fixtures/billing/README.md) imported as it is, by both readers and on
both stores. The expected figures are computed here from the file itself with the csv
module and Decimal, not taken from the importer."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from costguard.billing import focus_columns
from costguard.billing.commands import billing_app
from costguard.billing.importer import import_focus
from costguard.costs.attribution import Attributor
from costguard.policy.spend import Attribution
from costguard.store.bill_tables import BillingCostRow
from costguard.store.db import Database

SAMPLE = Path(__file__).parents[1] / "fixtures" / "billing" / "focus-1.0-sample.csv.gz"
NOW = datetime(2024, 10, 5, tzinfo=UTC)
PROVIDER = {"AWS": "aws", "Microsoft": "azure", "Oracle": "oracle"}  # costguard's names
RULES = Attribution.model_validate({"dimensions": {
    "team": {"keys": ["team", "business_unit"]},
    "env": {"keys": ["env", "environment"], "case": "lower"}}})
MICRO = Decimal("0.000001")


def sample_lines() -> list[dict[str, str]]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def amount(text: str) -> Decimal:
    return Decimal(0) if text == "NULL" else Decimal(text)


Group = tuple[str, str | None, str | None]  # provider, team, env


def group_of(line: dict[str, str]) -> Group:
    """The line's provider, team and env, as RULES read its tags."""
    tags = {} if line["Tags"] == "NULL" else json.loads(line["Tags"])
    return (PROVIDER[line["ProviderName"]],
            tags.get("team") or tags.get("business_unit") or None,
            (tags.get("env") or tags.get("environment") or "").lower() or None)


def expected_by(key: str) -> dict[Group, Decimal]:
    """BilledCost or EffectiveCost (the billed cost where it is null) summed by group."""
    sums: dict[Group, Decimal] = defaultdict(Decimal)
    for line in sample_lines():
        value = line[key] if line[key] != "NULL" else line["BilledCost"]
        sums[group_of(line)] += amount(value)
    return dict(sums)


def stored(db: Database) -> list[BillingCostRow]:
    with db.session() as s:
        return list(s.scalars(select(BillingCostRow)))


def sums_of(rows: list[BillingCostRow], field: str
            ) -> dict[Group, Decimal]:
    out: dict[Group, Decimal] = defaultdict(Decimal)
    for r in rows:
        assert r.provider is not None
        out[(r.provider, r.team, r.env)] += Decimal(getattr(r, field)) * MICRO
    return dict(out)


def assert_close(got: dict[Group, Decimal],
                 want: dict[Group, Decimal],
                 lines: Counter[Group]) -> None:
    """Every group's sum to within half a micro-dollar a line (amounts are kept in whole
    micro-dollars; this file has lines of 0.0000008)."""
    assert set(got) == set(want)
    for group, total in want.items():
        assert abs(got[group] - total) <= lines[group] * MICRO / 2, group


@pytest.mark.parametrize("reader", ["columns", "lines"])
def test_the_published_sample_imports_whole_to_the_micro_dollar(
        db: Database, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if reader == "lines":  # the line-by-line reader, which takes what the columns' refuses
        monkeypatch.setattr(focus_columns, "reads", lambda source: False)
    with db.session() as s:
        result = import_focus(s, SAMPLE, Attributor(RULES), NOW)
    assert (result.version, result.added, result.skipped_count) == ("1.0", 1000, 0)
    assert (result.read_by == "columns") is (reader == "columns")
    rows = stored(db)
    assert sum(r.lines for r in rows) == 1000
    counts = Counter(group_of(line) for line in sample_lines())
    assert_close(sums_of(rows, "billed_micros"), expected_by("BilledCost"), counts)
    assert_close(sums_of(rows, "effective_micros"), expected_by("EffectiveCost"), counts)
    # a day is the UTC date of ChargePeriodStart, written with no zone
    days = {r.day for r in rows}
    want_days = {(datetime.fromisoformat(line["ChargePeriodStart"]).replace(tzinfo=UTC)
                  - datetime(1970, 1, 1, tzinfo=UTC)).days for line in sample_lines()}
    assert days == want_days
    # the Credit and the Adjustments are kept as what they are
    by_category: dict[str | None, Decimal] = defaultdict(Decimal)
    for r in rows:
        by_category[r.charge_category] += Decimal(r.billed_micros) * MICRO
    want_category: dict[str, Decimal] = defaultdict(Decimal)
    for line in sample_lines():
        want_category[line["ChargeCategory"]] += amount(line["BilledCost"])
    assert set(by_category) == set(want_category)
    for category, total in want_category.items():
        assert abs(by_category[category] - total) <= Decimal("0.0005"), category
    assert want_category["Credit"] < 0 and by_category["Credit"] < 0
    assert {r.currency for r in rows} == {"USD"} and {r.charge_class for r in rows} == {None}


def test_ec2_lines_keep_their_bare_instance_and_volume_ids(db: Database) -> None:
    with db.session() as s:
        import_focus(s, SAMPLE, Attributor(RULES), NOW)
    want = {line["ResourceId"] for line in sample_lines()
            if line["ServiceName"] == "Amazon Elastic Compute Cloud"
            and line["ResourceId"].startswith(("i-", "vol-"))}
    assert len(want) > 100
    got = {r.resource_id for r in stored(db) if r.resource_id in want}
    assert got == want


def test_the_cli_names_the_version_providers_and_categories_of_the_sample(
        cli_store: Database, tmp_path: Path) -> None:
    policies = tmp_path / "attribution.yaml"
    policies.write_text("attribution:\n  dimensions:\n    team: {keys: [team, business_unit]}\n",
                        encoding="utf-8")
    out = CliRunner().invoke(billing_app, ["import", str(SAMPLE), "--policies", str(policies)],
                             env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    by_provider: dict[str, Decimal] = defaultdict(Decimal)
    for line in sample_lines():
        by_provider[PROVIDER[line["ProviderName"]]] += amount(line["BilledCost"])
    total = sum(by_provider.values(), Decimal(0))
    assert out.output.startswith("FOCUS 1.0: 1,000 line(s) imported, 0 already there, "
                                 f"0 skipped; billed ${total:.2f}")
    assert (f"by provider: aws ${by_provider['aws']:.2f}, azure ${by_provider['azure']:.2f}, "
            f"oracle ${by_provider['oracle']:.2f}") in out.output
    assert "kept, not governed by costguard: azure, oracle" in out.output
    again = CliRunner().invoke(billing_app, ["import", str(SAMPLE), "--policies", str(policies)])
    assert again.exit_code == 0 and "0 line(s) imported, 1,000 already there" in again.output
