"""Google Cloud provider: Compute Engine inventory and actions, Cloud Monitoring GPU metrics.

Public surface: `GcpProvider`, `GcpSettings`, `required_permissions`, `label_key`.
Local fakes for tests and the demo live in `fake_server` (imported on demand only).
"""

from costguard.providers.gcp.settings import GcpSettings, RetrySettings
from costguard.providers.lazy import lazy_attributes

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

__getattr__ = lazy_attributes(__name__, _LAZY)


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
