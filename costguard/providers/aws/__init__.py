"""AWS EC2 provider: inventory, CloudWatch GPU metrics, stop/start/tag, prices, IAM policy.

Public surface: `AwsProvider`, `AwsSettings`, `AwsAccount`, `CloudWatchSettings`,
`required_iam_policy`.
"""

from costguard.providers.aws.settings import AwsAccount, AwsSettings, CloudWatchSettings
from costguard.providers.lazy import lazy_attributes

# boto3 and botocore cost ~25 MB and half a second to import: load them only when AWS is
# used, so a daemon governing GCP (or the simulated cloud) and the config loader stay light
_LAZY = {
    "AwsProvider": "costguard.providers.aws.provider",
    "required_iam_policy": "costguard.providers.aws.iam",
}

__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = ["AwsAccount", "AwsProvider", "AwsSettings", "CloudWatchSettings", "required_iam_policy"]
