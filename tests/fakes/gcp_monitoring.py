"""Cloud Monitoring gRPC fake: re-exported from costguard so the demo can start it too."""

from costguard.demo.gcp_fake.monitoring import FakeMonitoring, FakeSeries

__all__ = ["FakeMonitoring", "FakeSeries"]
