"""AWS EC2 provider: inventory, CloudWatch GPU metrics, stop/start/tag, prices, IAM policy."""

from costguard.providers.aws.iam import required_iam_policy
from costguard.providers.aws.provider import AwsProvider
from costguard.providers.aws.settings import AwsAccount, AwsSettings, CloudWatchSettings

__all__ = ["AwsAccount", "AwsProvider", "AwsSettings", "CloudWatchSettings", "required_iam_policy"]
