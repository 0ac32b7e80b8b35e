"""Billing import: what the cloud invoiced, beside what costguard estimated.

Sources: cost export files (FOCUS 0.5 to 1.2, AWS CUR 2.0 and legacy CUR, the Google Cloud
billing export; CSV, JSON Lines or Parquet; see focus_files and native_exports) and AWS
Cost Explorer `GetCostAndUsage` grouped by a cost-allocation tag. Lines are attributed with the
same attribution rules as instances (FOCUS `Tags`) and stored in micro-dollars. Each line's
key is a hash of its content and its occurrence in the file, so importing the same export
twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import Table, insert, select
from sqlmodel import Session

from costguard.costs.attribution import Attributor
from costguard.costs.bill_errors import BillingImportError, decimal_of
from costguard.costs.focus_files import BAD_ROW, REQUIRED, FocusFile, open_focus
from costguard.errors import ConfigError
from costguard.model import Instance, InstanceState
from costguard.store.tables import BillingLineRow

__all__ = ["REQUIRED", "BillingImportError", "import_cost_explorer", "import_focus"]


class CostExplorerClient(Protocol):
    """The one call used from a boto3 `ce` client."""

    def get_cost_and_usage(self, **kwargs: Any) -> Mapping[str, Any]: ...

_T: Table = BillingLineRow.__table__  # type: ignore[attr-defined]
BILLED_DIMENSIONS = {"team": "team", "project": "project", "env": "env",
                     "cost-center": "cost_center", "account": "account",
                     "provider": "provider", "region": "region", "instance": "resource_id"}
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
_NULLS = frozenset({"", "null", "none", "nan", "n/a", "\\n"})
BASE_CURRENCY = "USD"  # estimates are in US dollars; bills in another currency need a rate
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# the `source` a native export's lines are stored under (their keys are their own)
_NATIVE_SOURCES = {"AWS CUR 2.0": "aws-cur", "AWS CUR (legacy)": "aws-cur",
                   "Google Cloud billing export": "gcp-export"}
_BATCH = 5_000


@dataclass
class ImportResult:
    read: int = 0
    added: int = 0
    duplicates: int = 0
    billed_micros: int = 0
    version: str = ""  # the FOCUS version; "" for a native export
    format: str = ""  # what the file is: "FOCUS 1.2", "AWS CUR 2.0", ...
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, why), first 20
    skipped_count: int = 0
    by_category: Counter[str] = field(default_factory=Counter)  # billed micros
    by_provider: Counter[str] = field(default_factory=Counter)
    currencies: set[str] = field(default_factory=set)

    def skip(self, where: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < 20:
            self.skipped.append((where, why))


def is_null(value: object) -> bool:
    """Empty, or a null written as text (`NULL`, `null`, `None`, `NaN`, `\\N`)."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return isinstance(value, str) and value.strip().lower() in _NULLS


def micros(text: object, where: str) -> int:
    """An amount in micro-dollars, rounded half away from zero (as Decimal's ROUND_HALF_UP).
    Plain decimal text (the common case) is read with integer arithmetic, exactly."""
    if isinstance(text, str):
        fast = _fast_micros(text)
        if fast is not None:
            return fast
    if is_null(text):
        raise BillingImportError(f"{where} is empty")
    value = decimal_of(text, where)
    return int((value * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _fast_micros(text: str) -> int | None:
    """`-12.3456789` -> -12345679 without Decimal; None for anything but plain digits."""
    body = text[1:] if text[:1] in "+-" else text
    whole, _, frac = body.partition(".")
    if not (whole or frac) or not (whole.isascii() and frac.isascii()):
        return None
    if not ((not whole or whole.isdigit()) and (not frac or frac.isdigit())):
        return None
    value = int(whole or "0") * 1_000_000 + int((frac[:6] or "0").ljust(6, "0"))
    if len(frac) > 6 and frac[6] >= "5":
        value += 1  # half up, on the magnitude
    return -value if text[:1] == "-" else value


def _time(text: object, where: str) -> datetime:
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=UTC)
    if is_null(text):
        raise BillingImportError(f"{where} is empty")
    raw = str(text).strip().replace("Z", "+00:00").replace(" UTC", "+00:00")
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise BillingImportError(
            f"{where}: {text!r} is not an ISO 8601 time (FOCUS uses 2026-11-01T00:00:00Z)"
        ) from None
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


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


def parse_tags(value: object, where: str) -> dict[str, str]:
    """Every shape Tags comes in: a JSON object (text or map), a map column, or a list of
    {key, value} structs or pairs (as text or as the column's own values); null is none."""
    if is_null(value):
        return {}
    if isinstance(value, Mapping):
        return {str(k): _tag_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _pairs(list(value), where)
    try:
        doc = json.loads(str(value))
    except json.JSONDecodeError:
        raise BillingImportError(
            f"{where}: Tags is not JSON: {str(value)[:60]!r}") from None
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


_PROVIDER_COLUMNS = ("ServiceProviderName", "ProviderName", "PublisherName",
                     "InvoiceIssuerName")
_CACHE_MAX = 65_536  # distinct times, tag sets, attributions held while reading a file
_MISSING = object()
_V = TypeVar("_V")


class _LineReader:
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
            return _time(value, where)
        return _cached(self.times, value, where, _time)

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
        account = _opt(row.get("SubAccountId")) or _opt(row.get("BillingAccountId"))
        dims = self.attribute(self.tag_set(row.get("Tags"), where), account)
        provider = provider_of(next((row.get(c) for c in _PROVIDER_COLUMNS
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
        return {
            "charge_start": self.time(row.get("ChargePeriodStart"),
                                      f"{where} ChargePeriodStart"),
            "charge_end": self.time(row.get("ChargePeriodEnd"), f"{where} ChargePeriodEnd"),
            "provider": provider, "account": account,
            "region": _opt(row.get("RegionId")),  # FOCUS 0.5's Region arrives as RegionId
            "service": _opt(row.get("ServiceName")), "resource_id": _opt(row.get("ResourceId")),
            "billed_micros": _convert(billed, rate), "effective_micros": _convert(spent, rate),
            "team": dims.get("team"), "project": dims.get("project"), "env": dims.get("env"),
            "cost_center": dims.get("cost-center"),
            "charge_category": category_of(row.get("ChargeCategory"),
                                           f"{where} ChargeCategory"),
            "charge_class": _opt(row.get("ChargeClass")), "currency": currency,
        }


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


def parse_focus(source: FocusFile, attributor: Attributor, result: ImportResult | None = None,
                *, strict: bool = False, rates: Mapping[str, Decimal] | None = None,
                ) -> Iterator[dict[str, Any]]:
    """The billing lines (billing_lines columns) of an opened export (its columns already
    checked). A line that cannot be read is skipped, with its place and reason in `result`
    (`strict`: refused); a currency without a rate refuses the file."""
    result = result if result is not None else ImportResult()
    seen = _Occurrences()
    reader = _LineReader(attributor, rates or {})
    source_name = "focus" if source.native is None else _NATIVE_SOURCES[source.native]
    for n, raw in enumerate(source.rows):
        where = source.where(n)
        try:
            if BAD_ROW in raw:
                raise BillingImportError(f"{where}: {raw[BAD_ROW]}")
            rows = source.expand(raw) if source.expand is not None else [raw]
            lines = [reader.line(row, where) for row in rows]
        except CurrencyError:
            raise
        except BillingImportError as exc:
            if strict:
                raise BillingImportError(f"{exc} (--strict: nothing imported)") from None
            result.skip(where, str(exc).removeprefix(f"{where}: ").removeprefix(f"{where} "))
            continue
        for row, line in zip(rows, lines, strict=True):
            content = json.dumps({k: str(v) for k, v in sorted(row.items())}, sort_keys=True)
            # the key earlier imports stored: re-importing an export they read adds nothing
            occurrence = seen.count(hashlib.blake2b(content.encode(), digest_size=8).digest())
            line["source"] = source_name
            line["line_key"] = hashlib.sha256(f"{content}#{occurrence}".encode()).hexdigest()
            yield line


class _Occurrences:
    """How many times a line's content has been read so far in this file, so identical
    lines each count. Held for the most recent 2 x WINDOW distinct lines only, so memory
    stays flat in the file's size: an identical line further away than that reads as the
    same line exported twice."""

    WINDOW = 250_000

    def __init__(self) -> None:
        self.current: dict[bytes, int] = {}
        self.previous: dict[bytes, int] = {}

    def count(self, digest: bytes) -> int:
        n = self.current.get(digest) or self.previous.get(digest, 0)
        if len(self.current) >= self.WINDOW:
            self.previous, self.current = self.current, {}
        self.current[digest] = n + 1
        return n + 1


def _opt(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        if is_null(value):
            return None
        value = str(value)
    text = value.strip()
    return None if not text or text.lower() in _NULLS else text


def store_lines(session: Session, lines: Iterable[dict[str, Any]], now: datetime,
                result: ImportResult | None = None) -> ImportResult:
    """Store `lines` (billing_lines columns) in batches (constant memory), skipping those
    already stored."""
    result = result if result is not None else ImportResult()
    batch: list[dict[str, Any]] = []
    for line in lines:
        result.read += 1
        batch.append(line)
        if len(batch) >= _BATCH:
            _store_batch(session, batch, now, result)
            batch = []
    _store_batch(session, batch, now, result)
    return result


def _store_batch(session: Session, batch: list[dict[str, Any]], now: datetime,
                 result: ImportResult) -> None:
    by_source: dict[str, list[str]] = defaultdict(list)
    for line in batch:
        by_source[line["source"]].append(line["line_key"])
    existing: set[tuple[str, str]] = set()
    for source, key_list in by_source.items():
        for i in range(0, len(key_list), 500):
            chunk = key_list[i:i + 500]
            existing |= {(source, k) for (k,) in session.execute(
                select(_T.c.line_key).where(_T.c.source == source, _T.c.line_key.in_(chunk)))}
    new: list[dict[str, Any]] = []
    for line in batch:
        key = (line["source"], line["line_key"])
        if key in existing:
            result.duplicates += 1
            continue
        existing.add(key)
        line["imported_at"] = now
        new.append(line)
        billed = line["billed_micros"]
        result.billed_micros += billed
        result.by_category[line["charge_category"] or "(none)"] += billed
        result.by_provider[line["provider"] or "(none)"] += billed
        result.currencies.add(line["currency"])
    if new:
        _insert(session, new)
    result.added += len(new)


def _insert(session: Session, lines: list[dict[str, Any]]) -> None:
    """One executemany through the driver: SQLAlchemy's per-row parameter processing cost
    more than parsing the line. Values go through each column's bind processor, once per
    distinct time (a bill repeats its hours)."""
    conn = session.connection()
    names = [c.key for c in _T.c if c.key != "id"]
    compiled = insert(_T).compile(dialect=conn.dialect, column_keys=names)
    order = list(compiled.positiontup or []) if compiled.positional else names
    procs = {n: _T.c[n].type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
             for n in order}
    converting = [(i, procs[n]) for i, n in enumerate(order) if procs[n] is not None]
    converted: dict[object, object] = {}
    pick = itemgetter(*order)
    params: list[Any] = []
    for line in lines:
        values = list(pick(line))
        for i, proc in converting:
            raw = values[i]
            if raw is not None:
                done = converted.get(raw, _MISSING)
                if done is _MISSING:
                    done = converted[raw] = proc(raw)  # type: ignore[misc]
                values[i] = done
        params.append(tuple(values) if compiled.positional else dict(zip(order, values,
                                                                             strict=True)))
    conn.exec_driver_sql(str(compiled), params)


def import_focus(session: Session, path: Path, attributor: Attributor, now: datetime, *,
                 strict: bool = False, rates: Mapping[str, Decimal] | None = None,
                 ) -> ImportResult:
    """Import a FOCUS export (CSV, gzip CSV or Parquet; FOCUS 0.5 to 1.2) into the billing
    lines, streaming. One transaction: a refused file leaves nothing behind."""
    source = open_focus(path)
    result = ImportResult(version=source.version if source.native is None else "",
                          format=source.label)
    store_lines(session, parse_focus(source, attributor, result, strict=strict, rates=rates),
                now, result)
    return result


def import_cost_explorer(
    session: Session, ce: CostExplorerClient, start: date, end: date, now: datetime, *,
    tag_key: str = "team", dimension: str = "team", metric: str = "UnblendedCost",
) -> ImportResult:
    """Daily AWS spend per value of cost-allocation tag `tag_key` over [start, end)."""
    column = BILLED_DIMENSIONS.get(dimension)
    if column not in ("team", "project", "env", "cost_center"):
        raise ConfigError(f"--dimension {dimension!r}: Cost Explorer tags fill an attribution "
                          "dimension: team, project, env or cost-center")
    from costguard.providers.aws.boundary import aws_call

    lines: list[dict[str, Any]] = []
    token: str | None = None
    with aws_call("ce/get_cost_and_usage"):
        while True:
            kwargs: dict[str, Any] = {
                "TimePeriod": {"Start": start.isoformat(), "End": end.isoformat()},
                "Granularity": "DAILY", "Metrics": [metric],
                "GroupBy": [{"Type": "TAG", "Key": tag_key}],
            }
            if token:
                kwargs["NextPageToken"] = token
            page = ce.get_cost_and_usage(**kwargs)
            for period in page.get("ResultsByTime", []):
                lines.extend(_ce_lines(period, metric, column, tag_key))
            token = page.get("NextPageToken")
            if not token:
                break
    return store_lines(session, lines, now)


def _ce_lines(period: Mapping[str, Any], metric: str, column: str,
              tag_key: str) -> Iterator[dict[str, Any]]:
    span = period["TimePeriod"]
    start = _time(span["Start"], "Cost Explorer TimePeriod")
    end = _time(span["End"], "Cost Explorer TimePeriod")
    groups = period.get("Groups") or []
    if not groups and period.get("Total"):
        groups = [{"Keys": [f"{tag_key}$"], "Metrics": period["Total"]}]
    for group in groups:
        raw = group["Keys"][0]
        value = raw.split("$", 1)[1] if "$" in raw else raw  # "team$research"; "team$" = untagged
        amount = group["Metrics"][metric]["Amount"]
        amount_micros = micros(amount, f"Cost Explorer {span['Start']} {raw}")
        line: dict[str, Any] = {
            "source": "aws-ce", "charge_start": start, "charge_end": end, "provider": "aws",
            "account": None, "region": None, "service": "(all services)",
            "resource_id": None, "billed_micros": amount_micros,
            "effective_micros": amount_micros, "team": None, "project": None, "env": None,
            "cost_center": None, "charge_category": None, "charge_class": None,
            "currency": group["Metrics"][metric].get("Unit") or BASE_CURRENCY,
        }
        line[column] = value or None
        line["line_key"] = hashlib.sha256(
            f"{start.isoformat()}|{tag_key}|{value}|{metric}".encode()).hexdigest()
        yield line
