"""Billing import: what the cloud invoiced, beside what costguard estimated.

Two sources: FOCUS 1.x cost exports (CSV or Parquet, see focus_files) and AWS Cost
Explorer `GetCostAndUsage` grouped by a cost-allocation tag. Lines are attributed with the
same attribution rules as instances (FOCUS `Tags`) and stored in micro-dollars. Each line's
key is a hash of its content and its occurrence in the file, so importing the same export
twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Table, func, select
from sqlmodel import Session

from costguard.costs.attribution import UNATTRIBUTED, Attributor
from costguard.costs.focus_files import REQUIRED, BillingImportError, FocusFile, open_focus
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
_PROVIDERS = {"aws": "aws", "amazon web services": "aws", "google cloud": "gcp", "gcp": "gcp",
              "google": "gcp", "microsoft": "azure", "azure": "azure"}
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass
class ImportResult:
    read: int = 0
    added: int = 0
    duplicates: int = 0
    billed_micros: int = 0


def micros(text: object, where: str) -> int:
    if text is None:
        raise BillingImportError(f"{where} is empty")
    try:
        value = Decimal(str(text).strip() or "0")
    except InvalidOperation:
        raise BillingImportError(f"{where}: {text!r} is not a number") from None
    return int((value * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _time(text: object, where: str) -> datetime:
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=UTC)
    raw = str(text).strip().replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise BillingImportError(
            f"{where}: {text!r} is not an ISO 8601 time (FOCUS uses 2026-11-01T00:00:00Z)"
        ) from None
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def _tags(text: object, where: str) -> dict[str, str]:
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return {str(k): str(v) for k, v in text.items()}
    if isinstance(text, list):  # a Parquet map column: [(key, value), ...]
        try:
            return {str(k): str(v) for k, v in text}
        except (TypeError, ValueError):
            raise BillingImportError(
                f"{where}: Tags is a list but not of (key, value) pairs") from None
    try:
        doc = json.loads(str(text))
    except json.JSONDecodeError:
        raise BillingImportError(
            f"{where}: Tags is not a JSON object: {str(text)[:60]!r}") from None
    if not isinstance(doc, dict):
        raise BillingImportError(f"{where}: Tags must be a JSON object")
    return {str(k): str(v) for k, v in doc.items()}


def _attribute(attributor: Attributor, tags: dict[str, str], account: str | None,
               resource: str | None) -> dict[str, str | None]:
    # The attributor reads tags, name and account only; the rest of the Instance is inert.
    shim = Instance(provider="aws", account=account or "", region="", instance_id=resource or "",
                    name=tags.get("Name"), instance_type="", state=InstanceState.RUNNING,
                    launch_time=_EPOCH, observed_at=_EPOCH, tags=tags)
    return attributor.dimensions(shim)


def parse_focus(source: FocusFile, attributor: Attributor) -> Iterator[BillingLineRow]:
    """The billing lines of an opened FOCUS file (its columns already checked)."""
    seen: Counter[str] = Counter()
    for n, row in enumerate(source.rows):
        where = source.where(n)
        account = _opt(row.get("SubAccountId") or row.get("BillingAccountId"))
        resource = _opt(row.get("ResourceId"))
        tags = _tags(row.get("Tags"), where)
        dims = _attribute(attributor, tags, account, resource)
        provider_name = str(row.get("ServiceProviderName") or row.get("ProviderName") or "")
        effective = row.get("EffectiveCost")
        if effective is None or effective == "":  # 0 is a price (credits), not a blank
            effective = row["BilledCost"]
        line = BillingLineRow(
            source="focus", line_key="", imported_at=_EPOCH,
            charge_start=_time(row["ChargePeriodStart"], where),
            charge_end=_time(row["ChargePeriodEnd"], where),
            provider=_PROVIDERS.get(provider_name.strip().lower(), provider_name or None),
            account=account, region=_opt(row.get("RegionId") or row.get("Region")),
            service=_opt(row.get("ServiceName")), resource_id=resource,
            billed_micros=micros(row["BilledCost"], f"{where} BilledCost"),
            effective_micros=micros(effective, f"{where} EffectiveCost"),
            team=dims.get("team"), project=dims.get("project"), env=dims.get("env"),
            cost_center=dims.get("cost-center"),
        )
        content = json.dumps({k: str(v) for k, v in sorted(row.items())}, sort_keys=True)
        seen[content] += 1
        line.line_key = hashlib.sha256(f"{content}#{seen[content]}".encode()).hexdigest()
        yield line


def _opt(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


def store_lines(session: Session, lines: Iterable[BillingLineRow], now: datetime) -> ImportResult:
    result = ImportResult()
    batch: list[BillingLineRow] = []
    for line in lines:
        result.read += 1
        batch.append(line)
    keys = {(line.source, line.line_key) for line in batch}
    existing: set[tuple[str, str]] = set()
    by_source: dict[str, list[str]] = defaultdict(list)
    for source, key in keys:
        by_source[source].append(key)
    for source, key_list in by_source.items():
        for i in range(0, len(key_list), 500):
            chunk = key_list[i:i + 500]
            existing |= {(source, k) for (k,) in session.execute(
                select(_T.c.line_key).where(_T.c.source == source, _T.c.line_key.in_(chunk)))}
    for line in batch:
        if (line.source, line.line_key) in existing:
            result.duplicates += 1
            continue
        existing.add((line.source, line.line_key))
        line.imported_at = now
        session.add(line)
        result.added += 1
        result.billed_micros += line.billed_micros
    session.flush()
    return result


def import_focus(session: Session, path: Path, attributor: Attributor,
                 now: datetime) -> ImportResult:
    """Import a FOCUS 1.x export (CSV or Parquet) into the billing lines."""
    lines = list(parse_focus(open_focus(path), attributor))  # every line parsed, then stored
    return store_lines(session, lines, now)


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

    lines: list[BillingLineRow] = []
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
              tag_key: str) -> Iterator[BillingLineRow]:
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
        line = BillingLineRow(
            source="aws-ce", line_key="", imported_at=_EPOCH, charge_start=start,
            charge_end=end, provider="aws", service="(all services)",
            billed_micros=micros(amount, f"Cost Explorer {span['Start']} {raw}"),
            effective_micros=micros(amount, f"Cost Explorer {span['Start']} {raw}"))
        setattr(line, column, value or None)
        line.line_key = hashlib.sha256(
            f"{start.isoformat()}|{tag_key}|{value}|{metric}".encode()).hexdigest()
        yield line


def billed_by(
    session: Session, by: Sequence[str], since: datetime, until: datetime,
    filters: Mapping[str, str] | None = None,
) -> dict[tuple[str, ...], int]:
    """Billed micro-dollars per key of `by`, for lines whose charge starts in [since, until)."""
    def column(dim: str) -> Any:
        name = BILLED_DIMENSIONS.get(dim)
        if name is None:
            raise ConfigError(
                f"bills carry no {dim!r}: compare billed by "
                f"{', '.join(BILLED_DIMENSIONS)} (drop --compare billed or change --by)")
        col = _T.c[name]
        return func.coalesce(col, UNATTRIBUTED) if dim not in ("instance",) else col

    keys = [column(d).label(f"k{i}") for i, d in enumerate(by)]
    where = [_T.c.charge_start >= since, _T.c.charge_start < until]
    where += [column(d) == v for d, v in (filters or {}).items()]
    stmt = select(*keys, func.sum(_T.c.billed_micros)).where(*where)
    if keys:
        stmt = stmt.group_by(*keys)
    out: dict[tuple[str, ...], int] = {}
    for r in session.execute(stmt):
        values = tuple(r)
        if values[-1] is None:
            continue
        out[tuple(str(v) if v is not None else UNATTRIBUTED for v in values[:-1])] = int(
            values[-1])
    return out


