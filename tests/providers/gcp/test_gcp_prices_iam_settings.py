"""Price table, IAM role files, and settings validation."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from costguard.model import Instance, InstanceState, Lifecycle
from costguard.providers.gcp import GcpSettings, required_permissions
from costguard.providers.gcp.iam import ROLE_FILES, render_role
from costguard.providers.gcp.pricing import load_table, price, shape_of

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 11, 23, tzinfo=UTC)


def _vm(machine_type: str, region: str = "us-central1", **kw: Any) -> Instance:
    return Instance(
        provider="gcp",
        account="p",
        region=region,
        zone=f"{region}-a",
        instance_id="1",
        instance_type=machine_type,
        state=InstanceState.RUNNING,
        launch_time=T0,
        observed_at=T0,
        **kw,
    )


def test_price_table_covers_required_gpus_families_and_regions() -> None:
    table = load_table()
    assert table["as_of"] and "cloud.google.com" in table["source"]
    for region in ("us-central1", "us-east1", "europe-west4", "asia-southeast1"):
        entry = table["regions"][region]
        for gpu in (
            "nvidia-tesla-t4",
            "nvidia-l4",
            "nvidia-tesla-a100",
            "nvidia-a100-80gb",
            "nvidia-h100-80gb",
            "nvidia-tesla-v100",
        ):
            assert 0 < entry["gpus"][gpu]["spot"] < entry["gpus"][gpu]["on_demand"]
        assert {"n1", "n2"} <= set(entry["families"])
        for machine in ("a2-highgpu-1g", "a2-ultragpu-8g", "a3-highgpu-8g", "g2-standard-4"):
            assert (
                0
                < entry["machine_types"][machine]["spot"]
                < entry["machine_types"][machine]["on_demand"]
            )


def test_accelerator_optimized_machines_are_priced_whole_and_spot_is_cheaper() -> None:
    table = load_table()["regions"]["us-central1"]["machine_types"]["a2-highgpu-1g"]
    on_demand = price(_vm("a2-highgpu-1g", gpu_count=1, gpu_model="A100", gpu_memory_mib=40960))
    spot = price(_vm("a2-highgpu-1g", lifecycle=Lifecycle.SPOT, gpu_count=1, gpu_model="A100"))
    assert on_demand is not None and spot is not None
    assert on_demand.usd_per_hour == table["on_demand"]  # GPUs not added on top
    assert spot.usd_per_hour == table["spot"]
    assert "spot" in spot.source and "us-central1" in spot.source


def test_n1_with_attached_gpus_is_vcpu_plus_memory_plus_gpus() -> None:
    r = load_table()["regions"]["europe-west4"]
    quote = price(
        _vm("n1-standard-8", "europe-west4", gpu_count=2, gpu_model="T4", gpu_memory_mib=16384)
    )
    expected = (
        8 * r["families"]["n1"]["vcpu"]["on_demand"]
        + 30 * r["families"]["n1"]["ram_gib"]["on_demand"]
        + 2 * r["gpus"]["nvidia-tesla-t4"]["on_demand"]
    )
    assert quote is not None and quote.usd_per_hour == pytest.approx(expected)


def test_custom_shapes_are_parsed_and_unknown_things_are_not_guessed() -> None:
    assert shape_of("n2-custom-8-32768") is not None
    assert shape_of("custom-4-15360-ext") is not None
    assert price(_vm("n1-standard-4", "mars-north1")) is None
    assert price(_vm("e2-medium")) is None
    assert price(_vm("n1-standard-4", gpu_count=1, gpu_model="Z9000")) is None


def test_permissions_grow_when_enforcing() -> None:
    read = required_permissions(False, tpus=False)
    act = required_permissions(True, tpus=False)
    assert read == ["compute.autoscalers.list", "compute.disks.get", "compute.disks.list",
                    "compute.instanceGroupManagers.list", "compute.instances.get",
                    "compute.instances.list", "monitoring.timeSeries.list"]
    assert set(act) - set(read) == {
        "compute.instances.stop",
        "compute.instances.start",
        "compute.instances.setLabels",
        "compute.zoneOperations.get",
    }
    # a scale_in step adds only what deleteInstances and its re-read need
    assert set(required_permissions(True, scaling_in=True, tpus=False)) - set(act) == {
        "compute.instanceGroupManagers.get", "compute.autoscalers.get",
        "compute.instanceGroupManagers.update"}
    assert required_permissions(False, scaling_in=True, tpus=False) == read
    # Cloud TPU nodes (listed unless providers.gcp.tpus is false): read, then stop/start/label
    assert set(required_permissions(False)) - set(read) == {"tpu.nodes.list", "tpu.nodes.get"}
    assert set(required_permissions(True)) - set(act) == {
        "tpu.nodes.list", "tpu.nodes.get", "tpu.nodes.stop", "tpu.nodes.start",
        "tpu.nodes.update", "tpu.operations.get"}


@pytest.mark.parametrize("path", sorted(ROLE_FILES))
def test_shipped_role_files_match_the_code(path: str) -> None:
    shipped = (REPO / path).read_text(encoding="utf-8")
    assert shipped == render_role(**ROLE_FILES[path]), (
        f"{path} is stale: regenerate it from costguard.providers.gcp.iam.render_role"
    )
    role = yaml.safe_load(shipped)
    assert set(required_permissions(ROLE_FILES[path]["enforcing"])) <= set(
        role["includedPermissions"]
    )


def test_settings_reject_typos_and_explain_how_to_fix() -> None:
    with pytest.raises(ValidationError, match="extra"):
        GcpSettings(projects=["ml-prod"], projcts=["x"])  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="not a GCP project id"):
        GcpSettings(projects=["My Project"])
    with pytest.raises(ValidationError, match="needs `projects"):
        GcpSettings()
    with pytest.raises(ValidationError, match="folders/NUMBER"):
        GcpSettings(folder="engineering")
    assert GcpSettings(folder="123").parents == ["folders/123"]
