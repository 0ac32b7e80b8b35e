"""Google Cloud provider: Compute Engine inventory and actions, Cloud Monitoring GPU metrics.

Public surface: `GcpProvider`, `GcpSettings`, `required_permissions`, `label_key`.
Local fakes for tests and the demo live in `fake_server` (imported on demand only).
"""

from importlib import import_module
from typing import Any

from costguard.providers.gcp.settings import GcpSettings, RetrySettings

# the Google client libraries take over a second to import: load them only when used, so
# `costguard report` and the config loader stay fast
_LAZY = {
    "GcpProvider": "costguard.providers.gcp.provider",
    "label_key": "costguard.providers.gcp.actions",
    "label_value": "costguard.providers.gcp.actions",
    "render_role": "costguard.providers.gcp.iam",
    "role_definition": "costguard.providers.gcp.iam",
    "required_permissions": "costguard.providers.gcp.iam",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GcpProvider",
    "GcpSettings",
    "RetrySettings",
    "label_key",
    "label_value",
    "render_role",
    "required_permissions",
    "role_definition",
]
