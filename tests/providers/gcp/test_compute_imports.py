"""costguard's GCP modules load seven of the Compute API's service clients, not its hundred,
and `google.cloud.compute_v1` stays whole for any other code: each check in a fresh
interpreter, since what is imported is the point."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _run(code: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_a_gcp_provider_loads_only_the_clients_it_uses() -> None:
    got = _run("""
        import json, sys
        import costguard.providers.gcp.provider
        services = sorted({m.split(".")[4] for m in sys.modules
                           if m.startswith("google.cloud.compute_v1.services.")})
        print(json.dumps({"services": services}))
    """)
    # the seven costguard uses, and the operations client the regional ones poll with
    assert got["services"] == ["autoscalers", "disks", "instance_group_managers", "instances",
                               "region_autoscalers", "region_instance_group_managers",
                               "region_operations", "zone_operations"]


def test_the_package_is_whole_for_code_that_asks_for_anything_else() -> None:
    got = _run("""
        import json
        from costguard.providers.gcp import compute
        from google.cloud import compute_v1
        other = compute_v1.AcceleratorTypesClient.__name__  # runs the real __init__
        import google.cloud.compute_v1.services.accelerator_types as at
        print(json.dumps({
            "other": other, "same": compute_v1.InstancesClient is compute.InstancesClient,
            "types": compute_v1.Instance is compute.Instance,
            "missing": hasattr(compute_v1, "NoSuchName"),
            "version": isinstance(compute_v1.__version__, str),
            "module": at.AcceleratorTypesClient is compute_v1.AcceleratorTypesClient,
        }))
    """)
    assert got == {"other": "AcceleratorTypesClient", "same": True, "types": True,
                   "missing": False, "version": True, "module": True}


def test_a_package_imported_before_costguard_is_used_as_it_is() -> None:
    got = _run("""
        import json, sys
        import google.cloud.compute_v1 as whole
        from costguard.providers.gcp import compute
        print(json.dumps({"same": compute.compute_v1 is whole,
                          "clients": compute.DisksClient is whole.DisksClient,
                          "loaded": "google.cloud.compute_v1.services.accelerator_types"
                                    in sys.modules}))
    """)
    assert got == {"same": True, "clients": True, "loaded": True}
