"""The AWS provider's standing resources (standing.model.HoldsStanding): EBS volumes and
snapshots, Elastic IPs (aws/standing.py) and capacity reservations (aws/reservations.py),
read per (account, region) as the inventory is. Mixed into AwsProvider, whose settings,
clients, clock, price table and account scopes it uses.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from costguard.clock import Clock
from costguard.errors import ProviderError
from costguard.model import ActionResult, Gap
from costguard.providers.aws import reservations, standing
from costguard.providers.aws.pricing import OnDemandTable
from costguard.providers.aws.sessions import AccountScope, ClientFactory
from costguard.providers.aws.settings import AwsSettings
from costguard.standing.model import Standing, StandingKind, StandingList


class AwsStandingOps:
    """AwsProvider's standing resources."""

    settings: AwsSettings
    clients: ClientFactory
    clock: Clock
    prices: OnDemandTable
    _regions_of: Callable[[AccountScope], list[str] | Gap]
    _account: Callable[[str], AccountScope]

    def standing_kinds(self) -> frozenset[StandingKind]:
        return frozenset(StandingKind)

    def list_standing(self, kinds: frozenset[StandingKind]) -> StandingList:
        """Every volume, snapshot, address and capacity reservation of `kinds` in every
        scope (aws/standing.py, aws/reservations.py)."""
        observed_at = self.clock.now()
        try:
            accounts = self.clients.accounts()
        except ProviderError as exc:
            return StandingList(gaps=[Gap(provider="aws", scope="accounts", error=str(exc))])
        out = StandingList()
        with ThreadPoolExecutor(self.settings.max_workers, "costguard-aws-standing") as pool:
            scopes: list[tuple[AccountScope, str]] = []
            for account, regions in zip(accounts, pool.map(self._regions_of, accounts),
                                        strict=True):
                if isinstance(regions, Gap):
                    out.gaps.append(regions)
                else:
                    scopes += [(account, region) for region in regions]

            def read(scope: tuple[AccountScope, str]) -> list[Standing] | Gap:
                account, region = scope
                ec2 = self.clients.ec2(account, region)
                try:
                    found = standing.read_scope(ec2, kinds, account=account.account_id,
                                                region=region, observed_at=observed_at)
                    if StandingKind.RESERVATION in kinds:
                        found += reservations.read_scope(
                            ec2, account=account.account_id, region=region,
                            observed_at=observed_at, price=self._on_demand(region))
                    return found
                except ProviderError as exc:
                    return Gap(provider="aws", scope=f"{account.account_id}/{region}",
                               error=str(exc))

            for got in pool.map(read, scopes):
                if isinstance(got, Gap):
                    out.gaps.append(got)
                else:
                    out.items.extend(got)
        return out

    def _ec2_of(self, item: Standing) -> Any:
        return self.clients.ec2(self._account(item.account), item.region)

    def _on_demand(self, region: str) -> reservations.Price:
        def price(itype: str) -> tuple[float, str] | None:
            found = self.prices.lookup(region, itype)
            return None if found is None else (found.usd_per_hour, found.source)
        return price

    def describe_standing(self, item: Standing) -> Standing | None:
        if item.kind is StandingKind.RESERVATION:
            return reservations.describe(self._ec2_of(item), item, self.clock.now(),
                                         self._on_demand(item.region))
        return standing.describe(self._ec2_of(item), item, self.clock.now())

    def snapshot_volume(self, item: Standing, *, dry_run: bool) -> tuple[str, str]:
        return standing.snapshot_volume(self._ec2_of(item), item, dry_run=dry_run)

    def delete_standing(self, item: Standing, *, dry_run: bool) -> ActionResult:
        return standing.delete(self._ec2_of(item), item, dry_run=dry_run)

    def tag_standing(self, item: Standing, tags: dict[str, str], *, dry_run: bool
                     ) -> ActionResult:
        return standing.tag(self._ec2_of(item), item, tags, dry_run=dry_run)

