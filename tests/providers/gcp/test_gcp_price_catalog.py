"""GCP list prices from the Cloud Billing Catalog API: the real google-cloud-billing client
over HTTP against a loopback server that answers with recorded `services.skus.list` pages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from costguard.errors import ProviderError
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.catalog import machine_shapes
from costguard.providers.gcp.gpus import from_machine_type
from tests.fakes.loopback import serve

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "pricing"
TOKEN = json.loads((PAGES / "gcp_skus_list_page1.json").read_text())["nextPageToken"]


class FakeCatalog:
    """`GET /v1/services/{service}/skus`: page 1, then page 2 for its token (or an error)."""

    def __init__(self) -> None:
        self.asked: list[dict[str, str]] = []
        self.fail_with: int | None = None

    async def skus(self, request: Request) -> JSONResponse:
        self.asked.append({"path": request.url.path, **request.query_params})
        if self.fail_with is not None:
            return JSONResponse({"error": {"code": self.fail_with, "message": "nope",
                                           "status": "PERMISSION_DENIED"}}, self.fail_with)
        if request.url.path != "/v1/services/6F81-5844-456A/skus":
            return JSONResponse({"error": {"code": 404, "message": "no such service",
                                           "status": "NOT_FOUND"}}, 404)
        page = 2 if request.query_params.get("pageToken") == TOKEN else 1
        return JSONResponse(json.loads((PAGES / f"gcp_skus_list_page{page}.json").read_text()))


@pytest.fixture
def catalog() -> Iterator[tuple[FakeCatalog, str]]:
    fake = FakeCatalog()
    app = Starlette(routes=[Route("/v1/services/{service}/skus", fake.skus)])
    with serve(app) as url:
        yield fake, url


def test_a2_prices_are_summed_from_the_recorded_core_ram_and_gpu_skus(
    catalog: tuple[FakeCatalog, str], make_provider: Callable[..., GcpProvider],
) -> None:
    fake, url = catalog
    provider = make_provider(billing_endpoint=url)

    fetched = provider.fetch_list_prices(["us-central1", "us-east1", "europe-west4"],
                                         ["a2-highgpu-1g", "a2-highgpu-2g", "n1-standard-8"])

    # on-demand from the recorded page: 12 x 0.031611 + 85 x 0.004237 + 2.933908
    for region in ("us-central1", "us-east1"):
        assert fetched.prices[(region, "a2-highgpu-1g", "on-demand")] == 3.673385
        assert fetched.prices[(region, "a2-highgpu-2g", "on-demand")] == 7.34677
        # spot from page 2's Preemptible SKUs: 12 x 0.009483 + 85 x 0.001271 + 0.880172
        assert fetched.prices[(region, "a2-highgpu-1g", "spot")] == 1.102003
    # europe-west4 has an A2 core SKU only (no Ram, no GPU): not half-priced; N1 + attached
    # GPUs are not a per-type price; the commitment and workstation SKUs changed nothing
    assert {r for r, _, _ in fetched.prices} == {"us-central1", "us-east1"}
    assert {t for _, t, _ in fetched.prices} == {"a2-highgpu-1g", "a2-highgpu-2g"}
    assert fetched.source == "gcp cloud billing catalog"
    assert fetched.published == datetime(2026, 10, 1, 7, 0, tzinfo=UTC)
    assert [a.get("pageToken") for a in fake.asked] == [None, TOKEN]
    assert all(a["currencyCode"] == "USD" for a in fake.asked)


def test_a_refused_catalog_read_is_a_provider_error_that_says_what_to_do(
    catalog: tuple[FakeCatalog, str], make_provider: Callable[..., GcpProvider],
) -> None:
    fake, url = catalog
    fake.fail_with = 403
    provider = make_provider(billing_endpoint=url)

    with pytest.raises(ProviderError, match="permission denied"):
        provider.fetch_list_prices(["us-central1"], ["a2-highgpu-1g"])


def test_every_shipped_machine_shape_agrees_with_the_gpu_catalog() -> None:
    # two tables describe the same machine types: the GPUs they build in must agree
    for name, shape in machine_shapes().items():
        attached = from_machine_type(name)
        assert attached is not None, name
        assert (attached.accelerator, attached.count) == (shape.accelerator, shape.gpus), name
        assert attached.spec is not None and attached.spec.memory_mib > 0, name


# Accelerator-optimized machine types the shipped table does not price (no list price was
# transcribed for them): priced by `costguard prices refresh` from the Cloud Billing Catalog
# (their shapes are in machine_types.json), never guessed. A type added to the shape table
# must be priced or named here.
UNPRICED_MACHINE_TYPES = {
    "a3-edgegpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g", "a4x-highgpu-4g",
    "g4-standard-48", "g4-standard-96", "g4-standard-192", "g4-standard-384",
}


def test_every_machine_type_is_priced_or_named_unpriced() -> None:
    from costguard.providers.gcp.pricing import load_table

    priced = set(load_table()["regions"]["us-central1"]["machine_types"])
    assert set(machine_shapes()) - priced == UNPRICED_MACHINE_TYPES
