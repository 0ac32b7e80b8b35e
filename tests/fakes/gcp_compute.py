"""Compute Engine REST fake: re-exported from costguard so the demo can start it too."""

from costguard.demo.gcp_fake.compute import FakeCompute, FakeOperation, FakeVm

__all__ = ["FakeCompute", "FakeOperation", "FakeVm"]
