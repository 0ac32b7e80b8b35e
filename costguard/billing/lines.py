"""One charge line of a cost export, read: amounts, times, tags in every shape, provider
names, charge categories, currencies and attribution, each with an error that names the
line. Values a bill repeats (its hours, its tag sets and their attribution) are parsed once
per file (`LineReader`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar

from costguard.billing.errors import BillingImportError, cell, decimal_of
from costguard.costs.attribution import Attributor
from costguard.kept_text import cut
from costguard.limited_json import JsonRefused, parse_json
from costguard.model import Instance, InstanceState
from costguard.store.bill_tables import BillingCostRow

# provider names as exports spell them -> costguard's; a provider costguard does not govern
# keeps its own (lower-case) name, and its lines are kept and reported under it
_PROVIDERS = {"aws": "aws", "amazon web services": "aws", "amazon": "aws",
              "amazon web services, inc.": "aws", "amazon web services inc": "aws",
              "google cloud": "gcp", "google cloud platform": "gcp", "gcp": "gcp",
              "google": "gcp", "google llc": "gcp", "microsoft": "azure",
              "microsoft azure": "azure", "azure": "azure", "microsoft corporation": "azure",
              "oracle": "oracle", "oracle cloud infrastructure": "oracle", "oci": "oracle",
              "alibaba cloud": "alibaba", "alibaba": "alibaba"}
# FOCUS ChargeCategory values, matched without regard to case
CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
# text that means "no value" in real exports (the spec's null is an empty cell)
NULLS = frozenset({"", "null", "none", "nan", "n/a", "\\n"})
BASE_CURRENCY = "USD"  # estimates are in US dollars; bills in another currency need a rate
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# a charge period lies within these, and spans at most a year (a month's bill, or a term's
# fee): a period that ends before it starts, or spans 1,000 years, is a broken line
EARLIEST_CHARGE = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_CHARGE = datetime(2200, 1, 1, tzinfo=UTC)
MAX_CHARGE_PERIOD = timedelta(days=366)


def is_null(value: object) -> bool:
    """Empty, or a null written as text (`NULL`, `null`, `None`, `NaN`, `\\N`)."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return isinstance(value, str) and value.strip().lower() in NULLS


# A line's amount is kept as micro-dollars in a 64-bit integer: up to a trillion dollars
# either way. Past it is a broken line (`1e30` failed the whole import), skipped and named.
MAX_LINE_MICROS = 10**18


def micros(text: object, where: str) -> int:
    """An amount in micro-dollars, rounded half away from zero (as Decimal's ROUND_HALF_UP).
    Plain decimal text (the common case) is read with integer arithmetic, exactly."""
    out = _fast_micros(text) if isinstance(text, str) else None
    if out is None:
        if is_null(text):
            raise BillingImportError(f"{where} is empty")
        value = decimal_of(text, where)
        # past the bound, quantize (28 digits) raises, and abs() raises Overflow for
        # 1e999999999 (copy_abs does not round): out of range whatever it is
        if value.copy_abs() <= MAX_LINE_MICROS // 1_000_000:
            out = int((value * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if out is None or abs(out) > MAX_LINE_MICROS:
        raise BillingImportError(f"{where}: {cell(text)} is more than a trillion dollars")
    return out


def _fast_micros(text: str) -> int | None:
    """`-12.3456789` -> -12345679 without Decimal; None for anything but plain digits."""
    body = text[1:] if text[:1] in "+-" else text
    whole, _, frac = body.partition(".")
    if not (whole or frac) or not (whole.isascii() and frac.isascii()):
        return None
    if not ((not whole or whole.isdigit()) and (not frac or frac.isdigit())):
        return None
    if len(whole) > 19:  # past any amount kept (and int() refuses 4,300 digits): Decimal's
        return None
    value = int(whole or "0") * 1_000_000 + int((frac[:6] or "0").ljust(6, "0"))
    if len(frac) > 6 and frac[6] >= "5":
        value += 1  # half up, on the magnitude
    return -value if text[:1] == "-" else value


def parse_time(text: object, where: str) -> datetime:
    if isinstance(text, datetime):
        return text.astimezone(UTC) if text.tzinfo else text.replace(tzinfo=UTC)
    if is_null(text):
        raise BillingImportError(f"{where} is empty")
    raw = str(text).strip().replace("Z", "+00:00").replace(" UTC", "+00:00")
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise BillingImportError(
            f"{where}: {cell(text)} is not an ISO 8601 time (FOCUS uses "
            "2026-11-01T00:00:00Z)") from None
    try:  # year 1 or 9999 with an offset overflows on the way to UTC
        when = when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
        inside = EARLIEST_CHARGE <= when < LATEST_CHARGE
    except OverflowError:
        inside = False
    if not inside:
        raise BillingImportError(f"{where}: {cell(text)} is no time a cloud bills for "
                                 f"({EARLIEST_CHARGE.year} to {LATEST_CHARGE.year - 1})")
    return when


def check_period(start: datetime, end: datetime, where: str) -> None:
    """A charge period ends after it starts and spans at most MAX_CHARGE_PERIOD."""
    if end < start:
        raise BillingImportError(f"{where}: the charge period ends ({end:%Y-%m-%d %H:%M}) "
                                 f"before it starts ({start:%Y-%m-%d %H:%M})")
    if end - start > MAX_CHARGE_PERIOD:
        raise BillingImportError(f"{where}: the charge period spans {(end - start).days} "
                                 "days; a bill's line spans a year at most")


def _tag_value(value: object) -> str:
    if value is True or value is False:
        return str(value).lower()  # FOCUS: a key without a value carries `true`
    return "" if value is None else str(value)


def _pairs(items: list[Any], where: str) -> dict[str, str]:
    """A list of {key, value} structs (GCP's labels) or of (key, value) pairs (a map)."""
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, Mapping):
            lowered = {str(k).lower(): v for k, v in item.items()}
            if "key" not in lowered:
                raise BillingImportError(f"{where}: Tags holds {dict(item)!r}, not a "
                                         "{key, value} pair")
            out[str(lowered["key"])] = _tag_value(lowered.get("value"))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            out[str(item[0])] = _tag_value(item[1])
        else:
            raise BillingImportError(f"{where}: Tags is a list but not of key/value pairs")
    return out


# AWS's tag schemes, each a prefix of its keys in CUR 2.0's Tags column and in AWS's FOCUS
# exports (FOCUS leaves one user-defined scheme unprefixed and prefixes the others): a
# resource's own tags, its account's, its cost categories, most specific first
TAG_SCHEMES = ("resourceTags/", "accountTag/", "costCategory/")
TAGS_DEPTH = 8  # a Tags cell is an object of values, or a list of pairs (depth 2)


def user_tag_key(key: str) -> str:
    """An AWS user-defined cost allocation tag's key without its mark: `user:team`,
    `user_team` -> team."""
    for prefix in ("user:", "user_"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def fold_schemes(tags: Mapping[str, Any]) -> dict[str, Any]:
    """`tags` with each tag of an AWS scheme also under its bare key (`accountTag/team` ->
    team; `resourceTags/user:team` -> team) where neither a bare tag nor a more specific
    scheme has that key, so a line inherits its account's team as FOCUS's tag finalization
    describes. The prefixed keys stay; other prefixes (`userAttribute/`, a user's own
    `a/b` keys) are left as they are."""
    out = dict(tags)
    if not any("/" in key for key in tags):
        return out
    for prefix in TAG_SCHEMES:
        for key, value in tags.items():
            if key.startswith(prefix) and not is_null(value) and value != "":
                bare = key[len(prefix):]
                out.setdefault(user_tag_key(bare) if prefix == TAG_SCHEMES[0] else bare,
                               value)
    return out


def parse_tags(value: object, where: str) -> dict[str, str]:
    """Every shape Tags comes in: a JSON object (text or map), a map column, or a list of
    {key, value} structs or pairs (as text or as the column's own values); null is none.
    AWS's prefixed schemes are folded in (`fold_schemes`)."""
    return fold_schemes(_parse_tags(value, where))


def _parse_tags(value: object, where: str) -> dict[str, str]:
    if is_null(value):
        return {}
    if isinstance(value, Mapping):
        return {str(k): _tag_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _pairs(list(value), where)
    try:
        doc = parse_json(str(value), max_depth=TAGS_DEPTH)
    except JsonRefused as exc:
        raise BillingImportError(
            f"{where}: Tags is not JSON a bill holds ({exc}): {str(value)[:60]!r}") from None
    if doc is None:
        return {}
    if isinstance(doc, dict):
        return {str(k): _tag_value(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return _pairs(doc, where)
    raise BillingImportError(f"{where}: Tags must be a JSON object or a list of key/value "
                             f"pairs, not {type(doc).__name__}")


def provider_of(name: object) -> str | None:
    """costguard's name for an export's provider (`Amazon Web Services` -> aws)."""
    if is_null(name):
        return None
    text = " ".join(str(name).split())
    return _PROVIDERS.get(text.lower(), text.lower()[:32])


def category_of(value: object, where: str) -> str | None:
    if is_null(value):
        return None
    for known in CATEGORIES:
        if str(value).strip().lower() == known.lower():
            return known
    raise BillingImportError(f"{where}: ChargeCategory {value!r} is not one of "
                             f"{', '.join(CATEGORIES)}")


class CurrencyError(BillingImportError):
    """A line in a currency with no rate: the whole file is refused (nothing is imported)."""


PROVIDER_COLUMNS = ("ServiceProviderName", "ProviderName", "PublisherName",
                     "InvoiceIssuerName")
_CACHE_MAX = 65_536  # distinct times, tag sets, attributions held while reading a file
_V = TypeVar("_V")


class LineReader:
    """Reads charge lines, remembering what repeats in a bill (its hours, its tag sets and
    their attribution), so a file of millions of lines parses each once."""

    def __init__(self, attributor: Attributor, rates: Mapping[str, Decimal]) -> None:
        self.attributor = attributor
        self.rates = rates
        self.times: dict[object, datetime] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self.dims: dict[tuple[tuple[tuple[str, str], ...], str | None],
                        dict[str, str | None]] = {}

    def time(self, value: object, where: str) -> datetime:
        if isinstance(value, datetime):
            return parse_time(value, where)
        return _cached(self.times, value, where, parse_time)

    def tag_set(self, value: object, where: str) -> dict[str, str]:
        if not isinstance(value, str):
            return parse_tags(value, where)
        return _cached(self.tags, value, where, parse_tags)

    def attribute(self, tags: dict[str, str], account: str | None) -> dict[str, str | None]:
        key = (tuple(sorted(tags.items())), account)
        found = self.dims.get(key)
        if found is None:
            # the attributor reads tags, name and account only; the rest is inert
            shim = Instance(provider="aws", account=account or "", region="", instance_id="",
                            name=tags.get("Name"), instance_type="",
                            state=InstanceState.RUNNING, launch_time=_EPOCH,
                            observed_at=_EPOCH, tags=tags)
            found = self.attributor.dimensions(shim)
            _remember(self.dims, key, found)
        return found

    def line(self, row: dict[str, Any], where: str) -> dict[str, Any]:
        """One charge line as the billing_lines columns, or BillingImportError naming
        `where` and what is wrong."""
        _no_nul(row, where)
        account = _opt(row.get("SubAccountId")) or _opt(row.get("BillingAccountId"))
        tags = self.tag_set(row.get("Tags"), where)
        categories = row.get("x_CostCategories")  # AWS's FOCUS 1.0: below every tag
        if not is_null(categories):
            tags = {**self.tag_set(categories, f"{where} x_CostCategories"), **tags}
        dims = self.attribute(tags, account)
        provider = provider_of(next((row.get(c) for c in PROVIDER_COLUMNS
                                     if not is_null(row.get(c))), None))
        currency = (_opt(row.get("BillingCurrency")) or BASE_CURRENCY).upper()
        rate = Decimal(1) if currency == BASE_CURRENCY else self.rates.get(currency)
        if rate is None:
            raise CurrencyError(
                f"{where}: billed in {currency}, and estimates are in {BASE_CURRENCY}: give "
                f"the rate, e.g. --rate {currency}=1.08 ({BASE_CURRENCY} per {currency})")
        billed = micros(row.get("BilledCost"), f"{where} BilledCost")
        effective = row.get("EffectiveCost")  # 0 is a price (credits, prepaid), not a blank
        spent = billed if is_null(effective) else micros(effective, f"{where} EffectiveCost")
        start = self.time(row.get("ChargePeriodStart"), f"{where} ChargePeriodStart")
        end = self.time(row.get("ChargePeriodEnd"), f"{where} ChargePeriodEnd")
        check_period(start, end, where)
        return kept({
            "charge_start": start, "charge_end": end,
            "provider": provider, "account": account,
            "region": _opt(row.get("RegionId")),  # FOCUS 0.5's Region arrives as RegionId
            "service": _opt(row.get("ServiceName")), "resource_id": _opt(row.get("ResourceId")),
            "billed_micros": _convert(billed, rate), "effective_micros": _convert(spent, rate),
            "team": dims.get("team"), "project": dims.get("project"), "env": dims.get("env"),
            "cost_center": dims.get("cost-center"),
            "charge_category": category_of(row.get("ChargeCategory"),
                                           f"{where} ChargeCategory"),
            "charge_class": _opt(row.get("ChargeClass")), "currency": currency,
        })


# the columns a line's text is stored from as it is written (the rest is mapped or parsed)
STORED_TEXT = ("SubAccountId", "BillingAccountId", "RegionId", "ServiceName", "ResourceId",
               "ChargeClass", "BillingCurrency")

# what billing_costs keeps of that text (its columns' lengths): a resource id may be an ARN of
# up to 2,048 characters (a log group's reaches 560), and PostgreSQL refused the whole import
# over one longer than its column; the line's key is made from the whole text, so two lines
# that differ past the cut are still two lines
_BILLED = BillingCostRow.__table__  # type: ignore[attr-defined]
KEPT_CHARS: dict[str, int] = {
    name: int(getattr(_BILLED.c[name].type, "length"))  # noqa: B009 (TypeEngine has none)
    for name in ("account", "region", "service", "resource_id", "charge_class")}


def kept(line: dict[str, Any]) -> dict[str, Any]:
    """`line` with its stored text cut to `KEPT_CHARS`."""
    for name, most in KEPT_CHARS.items():
        line[name] = cut(line[name], most)
    return line


def _no_nul(row: Mapping[str, Any], where: str) -> None:
    """NUL is no text a store takes (PostgreSQL refuses it): the line is skipped, named."""
    for name in STORED_TEXT:
        value = row.get(name)
        if isinstance(value, str) and "\x00" in value:
            raise BillingImportError(f"{where}: {name} holds a NUL character, which no "
                                     "store takes")


def _cached(cache: dict[Any, _V], value: Any, where: str,
            parse: Callable[[Any, str], _V]) -> _V:
    """`parse(value, where)`, once per distinct value while the cache holds it."""
    found = cache.get(value)
    if found is None:
        found = parse(value, where)
        _remember(cache, value, found)
    return found


def _remember(cache: dict[Any, Any], key: object, value: object) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()  # a file with more distinct values than this: start over, stay bounded
    cache[key] = value


def _convert(amount: int, rate: Decimal) -> int:
    if rate == 1:
        return amount
    return int((Decimal(amount) * rate).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _opt(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        if is_null(value):
            return None
        value = str(value)
    text = value.strip()
    return None if not text or text.lower() in NULLS else text
