"""Local fakes of the GCP APIs costguard calls, for tests and the demo. Never production.

- `FakeCompute`: Compute Engine REST (instances, zone operations, Resource Manager v3
  project listing) on http://127.0.0.1:PORT, driven by the real google-cloud-compute client.
- `FakeMonitoring`: Cloud Monitoring `ListTimeSeries` over plaintext gRPC on 127.0.0.1.
- `FakeGcp`: both at once, plus `settings()` that points a `GcpSettings` at them.

    with FakeGcp() as fake:
        fake.compute.add_instance("ml-prod", "us-central1-a", "trainer-1", "a2-highgpu-1g")
        provider = GcpProvider(fake.settings(projects=["ml-prod"]))
        provider.list_instances()
"""

from __future__ import annotations

from typing import Any

from costguard.demo.gcp_fake.compute import FakeCompute, FakeVm
from costguard.demo.gcp_fake.monitoring import FakeMonitoring, FakeSeries
from costguard.providers.gcp.settings import GcpSettings, RetrySettings

__all__ = ["FakeCompute", "FakeGcp", "FakeMonitoring", "FakeSeries", "FakeVm"]

# Fast back-off so injected 429/503 cost milliseconds, not seconds.
FAST_RETRY = RetrySettings(initial_s=0.01, maximum_s=0.05, multiplier=2.0, deadline_s=10.0)


class FakeGcp:
    """Starts both fakes; `settings()` gives a GcpSettings wired to them (anonymous)."""

    def __init__(self, *, operation_delay_s: float = 0.0) -> None:
        self.compute = FakeCompute(operation_delay_s=operation_delay_s)
        self.monitoring = FakeMonitoring()

    def start(self) -> FakeGcp:
        self.compute.start()
        self.monitoring.start()
        return self

    def stop(self) -> None:
        self.compute.stop()
        self.monitoring.stop()

    def __enter__(self) -> FakeGcp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def settings(self, **overrides: Any) -> GcpSettings:
        values: dict[str, Any] = {
            "compute_endpoint": self.compute.url,
            "monitoring_endpoint": self.monitoring.endpoint,
            "resource_manager_endpoint": self.compute.url,
            "tpu_endpoint": self.compute.url,
            "workbench_endpoint": self.compute.url,
            "anonymous": True,
            "retry": FAST_RETRY,
        }
        values.update(overrides)
        return GcpSettings(**values)
