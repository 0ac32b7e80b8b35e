"""The permissions costguard needs on GCP, and the custom role made from them.

`deploy/iam/gcp/*.yaml` are generated from here (`render_role`); a test keeps them in sync.
Create the role with `gcloud iam roles create costguard --project P --file costguard-role.yaml`
(or `--organization O`).
"""

from __future__ import annotations

from typing import Any

import yaml

READ = (
    "compute.instances.list",  # instances.aggregatedList
    "compute.instances.get",  # re-check before and after an action
    "compute.disks.get",  # size and type: what a stopped VM still costs (gcp/disks.py)
    "compute.disks.list",  # the same for many VMs at once: disks.aggregatedList (gcp/disks.py)
    "monitoring.timeSeries.list",  # GPU metrics
    "compute.instanceGroupManagers.list",  # MIG sizes: instanceGroupManagers.aggregatedList
    "compute.autoscalers.list",  # their autoscalers' minimums: autoscalers.aggregatedList
)
# a reservation policy: reservations.aggregatedList and reservations.get (gcp/reservations.py;
# its twins come from instances.list, already read)
RESERVATIONS_READ = ("compute.reservations.list", "compute.reservations.get")
# an enforced volume policy that deletes: the snapshot first, then the delete
# (gcp/volumes.py); one that tags: the disk's labels. Reading disks is in READ already.
VOLUMES_DELETE = (
    "compute.disks.createSnapshot",
    "compute.snapshots.create",
    "compute.snapshots.setLabels",  # the costguard_snapshot-of label, set at creation
    "compute.snapshots.get",  # the snapshot's state, across cycles
    "compute.disks.delete",
    "compute.zoneOperations.get",
)
VOLUMES_TAG = ("compute.disks.setLabels", "compute.zoneOperations.get")
ENFORCE = (
    "compute.instances.stop",
    "compute.instances.start",
    "compute.instances.setLabels",
    "compute.zoneOperations.get",  # zoneOperations.get / wait
)
TPU_READ = (  # Cloud TPU nodes (gcp/tpu_nodes.py), unless providers.gcp.tpus is false
    "tpu.nodes.list",
    "tpu.nodes.get",  # re-check before and after an action on one
)
TPU_ENFORCE = (
    "tpu.nodes.stop",  # single-host TPU nodes only
    "tpu.nodes.start",
    "tpu.nodes.update",  # labels
    "tpu.operations.get",  # their long-running operations
)
TERMINATE = (  # only where a policy enables `terminate` (providers/gcp/terminate.py)
    "compute.disks.createSnapshot",
    "compute.snapshots.create",
    "compute.snapshots.setLabels",  # the costguard_snapshot-of label, set at creation
    "compute.instances.delete",
)
SCALE_IN = (  # only where a policy has a `scale_in` step (providers/gcp/groups.py)
    "compute.instanceGroupManagers.get",
    "compute.autoscalers.get",
    "compute.instanceGroupManagers.update",  # deleteInstances
)
LIST_PROJECTS = (
    "resourcemanager.projects.list",
    "resourcemanager.folders.list",
)


def required_permissions(enforcing: bool, *, list_projects: bool = False,
                         terminating: bool = False, scaling_in: bool = False,
                         tpus: bool = True, reservations: bool = False,
                         volumes: frozenset[str] = frozenset()) -> list[str]:
    """Permissions for a read-only (dry-run) deployment, or one that acts (`enforcing`).

    `list_projects`: also those needed to find projects under a folder or organization.
    `terminating`: a policy enables `terminate` (snapshot the disks, delete the VM).
    `scaling_in`: a policy has `scale_in` (delete a member through its instance group).
    `tpus`: Cloud TPU nodes are listed (`providers.gcp.tpus`, on by default).
    `reservations`: a reservation policy is enabled (read only: costguard never changes one).
    `volumes`: what enforced volume policies do to disks (`delete`, `tag`; dry-run ones
    give none).
    """
    perms = list(READ) + (list(RESERVATIONS_READ) if reservations else [])
    if "delete" in volumes:
        perms += VOLUMES_DELETE
    if "tag" in volumes:
        perms += VOLUMES_TAG
    if tpus:
        perms += TPU_READ + (TPU_ENFORCE if enforcing else ())
    if enforcing:
        perms += ENFORCE
    if enforcing and terminating:
        perms += TERMINATE
    if enforcing and scaling_in:
        perms += SCALE_IN
    if list_projects:
        perms += LIST_PROJECTS
    return sorted(set(perms))


def render_role(enforcing: bool, *, list_projects: bool = False,
                terminating: bool = False, scaling_in: bool = False, tpus: bool = True,
                reservations: bool = False, volumes: frozenset[str] = frozenset()) -> str:
    """A custom role definition in the format `gcloud iam roles create --file` reads."""
    role = role_definition(enforcing, list_projects=list_projects, terminating=terminating,
                           scaling_in=scaling_in, tpus=tpus, reservations=reservations,
                           volumes=volumes)
    header = "# Generated from costguard/providers/gcp/iam.py - regenerate, do not edit.\n"
    return header + yaml.safe_dump(role, sort_keys=False)


def role_definition(enforcing: bool, *, list_projects: bool = False,
                    terminating: bool = False, scaling_in: bool = False,
                    tpus: bool = True, reservations: bool = False,
                    volumes: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The custom role as data: title, description, stage, includedPermissions."""
    title = "costguard (enforcing)" if enforcing else "costguard (read-only)"
    if enforcing and terminating:
        title = "costguard (enforcing, terminate)"
    role: dict[str, Any] = {
        "title": title,
        "description": (
            "Lists GCE instances" + (", Cloud TPU nodes" if tpus else "")
            + (", reservations" if reservations else "")
            + " and their accelerator metrics"
            + (", stops/starts idle instances and sets labels" if enforcing else "")
            + (", snapshots disks and deletes VMs a policy terminates"
               if enforcing and terminating else "")
            + (", shrinks managed instance groups by idle members"
               if enforcing and scaling_in else "")
            + (", snapshots and deletes unused disks" if "delete" in volumes else "")
            + ". Generated by costguard.providers.gcp.iam.render_role; do not edit by hand."
        ),
        "stage": "GA",
        "includedPermissions": required_permissions(enforcing, list_projects=list_projects,
                                                    terminating=terminating,
                                                    scaling_in=scaling_in, tpus=tpus,
                                                    reservations=reservations,
                                                    volumes=volumes),
    }
    return role


# resourcemanager.folders.list cannot be in a project-level custom role, hence the split:
# the project roles work with `gcloud iam roles create --project`, the org role needs
# `--organization` and is only for `folder`/`organization` project discovery.
ROLE_FILES: dict[str, dict[str, bool]] = {
    "deploy/iam/gcp/costguard-role.yaml": {"enforcing": True, "list_projects": False,
                                           "scaling_in": True},
    "deploy/iam/gcp/costguard-readonly-role.yaml": {"enforcing": False, "list_projects": False},
    "deploy/iam/gcp/costguard-terminate-role.yaml": {"enforcing": True, "list_projects": False,
                                                     "terminating": True},
    "deploy/iam/gcp/costguard-org-role.yaml": {"enforcing": True, "list_projects": True},
}
