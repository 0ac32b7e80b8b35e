"""Credentials and clients: the ambient account, assumed roles, account and region discovery.

One boto3 client per (region, service), shared by every account. A botocore client costs
~16 ms of CPU and ~0.7 MB to create; an organisation of 500 accounts in 4 regions would
need 6,000 of them (a minute and a half of CPU and 4 GB). An account is its credentials:
`client(account, region, service)` hands out an `AccountClient`, the region's shared client
bound to that account's credentials, and each call made through it is signed with them
(botocore's per-request credentials, `request_credentials` in the request's signing
context, set from a context variable by a `before-sign` handler). A call made on a shared
client outside an `AccountClient` has no account and is refused before it is signed: it
never falls back to the ambient credentials. Assumed-role credentials refresh themselves
(botocore's RefreshableCredentials) before they expire.

Clients are thread-safe; they are created under a lock. Adaptive retry mode's client-side
rate limiter is the shared client's, so throttling of one account slows that region's calls
for all accounts a little, where AWS throttles per account: a trade for the memory.
"""

from __future__ import annotations

import logging
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.credentials import Credentials, RefreshableCredentials
from botocore.session import Session as BotocoreSession

from costguard.errors import ProviderError
from costguard.providers.aws import metric_json
from costguard.providers.aws.boundary import aws_call
from costguard.providers.aws.instance_xml import EVENT as INSTANCES_EVENT
from costguard.providers.aws.instance_xml import read_describe_instances
from costguard.providers.aws.settings import AwsAccount, AwsSettings
from costguard.providers.aws.timestamps import fast_timestamp

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_pricing import PricingClient

log = logging.getLogger(__name__)

# The Price List API lives in a few regions only; us-east-1 serves every region's prices.
PRICING_REGION = "us-east-1"
# the credentials the call being made on this thread signs with (set by AccountClient)
_SIGNING_AS: ContextVar[Credentials | None] = ContextVar("costguard_aws_signing_as",
                                                         default=None)


@dataclass(frozen=True)
class AccountScope:
    """An account costguard reads, with the role it reads it through (None: ambient)."""

    account_id: str
    role_arn: str | None


class AccountClient:
    """A shared client bound to one account: every call made through it is signed with the
    account's credentials. Attributes that are not calls (`meta`, `exceptions`) are the
    shared client's."""

    __slots__ = ("_client", "_credentials", "account_id")

    def __init__(self, client: Any, credentials: Credentials, account_id: str) -> None:
        self._client = client
        self._credentials = credentials
        self.account_id = account_id

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr
        credentials = self._credentials

        def signed_as_account(*args: Any, **kwargs: Any) -> Any:
            token = _SIGNING_AS.set(credentials)
            try:
                return attr(*args, **kwargs)
            finally:
                _SIGNING_AS.reset(token)

        return signed_as_account


def _sign_as_account(request: Any, **_: Any) -> None:
    """`before-sign` on shared clients: the call's account credentials, or a refusal."""
    credentials = _SIGNING_AS.get()
    if credentials is None:
        raise ProviderError("aws", "signing", "an AWS call was made on a shared client "
                            "without an account (costguard bug): refused rather than signed "
                            "as the ambient account")
    request.context.setdefault("signing", {})["request_credentials"] = credentials


def use_fast_timestamps(session: boto3.Session) -> None:
    """Make clients created from `session` parse timestamps with `fast_timestamp`
    (`set_parser_defaults` is botocore's documented hook; it applies per session)."""
    core: BotocoreSession = session._session  # boto3 keeps its botocore session here
    core.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=fast_timestamp
    )


class ClientFactory:
    """Hands out cached boto3 clients for (account, region, service)."""

    def __init__(self, settings: AwsSettings, session: boto3.Session | None = None) -> None:
        self._settings = settings
        self._base = session or boto3.Session()
        self._lock = threading.RLock()
        self._credentials: dict[str, Credentials] = {}  # by account id
        self._account_locks: dict[str, threading.Lock] = {}
        self._shared: dict[tuple[str, str], Any] = {}  # (region, service) -> client
        self._clients: dict[tuple[str, str, str], AccountClient] = {}
        self._own_account: str | None = None
        self._sts_client: Any = None
        self.config = Config(
            retries={"mode": "standard", "max_attempts": settings.max_attempts},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=max(10, settings.max_workers * 2),
        )

    @property
    def base_session(self) -> boto3.Session:
        return self._base

    def _default_region(self) -> str:
        regions = self._settings.regions
        if isinstance(regions, list):
            return regions[0]
        return self._base.region_name or "us-east-1"

    def own_account(self) -> str:
        """The account id of the ambient credentials (cached)."""
        with self._lock:
            if self._own_account is None:
                sts = self._sts()
                with aws_call("sts"):
                    self._own_account = str(sts.get_caller_identity()["Account"])
            return self._own_account

    def accounts(self) -> list[AccountScope]:
        """Configured accounts, or every active Organizations account, or the ambient one."""
        own = self.own_account()
        listed: list[AwsAccount] = list(self._settings.accounts)
        if self._settings.discover_accounts == "organizations":
            known = {a.id for a in listed}
            listed += [AwsAccount(id=i) for i in self._organization_accounts() if i not in known]
        if not listed:
            return [AccountScope(own, None)]
        return [
            AccountScope(
                a.id,
                None if (a.id == own and a.role_arn is None) else self._settings.role_arn_for(a),
            )
            for a in listed
        ]

    def _organization_accounts(self) -> list[str]:
        org = self._client(self._base, "organizations", self._default_region())
        ids: list[str] = []
        token: str | None = None
        with aws_call("organizations"):
            while True:
                page = org.list_accounts(**({"NextToken": token} if token else {}))
                ids += [a["Id"] for a in page["Accounts"] if a.get("Status") == "ACTIVE"]
                token = page.get("NextToken")
                if not token:
                    return ids

    def regions(self, account: AccountScope) -> list[str]:
        configured = self._settings.regions
        if isinstance(configured, list):
            return list(configured)
        ec2 = self.ec2(account, self._default_region())
        with aws_call(f"{account.account_id}/describe-regions"):
            found = ec2.describe_regions(AllRegions=False)["Regions"]
        return sorted(r["RegionName"] for r in found)

    def credentials_for(self, account: AccountScope) -> Credentials:
        """The account's credentials: the ambient ones, or the role assumed on first use and
        refreshed before it expires (raises ProviderError when it cannot be assumed)."""
        with self._lock:
            account_lock = self._account_locks.setdefault(account.account_id, threading.Lock())
        # One lock per account: roles in different accounts are assumed in parallel.
        with account_lock:
            with self._lock:
                cached = self._credentials.get(account.account_id)
            if cached is not None:
                return cached
            if account.role_arn is None:
                ambient = self._base.get_credentials()
                if ambient is None:
                    raise ProviderError("aws", account.account_id, "no AWS credentials found "
                                        "(environment, shared config, or instance role)")
                credentials: Credentials = ambient
            else:
                refresh = self._assume_role_fetcher(account)
                credentials = RefreshableCredentials.create_from_metadata(
                    metadata=refresh(), refresh_using=refresh, method="sts-assume-role")
            with self._lock:
                self._credentials[account.account_id] = credentials
            return credentials

    def forget(self, account: AccountScope) -> None:
        """Drop cached credentials so the next use assumes the role again."""
        with self._lock:
            self._credentials.pop(account.account_id, None)
            for key in [k for k in self._clients if k[0] == account.account_id]:
                del self._clients[key]

    def _assume_role_fetcher(self, account: AccountScope) -> Any:
        sts = self._sts()
        role_arn = account.role_arn
        assert role_arn is not None
        kwargs: dict[str, Any] = {
            "RoleArn": role_arn,
            "RoleSessionName": self._settings.session_name,
            "DurationSeconds": 3600,
        }
        if self._settings.external_id is not None:
            kwargs["ExternalId"] = self._settings.external_id.get_secret_value()

        def refresh() -> dict[str, str]:
            with aws_call(f"{account.account_id}/assume-role"):
                creds = sts.assume_role(**kwargs)["Credentials"]
            return {
                "access_key": creds["AccessKeyId"],
                "secret_key": creds["SecretAccessKey"],
                "token": creds["SessionToken"],
                "expiry_time": creds["Expiration"].astimezone(UTC).isoformat(),
            }

        return refresh

    def _sts(self) -> Any:
        """The one STS client (the ambient credentials): it assumes every account's role.
        One per account was 500 clients, ~8 s of CPU and ~350 MB, for 500 accounts."""
        with self._lock:
            if self._sts_client is None:
                self._sts_client = self._client(self._base, "sts", self._default_region())
            return self._sts_client

    def _client(self, session: boto3.Session, service: str, region: str) -> Any:
        # costguard builds every GetMetricData query itself: no validation walk of 500
        config = (self.config.merge(Config(parameter_validation=False))
                  if service == "cloudwatch" else self.config)
        kwargs: dict[str, Any] = {"region_name": region, "config": config}
        if self._settings.endpoint_url:
            kwargs["endpoint_url"] = self._settings.endpoint_url
        with self._lock:  # botocore sessions are not thread-safe; clients are
            use_fast_timestamps(session)
            client = session.client(service, **kwargs)  # type: ignore[call-overload]
        if service == "ec2":
            client.meta.events.register(INSTANCES_EVENT, read_describe_instances)
        elif service == "cloudwatch":
            client.meta.events.register(metric_json.EVENT, metric_json.read_get_metric_data)
            client.meta.events.register(metric_json.BUILD_EVENT, metric_json.hold_queries)
            client.meta.events.register(metric_json.CALL_EVENT, metric_json.write_queries)
        return client

    def client(self, account: AccountScope, region: str, service: str) -> Any:
        """The region's shared `service` client, bound to the account's credentials."""
        key = (account.account_id, region, service)
        with self._lock:
            cached = self._clients.get(key)
        if cached is not None:
            return cached
        credentials = self.credentials_for(account)
        with self._lock:
            shared = self._shared.get((region, service))
            if shared is None:
                shared = self._client(self._base, service, region)
                shared.meta.events.register("before-sign", _sign_as_account)
                self._shared[(region, service)] = shared
            bound = self._clients.setdefault(
                key, AccountClient(shared, credentials, account.account_id))
        return bound

    def ec2(self, account: AccountScope, region: str) -> EC2Client:
        client: EC2Client = self.client(account, region, "ec2")
        return client

    def cloudwatch(self, account: AccountScope, region: str) -> CloudWatchClient:
        client: CloudWatchClient = self.client(account, region, "cloudwatch")
        return client

    def autoscaling(self, account: AccountScope, region: str) -> Any:
        return self.client(account, region, "autoscaling")

    def pricing(self) -> PricingClient:
        client: PricingClient = self._client(self._base, "pricing", PRICING_REGION)
        return client
