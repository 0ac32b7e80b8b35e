"""The permissions costguard needs on GCP, and the custom role made from them.

`deploy/iam/gcp/*.yaml` are generated from here (`render_role`); a test keeps them in sync.
Create the role with `gcloud iam roles create costguard --project P --file costguard-role.yaml`
(or `--organization O`).
"""

from __future__ import annotations

from collections.abc import Mapping
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
# what each standing kind a policy governs needs (costguard/standing/): to read it, and,
# where an enforced policy deletes or tags it, that; each action waits on its operation.
# Reading disks is in READ already (a stopped VM's cost reads them).
STANDING_READ: dict[str, tuple[str, ...]] = {
    "volume": ("compute.disks.list", "compute.disks.get"),  # gcp/volumes.py
    "address": ("compute.addresses.list", "compute.addresses.get"),  # gcp/addresses.py
    # gcp/snapshots.py: the snapshots, and the images, templates and disks that need them
    "snapshot": ("compute.snapshots.list", "compute.snapshots.get", "compute.images.list",
                 "compute.instanceTemplates.list", "compute.disks.list"),
    # reservations.aggregatedList and .get; the twins come from instances.list (READ)
    "reservation": ("compute.reservations.list", "compute.reservations.get"),
    # Workbench instances (gcp/notebooks.py): listed with their VMs, re-read before acting
    "notebook": ("notebooks.instances.list", "notebooks.instances.get"),
}
STANDING_ACT: dict[tuple[str, str], tuple[str, ...]] = {
    ("volume", "delete"): (
        "compute.disks.createSnapshot", "compute.snapshots.create",
        "compute.snapshots.setLabels",  # the costguard_snapshot-of label, set at creation
        "compute.snapshots.get",  # the snapshot's state, across cycles
        "compute.disks.delete", "compute.zoneOperations.get"),
    ("volume", "tag"): ("compute.disks.setLabels", "compute.zoneOperations.get"),
    ("address", "delete"): ("compute.addresses.delete", "compute.regionOperations.get"),
    ("address", "tag"): ("compute.addresses.setLabels", "compute.regionOperations.get"),
    ("snapshot", "delete"): ("compute.snapshots.delete", "compute.globalOperations.get"),
    ("snapshot", "tag"): ("compute.snapshots.setLabels", "compute.globalOperations.get"),
    # a Workbench instance is stopped, started and labelled through the Notebooks API (its
    # VM's own stop would leave the instance out of step), each a long-running operation
    ("notebook", "stop"): ("notebooks.instances.stop", "notebooks.operations.get"),
    ("notebook", "start"): ("notebooks.instances.start", "notebooks.operations.get"),
    ("notebook", "tag"): ("notebooks.instances.update", "notebooks.operations.get"),
}


def standing_permissions(kinds: Mapping[str, frozenset[str]]) -> list[str]:
    """The rights for the standing kinds governed (kind -> what enforced policies do)."""
    out = {p for kind in kinds for p in STANDING_READ.get(kind, ())}
    out |= {p for kind, acts in kinds.items() for act in acts
            for p in STANDING_ACT.get((kind, act), ())}
    return sorted(out)


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
                         tpus: bool = True,
                         standing: Mapping[str, frozenset[str]] | None = None) -> list[str]:
    """Permissions for a read-only (dry-run) deployment, or one that acts (`enforcing`).

    `list_projects`: also those needed to find projects under a folder or organization.
    `terminating`: a policy enables `terminate` (snapshot the disks, delete the VM).
    `scaling_in`: a policy has `scale_in` (delete a member through its instance group).
    `tpus`: Cloud TPU nodes are listed (`providers.gcp.tpus`, on by default).
    `standing`: the volume, address and reservation kinds policies govern, each with what
    its enforced policies do (`delete`, `tag`; dry-run ones give none).
    """
    perms = list(READ) + standing_permissions(standing or {})
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
                standing: Mapping[str, frozenset[str]] | None = None) -> str:
    """A custom role definition in the format `gcloud iam roles create --file` reads."""
    role = role_definition(enforcing, list_projects=list_projects, terminating=terminating,
                           scaling_in=scaling_in, tpus=tpus, standing=standing)
    header = "# Generated from costguard/providers/gcp/iam.py - regenerate, do not edit.\n"
    return header + yaml.safe_dump(role, sort_keys=False)


def role_definition(enforcing: bool, *, list_projects: bool = False,
                    terminating: bool = False, scaling_in: bool = False,
                    tpus: bool = True,
                    standing: Mapping[str, frozenset[str]] | None = None) -> dict[str, Any]:
    """The custom role as data: title, description, stage, includedPermissions."""
    title = "costguard (enforcing)" if enforcing else "costguard (read-only)"
    if enforcing and terminating:
        title = "costguard (enforcing, terminate)"
    role: dict[str, Any] = {
        "title": title,
        "description": (
            "Lists GCE instances" + (", Cloud TPU nodes" if tpus else "")
            + "".join(f", {kind}{'es' if kind.endswith('s') else 's'}"
                      for kind in sorted(standing or {}))
            + " and their accelerator metrics"
            + (", stops/starts idle instances and sets labels" if enforcing else "")
            + (", snapshots disks and deletes VMs a policy terminates"
               if enforcing and terminating else "")
            + (", shrinks managed instance groups by idle members"
               if enforcing and scaling_in else "")
            + (", snapshots and deletes unused disks"
               if "delete" in (standing or {}).get("volume", ()) else "")
            + (", releases unused addresses"
               if "delete" in (standing or {}).get("address", ()) else "")
            + (", deletes unneeded snapshots"
               if "delete" in (standing or {}).get("snapshot", ()) else "")
            + (", stops idle Workbench instances"
               if "stop" in (standing or {}).get("notebook", ()) else "")
            + ". Generated by costguard.providers.gcp.iam.render_role; do not edit by hand."
        ),
        "stage": "GA",
        "includedPermissions": required_permissions(enforcing, list_projects=list_projects,
                                                    terminating=terminating,
                                                    scaling_in=scaling_in, tpus=tpus,
                                                    standing=standing),
    }
    return role


# resourcemanager.folders.list cannot be in a project-level custom role, hence the split:
# the project roles work with `gcloud iam roles create --project`, the org role needs
# `--organization` and is only for `folder`/`organization` project discovery.
# the standing kinds the shipped policies govern (dry-run): each role file reads them (as
# aws/iam.py SHIPPED_STANDING; a test keeps both in step with policies/)
SHIPPED_STANDING: dict[str, frozenset[str]] = {
    kind: frozenset() for kind in ("volume", "snapshot", "address", "reservation", "notebook")}
ROLE_FILES: dict[str, dict[str, Any]] = {
    "deploy/iam/gcp/costguard-role.yaml": {"enforcing": True, "list_projects": False,
                                           "scaling_in": True, "standing": SHIPPED_STANDING},
    "deploy/iam/gcp/costguard-readonly-role.yaml": {"enforcing": False, "list_projects": False,
                                                    "standing": SHIPPED_STANDING},
    "deploy/iam/gcp/costguard-terminate-role.yaml": {"enforcing": True, "list_projects": False,
                                                     "terminating": True,
                                                     "standing": SHIPPED_STANDING},
    "deploy/iam/gcp/costguard-org-role.yaml": {"enforcing": True, "list_projects": True,
                                               "standing": SHIPPED_STANDING},
}
