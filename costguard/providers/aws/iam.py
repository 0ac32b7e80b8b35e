"""The least-privilege IAM policy costguard needs, generated from what it is allowed to do.

`deploy/iam/aws/*.json` are written from this function and a test keeps them in sync.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PROTECT_TAG = "costguard:protect"
PARKED_TAG = "costguard:parked-sizes"  # providers/aws/owners.py

READ_ACTIONS = [
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceStatus",  # the state after a stop (providers/aws/batch.py)
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeRegions",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeVolumes",  # what a stopped instance still costs (providers/aws/disks.py)
    "cloudwatch:GetMetricData",
    "cloudwatch:ListMetrics",
    "pricing:GetProducts",
    "autoscaling:DescribeAutoScalingGroups",  # owners' sizes and tags (aws/owners.py)
]


# costguard protects an instance whose costguard:protect tag has any value but false, 0, no
# or off (actions/safety.py). IAM allows an action only where the tag is absent, or holds one
# of those values in any case: a value costguard reads as "protected" is refused by IAM too
# (a value with stray spaces, which costguard reads as unprotected, IAM still refuses).
UNPROTECTED_VALUES = ["false", "0", "no", "off"]


def unprotected(sid: str, actions: str | list[str], resource: str | list[str],
                key: str = f"aws:ResourceTag/{PROTECT_TAG}") -> list[dict[str, Any]]:
    """Two Allow statements for `actions` on resources costguard does not protect: the tag
    absent, or one of the values that mean "not protected"."""
    base = {"Effect": "Allow", "Action": actions, "Resource": resource}
    return [
        {"Sid": sid, **base, "Condition": {"Null": {key: "true"}}},
        {"Sid": f"{sid}ProtectOff", **base,
         "Condition": {"StringEqualsIgnoreCase": {key: UNPROTECTED_VALUES}}},
    ]


def required_iam_policy(
    enforcing: bool,
    tagging: bool,
    *,
    cross_account: bool = False,
    discover_accounts: bool = False,
    role_name: str = "CostguardRole",
    terminating: bool = False,
    scaling_in: bool = False,
    parking: bool = False,
    standing: Mapping[str, frozenset[str]] | None = None,
) -> dict[str, Any]:
    """An IAM policy document for costguard's role in each account it reads.

    enforcing: may stop and start instances (never terminate), except ones costguard
        protects (`costguard:protect` with any value but false/0/no/off) — the tag is
        enforced by IAM too, not only by costguard.
    tagging: may add and remove instance tags, but never touch `costguard:protect` itself.
    terminating: a policy enables `terminate`: may snapshot EBS volumes (CreateSnapshots,
        tagging the snapshots as they are made) and terminate instances, again never ones
        costguard protects.
    scaling_in: a policy has a `scale_in` step: may remove a member from its Auto Scaling
        group (TerminateInstanceInAutoScalingGroup), never from a group costguard protects.
    parking: a policy has a `scale_to_zero` step: may set an Auto Scaling group's sizes
        (UpdateAutoScalingGroup) and write or remove the one hint tag
        `costguard:parked-sizes` on it, never on a group costguard protects.
    standing: volume, snapshot and address kinds the policies govern, each with the actions
        its enforced policies take (`delete`, `tag`): read rights for every kind, and for
        those actions the rights `standing_statements` gives.
    cross_account / discover_accounts: the extra rights of the account costguard runs in
        (assume `role_name` elsewhere; list the organization's accounts).
    With neither enforcing nor tagging the policy is read-only.
    """
    statements: list[dict[str, Any]] = [
        {
            "Sid": "CostguardRead",
            "Effect": "Allow",
            "Action": sorted(READ_ACTIONS),
            # These List/Describe/Get calls support no resource-level permissions.
            "Resource": "*",
        }
    ]
    if enforcing:
        statements += unprotected("CostguardStopStart",
                                  ["ec2:StartInstances", "ec2:StopInstances"],
                                  "arn:aws:ec2:*:*:instance/*")
    if tagging:
        statements.append(
            {
                "Sid": "CostguardTag",
                "Effect": "Allow",
                "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
                "Resource": "arn:aws:ec2:*:*:instance/*",
                "Condition": {"ForAllValues:StringNotEquals": {"aws:TagKeys": [PROTECT_TAG]}},
            }
        )
    if terminating:
        statements += terminate_statements()
    group = "arn:aws:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/*"
    group_tag = f"autoscaling:ResourceTag/{PROTECT_TAG}"
    if scaling_in:
        statements += unprotected("CostguardScaleIn",
                                  "autoscaling:TerminateInstanceInAutoScalingGroup", group,
                                  group_tag)
    if parking:
        statements += [
            *unprotected("CostguardParkGroups", "autoscaling:UpdateAutoScalingGroup", group,
                         group_tag),
            {
                "Sid": "CostguardParkedSizesTag",
                "Effect": "Allow",
                "Action": ["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"],
                "Resource": group,
                "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": [PARKED_TAG]}},
            },
        ]
    if standing:
        statements += standing_statements(standing)
    if cross_account:
        statements.append(
            {
                "Sid": "CostguardAssumeRole",
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Resource": f"arn:aws:iam::*:role/{role_name}",
            }
        )
    if discover_accounts:
        statements.append(
            {
                "Sid": "CostguardListAccounts",
                "Effect": "Allow",
                "Action": "organizations:ListAccounts",
                "Resource": "*",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def terminate_statements() -> list[dict[str, Any]]:
    """What `terminate` needs: snapshots first (see providers/aws/terminate.py), then
    TerminateInstances, both refused for protected instances by IAM too."""
    return [
        {
            "Sid": "CostguardSnapshotBeforeTerminate",
            "Effect": "Allow",
            "Action": ["ec2:CreateSnapshot", "ec2:CreateSnapshots"],
            "Resource": ["arn:aws:ec2:*:*:instance/*", "arn:aws:ec2:*:*:volume/*",
                         "arn:aws:ec2:*::snapshot/*"],
        },
        {
            "Sid": "CostguardTagNewSnapshots",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": "arn:aws:ec2:*::snapshot/*",
            "Condition": {"StringEquals": {"ec2:CreateAction": ["CreateSnapshot",
                                                                "CreateSnapshots"]}},
        },
        {
            "Sid": "CostguardReadSnapshots",
            "Effect": "Allow",
            "Action": "ec2:DescribeSnapshots",
            "Resource": "*",
        },
        *unprotected("CostguardTerminate", "ec2:TerminateInstances",
                     "arn:aws:ec2:*:*:instance/*"),
    ]


# per kind of standing resource (costguard/standing/): what reading it needs, its resource
# ARN, and the call that deletes it
STANDING_READ = {
    "volume": ["ec2:DescribeVolumes"],
    "snapshot": ["ec2:DescribeSnapshots", "ec2:DescribeImages",
                 "ec2:DescribeLaunchTemplateVersions", "ec2:DescribeVolumes"],
    "address": ["ec2:DescribeAddresses"],
    # and the running instances that could use a reservation's free capacity
    "reservation": ["ec2:DescribeCapacityReservations", "ec2:DescribeInstances"],
    # SageMaker notebook instances (aws/notebooks.py) and Studio apps (aws/studio.py):
    # listed, re-read, tags (an app's are its space's)
    "notebook": ["sagemaker:ListNotebookInstances", "sagemaker:DescribeNotebookInstance",
                 "sagemaker:ListApps", "sagemaker:DescribeApp", "sagemaker:ListTags"],
}
STANDING_ARN = {"volume": "arn:aws:ec2:*:*:volume/*", "snapshot": "arn:aws:ec2:*::snapshot/*",
                "address": "arn:aws:ec2:*:*:elastic-ip/*"}
NOTEBOOK_ARN = "arn:aws:sagemaker:*:*:notebook-instance/*"
STUDIO_APP_ARN = "arn:aws:sagemaker:*:*:app/*"  # a space is stopped by deleting its app
STUDIO_SPACE_ARNS = ["arn:aws:sagemaker:*:*:space/*", "arn:aws:sagemaker:*:*:user-profile/*"]
STANDING_DELETE = {"volume": "ec2:DeleteVolume", "snapshot": "ec2:DeleteSnapshot",
                   "address": "ec2:ReleaseAddress"}


def standing_statements(kinds: Mapping[str, frozenset[str]]) -> list[dict[str, Any]]:
    """Read rights for the standing kinds governed; for each kind whose enforced policies
    `delete`, that call on resources costguard does not protect (IAM refuses the protected
    ones too) and, for volumes, the snapshot taken first and its tags; for those that
    `tag`, CreateTags on that kind, never of `costguard:protect` itself."""
    read = sorted({a for kind in kinds for a in STANDING_READ[kind]})
    out: list[dict[str, Any]] = [{"Sid": "CostguardReadStorage", "Effect": "Allow",
                                  "Action": read, "Resource": "*"}]
    deleting = sorted(k for k, acts in kinds.items() if "delete" in acts)
    if "volume" in deleting:
        out += [
            {"Sid": "CostguardSnapshotBeforeDelete", "Effect": "Allow",
             "Action": "ec2:CreateSnapshot",
             "Resource": [STANDING_ARN["volume"], STANDING_ARN["snapshot"]]},
            {"Sid": "CostguardTagSnapshotBeforeDelete", "Effect": "Allow",
             "Action": "ec2:CreateTags", "Resource": STANDING_ARN["snapshot"],
             "Condition": {"StringEquals": {"ec2:CreateAction": "CreateSnapshot"}}},
        ]
    for kind in deleting:
        out += unprotected(f"CostguardDelete{kind.title()}", STANDING_DELETE[kind],
                           STANDING_ARN[kind])
    if kinds.get("notebook", frozenset()) & {"stop", "start"}:
        out += unprotected("CostguardPowerNotebooks", ["sagemaker:StopNotebookInstance",
                                                       "sagemaker:StartNotebookInstance"],
                           NOTEBOOK_ARN)
        # the protect tag is the space's, which IAM does not see on the app: costguard's
        # re-check reads it before every DeleteApp
        out.append({"Sid": "CostguardStopStudioSpaces", "Effect": "Allow",
                    "Action": "sagemaker:DeleteApp", "Resource": STUDIO_APP_ARN})
    if "tag" in kinds.get("notebook", frozenset()):
        out.append({"Sid": "CostguardTagNotebooks", "Effect": "Allow",
                    "Action": ["sagemaker:AddTags", "sagemaker:DeleteTags"],
                    "Resource": [NOTEBOOK_ARN, *STUDIO_SPACE_ARNS],
                    "Condition": {"ForAllValues:StringNotEquals": {
                        "aws:TagKeys": [PROTECT_TAG]}}})
    tagging = sorted(k for k, acts in kinds.items() if "tag" in acts and k in STANDING_ARN)
    if tagging:
        out.append({"Sid": "CostguardTagStorage", "Effect": "Allow",
                    "Action": "ec2:CreateTags",
                    "Resource": [STANDING_ARN[k] for k in tagging],
                    "Condition": {"ForAllValues:StringNotEquals": {
                        "aws:TagKeys": [PROTECT_TAG]}}})
    return out


def trust_policy(hub_account_id: str, external_id_required: bool = True) -> dict[str, Any]:
    """Trust policy for `CostguardRole` in a member account: only the hub account may assume it
    (and only with the external id when one is configured)."""
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:aws:iam::{hub_account_id}:root"},
        "Action": "sts:AssumeRole",
    }
    if external_id_required:
        statement["Condition"] = {"StringEquals": {"sts:ExternalId": "<your external id>"}}
    return {"Version": "2012-10-17", "Statement": [statement]}


def gpu_host_policy(namespace: str = "CWAgent") -> dict[str, Any]:
    """What a GPU host's role needs to publish its GPU metrics for costguard (the CloudWatch
    agent's nvidia_gpu plugin, or `costguard-agent --publish-to cloudwatch`): PutMetricData
    into the agent's namespace only, with the `cloudwatch:namespace` condition key.

    Every role allowed to write that namespace can write any instance's GPU series there
    (CloudWatch does not tie a point to the instance that wrote it), so grant it to the GPU
    hosts' role and no other; it does not replace what the CloudWatch agent's logs need."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "CostguardGpuMetrics",
        "Effect": "Allow",
        "Action": "cloudwatch:PutMetricData",
        "Resource": "*",  # PutMetricData has no resource-level permissions
        "Condition": {"StringEquals": {"cloudwatch:namespace": namespace}},
    }]}


GPU_HOST_FILE = "costguard-gpu-host.json"  # deploy/iam/aws/: gpu_host_policy()

# Files under deploy/iam/aws/ and the arguments that produce them.
# the kinds with rights of their own the shipped policies (policies/, dry-run) govern: the
# deploy files can read them, so a first dry run sees storage, reservations and notebooks
# (a test keeps this in step with policies/; acting on them takes `costguard iam` for
# enforced policies)
SHIPPED_STANDING: dict[str, frozenset[str]] = {
    kind: frozenset() for kind in ("volume", "snapshot", "address", "reservation", "notebook")}
DEPLOY_FILES: dict[str, dict[str, Any]] = {
    "costguard-readonly.json": {"enforcing": False, "tagging": False,
                                "standing": SHIPPED_STANDING},
    "costguard-enforce.json": {"enforcing": True, "tagging": True, "scaling_in": True,
                               "standing": SHIPPED_STANDING},
    "costguard-terminate.json": {"enforcing": True, "tagging": True, "terminating": True,
                                 "standing": SHIPPED_STANDING},
    "costguard-hub.json": {
        "enforcing": False,
        "tagging": False,
        "cross_account": True,
        "discover_accounts": True,
        "standing": SHIPPED_STANDING,
    },
}


def write_deploy_files(directory: str) -> list[str]:
    """Write every policy in DEPLOY_FILES into `directory`; returns the paths written."""
    from pathlib import Path

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    documents = {name: required_iam_policy(**flags) for name, flags in DEPLOY_FILES.items()}
    documents[GPU_HOST_FILE] = gpu_host_policy()
    for name, document in documents.items():
        path = target / name
        path.write_text(json.dumps(document, indent=2) + "\n")
        written.append(str(path))
    return written


if __name__ == "__main__":  # python -m costguard.providers.aws.iam deploy/iam/aws
    import sys

    for written_path in write_deploy_files(sys.argv[1] if len(sys.argv) > 1 else "deploy/iam/aws"):
        print(written_path)
