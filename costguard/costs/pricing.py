"""The price catalog: providers' hourly prices (or the shipped tables) with overrides applied.

Order of precedence for one instance: a custom price from the override file (most specific
match wins), else the rate learned from the instance's own bill lines (it already holds
the account's discounts: nothing more is taken off), else the provider's own quote (live
spot history), else a list price fetched into the store by `costguard prices refresh`,
else the shipped table of that provider (a fallback). A negotiated discount (percent per
provider, family and/or account; the most specific match wins) then applies to whatever
list price was found. Every quote says where its number came from and how old it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from costguard.errors import ConfigError
from costguard.model import MAX_USD_PER_HOUR, Instance, Lifecycle, PriceQuote
from costguard.small_files import read_small_text
from costguard.yamlpos import (
    YamlLoadError,
    load_yaml_with_positions,
    validation_errors_to_source_errors,
)

if TYPE_CHECKING:
    from costguard.costs.price_book import PriceBook
    from costguard.providers.aws.pricing import OnDemandTable

MAX_OVERRIDES_BYTES = 8 * 2**20  # thousands of custom prices fit in a few hundred KiB
PriceLookup = Callable[[Instance], PriceQuote | None]
# What a catalog quote can depend on: the fields override rules match (family comes from
# instance_type) and those the providers' quotes read (AWS spot: account and zone; GCP:
# the GPUs attached). Besides these, only the instance ids that rules name
# (`PriceCatalog.named_instance_ids`). Callers that cache quotes key on them.
PRICE_KEY_FIELDS = ("provider", "account", "region", "zone", "instance_type", "lifecycle",
                    "gpu_count", "gpu_model", "gpu_memory_mib")


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str | None = None
    account: str | None = None
    region: str | None = None
    family: str | None = None
    instance_type: str | None = None
    instance_id: str | None = None
    lifecycle: Literal["on-demand", "spot"] | None = None

    def specificity(self, inst: Instance) -> int | None:
        """How many fields match `inst` (None when any set field differs)."""
        wanted = {
            "provider": inst.provider, "account": inst.account, "region": inst.region,
            "family": inst.family, "instance_type": inst.instance_type,
            "instance_id": inst.instance_id, "lifecycle": str(inst.lifecycle),
        }
        score = 0
        for name, actual in wanted.items():
            value = getattr(self, name)
            if value is None:
                continue
            if value != actual:
                return None
            score += 1
        return score


class Discount(_Rule):
    """A negotiated discount, e.g. an enterprise agreement: `percent` off the list price."""

    percent: float = Field(gt=0, lt=100)
    note: str = "negotiated discount"


class CustomPrice(_Rule):
    """A fixed hourly price (private pricing, reserved capacity) that replaces the list one."""

    usd_per_hour: float = Field(ge=0, le=MAX_USD_PER_HOUR)
    note: str = "custom price"


class DiskPrice(_Rule):
    """What a stopped instance still costs per hour (its attached disks)."""

    usd_per_hour: float = Field(ge=0, le=MAX_USD_PER_HOUR)
    note: str = "attached disks"


class PriceOverrides(BaseModel):
    """The override file (`costs.price_overrides` in costguard.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    discounts: tuple[Discount, ...] = ()
    prices: tuple[CustomPrice, ...] = ()
    disks: tuple[DiskPrice, ...] = ()

    @classmethod
    def load(cls, path: Path) -> PriceOverrides:
        try:
            doc, positions = load_yaml_with_positions(
                read_small_text(path, MAX_OVERRIDES_BYTES), str(path))
        except OSError as exc:
            raise ConfigError(f"cannot read the price override file {path}: {exc.strerror}. "
                              "Fix costs.price_overrides in costguard.yaml.") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                              ) from None
        except YamlLoadError as exc:
            raise ConfigError(str(exc.error), [exc.error]) from None
        try:
            return cls.model_validate(doc or {})
        except ValidationError as exc:
            problems = validation_errors_to_source_errors(exc, positions, str(path), cls)
            raise ConfigError("\n".join(
                [f"invalid price overrides ({path}; see docs/report.md, 'Price overrides'):",
                 *(f"  {e}" for e in problems)]), problems) from None


R = TypeVar("R", bound=_Rule)


def _best(rules: tuple[R, ...], inst: Instance) -> R | None:
    best: tuple[int, R] | None = None
    for rule in rules:
        score = rule.specificity(inst)
        if score is not None and (best is None or score > best[0]):
            best = (score, rule)
    return best[1] if best else None


def table_price(inst: Instance) -> PriceQuote | None:
    """The shipped list price of `inst` without any cloud call (AWS, GCP or the sim table)."""
    if inst.provider == "sim":
        from costguard.demo.sim_prices import sim_price

        return sim_price(inst)
    if inst.provider == "gcp":
        from costguard.providers.gcp import pricing as gcp_pricing

        return gcp_pricing.price(inst)
    if inst.provider == "aws":
        if inst.lifecycle is Lifecycle.SPOT:
            return None  # AWS spot prices move hourly: only observed history is honest
        found = aws_table().lookup(inst.region, inst.instance_type)
        return PriceQuote(usd_per_hour=found.usd_per_hour, source=found.source,
                          as_of=found.as_of, fallback=found.fallback) if found else None
    return None


@cache
def aws_table() -> OnDemandTable:
    from costguard.providers.aws.pricing import OnDemandTable

    return OnDemandTable()


class PriceCatalog:
    """Hourly prices of instances: providers' quotes (or shipped tables) with overrides.

    `providers` maps a provider name to its `price(instance)` callable; names it lacks
    fall back to the shipped tables, so reports can price without any cloud access.
    """

    def __init__(
        self,
        providers: Mapping[str, PriceLookup] | None = None,
        overrides: PriceOverrides | None = None,
        book: PriceBook | None = None,
    ) -> None:
        self.providers = dict(providers or {})
        self.overrides = overrides or PriceOverrides()
        self.book = book
        o = self.overrides
        self._rule_ids = frozenset(
            r.instance_id for r in (*o.discounts, *o.prices, *o.disks) if r.instance_id)

    @property
    def named_instance_ids(self) -> frozenset[str]:
        """The instances priced on their own (see accrual's price keys): those a rule names
        by id, and those with a rate learned from their bill."""
        if self.book is None:
            return self._rule_ids
        return self._rule_ids | self.book.learned_instance_ids

    def quote(self, inst: Instance) -> PriceQuote | None:
        custom = _best(self.overrides.prices, inst)
        if custom is not None:
            return PriceQuote(usd_per_hour=custom.usd_per_hour, source=custom.note)
        learned = self.book.learned_price(inst) if self.book is not None else None
        if learned is not None:
            return learned.quote()  # the bill already holds the account's discounts
        lookup = self.providers.get(inst.provider)
        base = lookup(inst) if lookup is not None else table_price(inst)
        if (base is None or base.fallback) and self.book is not None:
            stored = self.book.list_price(inst)
            base = stored.quote() if stored is not None else base
        if base is None:
            return None
        if inst.lifecycle is Lifecycle.CAPACITY_BLOCK:
            # a block's price is set when it is bought (DescribeCapacityBlockOfferings) and
            # paid upfront; no price list has it: the on-demand one stands in, as a fallback
            # (the report says so, and an imported bill replaces it)
            base = base.model_copy(update={
                "source": f"{base.source}; a Capacity Block's own price is not listed: "
                          "on-demand as an estimate", "fallback": True})
        return self._discounted(inst, base)

    def _discounted(self, inst: Instance, base: PriceQuote) -> PriceQuote:
        discount = _best(self.overrides.discounts, inst)
        if discount is None:
            return base
        usd = round(base.usd_per_hour * (1 - discount.percent / 100), 6)
        source = f"{base.source}; {discount.note} {discount.percent:g}% off"
        return base.model_copy(update={"usd_per_hour": usd, "source": source})

    def on_demand(self, inst: Instance) -> PriceQuote | None:
        return self.quote(inst.model_copy(update={"lifecycle": Lifecycle.ON_DEMAND}))

    def spot(self, inst: Instance) -> PriceQuote | None:
        return self.quote(inst.model_copy(update={"lifecycle": Lifecycle.SPOT}))

    def disk(self, inst: Instance) -> PriceQuote | None:
        """Hourly cost of a stopped instance's disks, when the override file knows it."""
        rule = _best(self.overrides.disks, inst)
        return PriceQuote(usd_per_hour=rule.usd_per_hour, source=rule.note) if rule else None

    def price_of(self, names: tuple[str, ...] = ("aws", "gcp", "sim")) -> dict[str, PriceLookup]:
        """The mapping `accrue(price_of=...)` takes: every provider priced by this catalog."""
        return {name: self.quote for name in {*names, *self.providers}}
