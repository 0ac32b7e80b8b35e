"""SageMaker Studio's apps and spaces, which moto 5.2 does not implement (ListApps,
DescribeApp, DeleteApp, and the tags of a space or user profile), served by moto's own
SageMaker endpoint: a fake that follows the API reference, for the tests. Its records carry
the fields of the reference's `DescribeApp` answer (ListApps gives each app's `AppDetails`
subset); moto's serializer writes the answers from botocore's SageMaker service model (the
shapes the reference documents), and botocore parses them as it parses SageMaker's own.
Everything else (notebook instances, their tags) is moto's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from moto.core.responses import ActionResult, EmptyResult
from moto.sagemaker.exceptions import ResourceNotFound, ValidationError
from moto.sagemaker.responses import SageMakerResponse

ACCOUNT = "123456789012"  # moto's default account
_PAGE = 2  # a small page, so paging is exercised
_DETAILS = ("DomainId", "UserProfileName", "SpaceName", "AppType", "AppName", "Status",
            "CreationTime", "ResourceSpec")  # ListApps' AppDetails


@dataclass
class Studio:
    """What the fake holds: (account, region) -> apps; ARN -> tags of spaces and profiles."""

    apps: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)  # the apps DeleteApp was asked for


HELD = Studio()


def app(domain: str, space: str, itype: str = "ml.g5.xlarge", *, app_type: str = "JupyterLab",
        name: str = "default", status: str = "InService", region: str = "us-east-1",
        created: datetime | None = None, user: str | None = None) -> dict[str, Any]:
    """One app, with the fields the API reference gives DescribeApp's answer (`user`: a
    Studio Classic user's app, of no space)."""
    owner = f"{domain}/{user}" if user else f"{domain}/{space}"
    return {
        "AppArn": f"arn:aws:sagemaker:{region}:{ACCOUNT}:app/{owner}/"
                  f"{app_type.lower()}/{name}",
        "AppType": app_type, "AppName": name, "DomainId": domain,
        **({"UserProfileName": user} if user else {"SpaceName": space}),
        "Status": status,
        "LastHealthCheckTimestamp": datetime(2026, 12, 1, tzinfo=UTC),
        "LastUserActivityTimestamp": datetime(2026, 12, 1, tzinfo=UTC),
        "CreationTime": created or datetime(2026, 11, 20, tzinfo=UTC),
        "ResourceSpec": {"InstanceType": itype,
                         "SageMakerImageArn": f"arn:aws:sagemaker:{region}:081325390199:"
                                              "image/sagemaker-distribution-gpu"},
    }


def _held(self: SageMakerResponse) -> list[dict[str, Any]]:
    return HELD.apps.get((self.current_account, self.region), [])


def _list(self: SageMakerResponse) -> ActionResult:
    apps = _held(self)
    for key, param in (("DomainId", "DomainIdEquals"), ("SpaceName", "SpaceNameEquals"),
                       ("UserProfileName", "UserProfileNameEquals")):
        wanted = self._get_param(param)
        if wanted:
            apps = [a for a in apps if a.get(key) == wanted]
    size = min(int(self._get_param("MaxResults") or _PAGE), _PAGE)
    start = int(self._get_param("NextToken") or 0)
    page = [{k: a[k] for k in _DETAILS if k in a} for a in apps[start:start + size]]
    more = start + size < len(apps)
    return ActionResult({"Apps": page, **({"NextToken": str(start + size)} if more else {})})


def _find(self: SageMakerResponse) -> dict[str, Any]:
    for a in _held(self):
        if (a["DomainId"], a["AppType"], a["AppName"]) == (
                self._get_param("DomainId"), self._get_param("AppType"),
                self._get_param("AppName")) and (
                a.get("SpaceName") == self._get_param("SpaceName")
                and a.get("UserProfileName") == self._get_param("UserProfileName")):
            return a
    raise ResourceNotFound(f"App {self._get_param('AppName')} of type "
                           f"{self._get_param('AppType')} does not exist.")


def _describe(self: SageMakerResponse) -> ActionResult:
    return ActionResult(dict(_find(self)))


def _delete(self: SageMakerResponse) -> EmptyResult:
    found = _find(self)
    if found["Status"] != "InService":
        raise ValidationError(f"App is in {found['Status']} state; only an InService app "
                              "can be deleted")
    found["Status"] = "Deleting"
    HELD.deleted.append(found["AppArn"])
    return EmptyResult()


def _is_held_arn(arn: str) -> bool:
    return arn.split(":")[-1].split("/", 1)[0] in {"space", "user-profile"}


def _wrap_tags(original: Any, verb: str) -> Any:
    """Tags of a space or user profile from HELD; any other ARN's moto's own."""
    def handler(self: SageMakerResponse) -> Any:
        arn = self._get_param("ResourceArn")
        if not _is_held_arn(arn):
            return original(self)
        held = HELD.tags.setdefault(arn, {})
        if verb == "list":
            return ActionResult({"Tags": [{"Key": k, "Value": v} for k, v in held.items()]})
        if verb == "add":
            held.update({t["Key"]: t.get("Value", "") for t in self._get_param("Tags")})
            return ActionResult({"Tags": [{"Key": k, "Value": v} for k, v in held.items()]})
        for key in self._get_param("TagKeys"):
            held.pop(key, None)
        return EmptyResult()
    return handler


@contextmanager
def serving() -> Iterator[Studio]:
    """moto's SageMaker answers ListApps, DescribeApp, DeleteApp and a space's tags from
    `HELD` while inside."""
    patched = {"list_apps": _list, "describe_app": _describe, "delete_app": _delete,
               **{f"{verb}_tags": _wrap_tags(getattr(SageMakerResponse, f"{verb}_tags"), verb)
                  for verb in ("list", "add", "delete")}}
    had = {name: SageMakerResponse.__dict__.get(name) for name in patched}
    for name, handler in patched.items():
        setattr(SageMakerResponse, name, handler)
    HELD.apps.clear()
    HELD.tags.clear()
    HELD.deleted.clear()
    try:
        yield HELD
    finally:
        for name, original in had.items():
            if original is None:
                delattr(SageMakerResponse, name)
            else:
                setattr(SageMakerResponse, name, original)
