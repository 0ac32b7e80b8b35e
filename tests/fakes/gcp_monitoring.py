"""Cloud Monitoring gRPC fake: re-exported from costguard so the demo can start it too."""

from costguard.providers.gcp.fake_monitoring import FakeMonitoring, FakeSeries

__all__ = ["FakeMonitoring", "FakeSeries"]
