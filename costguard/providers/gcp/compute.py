"""The parts of google-cloud-compute costguard uses, without importing the other ninety.

`google.cloud.compute_v1`'s `__init__` imports every service client of the Compute API
(about a hundred: ~1 s of CPU and tens of MB); costguard uses seven. Python runs a package's
`__init__` before any submodule of it, so `load()` first registers the package unexecuted
(the module its spec describes, with its `__path__`, so submodules import as usual) and gives
it a module `__getattr__` that runs the real `__init__` the first time a name the package
does not hold yet is asked for: code elsewhere that does `from google.cloud import
compute_v1` and uses any name of it still gets it, at the old cost, once. Where the package
was already imported, it is used as it is.

costguard's GCP modules import `compute_v1` from here (tests/providers/gcp/
test_compute_imports.py checks what a GCP cycle loads, and that the package stays whole for
everyone else).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_PACKAGE = "google.cloud.compute_v1"
_lock = threading.RLock()


def _lazy_package() -> ModuleType:
    """`google.cloud.compute_v1` registered without running its `__init__` (see above)."""
    with _lock:
        existing = sys.modules.get(_PACKAGE)
        if existing is not None:
            return existing
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or spec.loader is None:
            raise ImportError(f"{_PACKAGE} is not installed (google-cloud-compute)")
        package = importlib.util.module_from_spec(spec)
        loader = spec.loader
        state = {"ran": False}

        def __getattr__(name: str) -> Any:  # the real __init__, run once, on demand
            # a submodule's name (`from google.cloud.compute_v1 import gapic_version`, which
            # its own modules do) is for the import system to load, not a reason to run it
            if (not state["ran"] and not name.startswith("__")
                    and importlib.util.find_spec(f"{_PACKAGE}.{name}") is None):
                with _lock:
                    if not state["ran"]:
                        state["ran"] = True  # first: the __init__'s own imports ask too
                        loader.exec_module(package)
                if name in package.__dict__:
                    return package.__dict__[name]
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")

        package.__getattr__ = __getattr__  # type: ignore[method-assign]
        sys.modules[_PACKAGE] = package
        import google.cloud

        google.cloud.compute_v1 = package
        return package


compute_v1 = _lazy_package()

# the names costguard uses, from the submodules that define them
from google.cloud.compute_v1.services.autoscalers import AutoscalersClient  # noqa: E402
from google.cloud.compute_v1.services.disks import DisksClient  # noqa: E402
from google.cloud.compute_v1.services.instance_group_managers import (  # noqa: E402
    InstanceGroupManagersClient,
)
from google.cloud.compute_v1.services.instances import InstancesClient  # noqa: E402
from google.cloud.compute_v1.services.region_autoscalers import (  # noqa: E402
    RegionAutoscalersClient,
)
from google.cloud.compute_v1.services.region_instance_group_managers import (  # noqa: E402
    RegionInstanceGroupManagersClient,
)
from google.cloud.compute_v1.services.zone_operations import (  # noqa: E402
    ZoneOperationsClient,
)
from google.cloud.compute_v1.types import (  # noqa: E402
    AggregatedListAutoscalersRequest,
    AggregatedListDisksRequest,
    AggregatedListInstanceGroupManagersRequest,
    AggregatedListInstancesRequest,
    CreateSnapshotDiskRequest,
    DeleteAddressRequest,
    DeleteDiskRequest,
    DeleteInstanceRequest,
    DeleteSnapshotRequest,
    Disk,
    GlobalSetLabelsRequest,
    Instance,
    InstanceAggregatedList,
    InstanceGroupManagersDeleteInstancesRequest,
    InstancesSetLabelsRequest,
    Operation,
    RegionInstanceGroupManagersDeleteInstancesRequest,
    RegionSetLabelsRequest,
    SetLabelsInstanceRequest,
    Snapshot,
    StartInstanceRequest,
    StopInstanceRequest,
    Warning,
    ZoneSetLabelsRequest,
)

__all__ = [
    "AggregatedListAutoscalersRequest", "AggregatedListDisksRequest",
    "AggregatedListInstanceGroupManagersRequest", "AggregatedListInstancesRequest",
    "AutoscalersClient", "CreateSnapshotDiskRequest", "DeleteAddressRequest",
    "DeleteDiskRequest", "DeleteInstanceRequest", "DeleteSnapshotRequest", "Disk",
    "DisksClient", "GlobalSetLabelsRequest", "Instance", "InstanceAggregatedList",
    "InstanceGroupManagersClient", "InstanceGroupManagersDeleteInstancesRequest",
    "InstancesClient", "InstancesSetLabelsRequest", "Operation", "RegionAutoscalersClient",
    "RegionInstanceGroupManagersClient", "RegionInstanceGroupManagersDeleteInstancesRequest",
    "RegionSetLabelsRequest", "SetLabelsInstanceRequest", "Snapshot", "StartInstanceRequest",
    "StopInstanceRequest", "Warning", "ZoneOperationsClient", "ZoneSetLabelsRequest",
    "compute_v1",
]
