"""Google Cloud provider: Compute Engine inventory and actions, Cloud Monitoring GPU metrics.

Public surface: `GcpProvider`, `GcpSettings`, `required_permissions`, `label_key`.
Local fakes for tests and the demo live in `fake_server` (imported on demand only).
"""

from costguard.providers.gcp.actions import label_key, label_value
from costguard.providers.gcp.iam import render_role, required_permissions
from costguard.providers.gcp.provider import GcpProvider
from costguard.providers.gcp.settings import GcpSettings, RetrySettings

__all__ = [
    "GcpProvider",
    "GcpSettings",
    "RetrySettings",
    "label_key",
    "label_value",
    "render_role",
    "required_permissions",
]
