"""The price override file (`costs.price_overrides`): read as docs/report.md shows it; each
problem located at FILE:LINE:COL, as costguard.yaml's and the policies' are."""

from __future__ import annotations

from pathlib import Path

import pytest

from costguard.costs.pricing import PriceOverrides
from costguard.errors import ConfigError

DOCUMENTED = """\
discounts:                      # match on any of provider, account, region, family,
  - {provider: aws, percent: 12, note: "EDP 2026"}          # instance_type, instance_id,
  - {provider: aws, family: p4d, account: "123456789012", percent: 30}  # lifecycle
prices:
  - {provider: aws, region: us-east-1, instance_type: p5.48xlarge, usd_per_hour: 60.0,
     note: "private pricing"}
disks:                          # what a stopped instance still costs per hour
  - {provider: aws, family: p4d, usd_per_hour: 0.11}
"""


def test_the_documented_file_reads(tmp_path: Path) -> None:
    path = tmp_path / "prices.yml"
    path.write_text(DOCUMENTED)
    got = PriceOverrides.load(path)
    assert [d.percent for d in got.discounts] == [12, 30]
    assert got.discounts[1].account == "123456789012"
    assert got.prices[0].usd_per_hour == 60.0 and got.prices[0].note == "private pricing"
    assert got.disks[0].family == "p4d"


def test_an_empty_file_overrides_nothing(tmp_path: Path) -> None:
    path = tmp_path / "prices.yml"
    path.write_text("# nothing yet\n")
    assert PriceOverrides.load(path) == PriceOverrides()


def test_each_problem_points_at_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "prices.yml"
    path.write_text("discounts:\n  - {provider: aws, percnt: 30}\nprice:\n  - {}\n"
                    "disks:\n  - {usd_per_hour: lots}\n")
    with pytest.raises(ConfigError) as exc:
        PriceOverrides.load(path)
    lines = str(exc.value).splitlines()
    assert lines[0].startswith(f"invalid price overrides ({path};")
    assert f"  {path}:2:5: discounts[0]: missing required key 'percent'" in lines
    assert any(line.startswith(f"  {path}:2:21: discounts[0]: unknown key 'percnt'")
               and line.endswith("did you mean 'percent'?") for line in lines)
    assert any(line.startswith(f"  {path}:3:1: unknown key 'price'")
               and line.endswith("did you mean 'prices'?") for line in lines)
    assert any(line.startswith(f"  {path}:6:20: disks[0].usd_per_hour: ")
               and "(got 'lots')" in line for line in lines)


def test_broken_yaml_and_duplicate_keys_are_located(tmp_path: Path) -> None:
    path = tmp_path / "prices.yml"
    path.write_text("discounts: [\n")
    with pytest.raises(ConfigError, match=r"prices.yml:2:1: invalid YAML"):
        PriceOverrides.load(path)
    path.write_text("prices: []\nprices: []\n")
    with pytest.raises(ConfigError, match=r"prices.yml:2:1: duplicate key 'prices'"):
        PriceOverrides.load(path)


def test_a_missing_file_says_which_setting_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Fix costs\.price_overrides in costguard\.yaml"):
        PriceOverrides.load(tmp_path / "nope.yml")


@pytest.mark.parametrize("usd", [".inf", "1e15", "100001"])
def test_a_price_no_hour_could_cost_is_refused_where_it_is(tmp_path: Path, usd: str) -> None:
    # an override of 1e15 $/h made cost intervals too large to store: accrual failed at its
    # first interval, every cycle
    path = tmp_path / "prices.yml"
    path.write_text("prices:\n  - {provider: aws, instance_type: p5.48xlarge, "
                    f"usd_per_hour: {usd}}}\ndisks:\n  - {{provider: aws, usd_per_hour: {usd}}}\n")
    with pytest.raises(ConfigError) as exc:
        PriceOverrides.load(path)
    text = str(exc.value)
    assert f"{path}:2:63: prices[0].usd_per_hour: Input should be less than or equal to " \
           "100000" in text
    assert f"{path}:4:35: disks[0].usd_per_hour: Input should be less than or equal to " \
           "100000" in text
    path.write_text("prices:\n  - {provider: aws, instance_type: p5.48xlarge, "
                    "usd_per_hour: 100000}\n")
    assert PriceOverrides.load(path).prices[0].usd_per_hour == 100_000
