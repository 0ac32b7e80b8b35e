"""AWS EC2 provider: inventory, CloudWatch GPU metrics, stop/start/tag, prices, IAM policy.

Public surface: `AwsProvider`, `AwsSettings`, `AwsAccount`, `CloudWatchSettings`,
`required_iam_policy`.
"""

from importlib import import_module
from typing import Any

from costguard.providers.aws.settings import AwsAccount, AwsSettings, CloudWatchSettings

# boto3 and botocore cost ~25 MB and half a second to import: load them only when AWS is
# used, so a daemon governing GCP (or the simulated cloud) and the config loader stay light
_LAZY = {
    "AwsProvider": "costguard.providers.aws.provider",
    "required_iam_policy": "costguard.providers.aws.iam",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AwsAccount", "AwsProvider", "AwsSettings", "CloudWatchSettings", "required_iam_policy"]
