"""Compute Engine reservations: zonal capacity a project pays for by the hour, as for VMs
of the reserved shape, whether VMs run in it or not (costguard/standing/, `resource:
reservation`).

One project is read with `reservations.aggregatedList` (every zone, paged). Only `READY`
reservations bill. `specificReservation.count` is the capacity and `inUseCount` what VMs use;
the reserved shape is `instanceProperties.machineType` with its `guestAccelerators` (or the
GPUs built into an accelerator-optimized type: a2, a3, g2 ...). A reservation of
`aggregateReservation` (TPU capacity, counted in chips) or made from an instance template
without its properties is left out and logged: costguard cannot say what it holds.

An unused slot bills at the shape's on-demand rate (costguard's GCP table, as a VM of that
shape is priced; a committed-use discount, where `commitment` names one, lowers it: said in
the price source). Reservations carry no labels: a team comes from attribution rules on the
project, if any.

Twins (VMs that could run in a reservation's free capacity): one `instances.aggregatedList`
of the project's running VMs, only when a reservation has capacity free. A twin runs the
reserved machine type in the reservation's zone on the standard (on-demand) model and
cannot be in a reservation: its `reservationAffinity` says `NO_RESERVATION`, or says
`ANY_RESERVATION` while the reservation needs VMs to name it (`specificReservationRequired`)
and no open reservation of that shape exists in the zone. A VM that names a specific
reservation runs in that one.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials

from costguard.errors import ProviderError
from costguard.model import HOURS_PER_MONTH, Instance, InstanceState
from costguard.providers.gcp import gpus, pricing
from costguard.providers.gcp.errors import explain
from costguard.providers.gcp.inventory import parse_timestamp, region_of
from costguard.providers.gcp.standing_calls import listed, parsed
from costguard.standing.model import Reserved, Standing, StandingKind, StandingList

log = logging.getLogger(__name__)

BILLING = frozenset({"READY"})
_Shape = tuple[str, str]  # (zone, machine type)


def client(credentials: gcredentials.Credentials | None, endpoint: str | None) -> Any:
    """A ReservationsClient with the instances client's credentials and endpoint (imported
    here: a cycle that governs no reservation never loads it)."""
    from google.cloud.compute_v1.services.reservations import ReservationsClient

    options = ClientOptions(api_endpoint=endpoint) if endpoint else ClientOptions()
    return ReservationsClient(credentials=credentials, client_options=options)


def _shape_price(project: str, zone: str, machine_type: str,
                 attached: list[tuple[str, int]], at: datetime) -> tuple[float, str] | None:
    """The on-demand $/h of one VM of the reserved shape (priced as a VM of it is)."""
    gpu = gpus.detect(machine_type, attached)
    probe = Instance(
        provider="gcp", account=project, region=region_of(zone), zone=zone,
        instance_id="reservation-shape", instance_type=machine_type,
        state=InstanceState.RUNNING, gpu_count=gpu.count if gpu else 0,
        gpu_model=(gpu.spec.model if gpu.spec else gpu.accelerator) if gpu else None,
        gpu_memory_mib=gpu.spec.memory_mib if gpu and gpu.spec else None,
        launch_time=at, observed_at=at)
    quote = pricing.price(probe)
    return None if quote is None else (quote.usd_per_hour, quote.source)


def to_reservation(project: str, raw: Any, twins: dict[_Shape, list[str]],
                   observed_at: datetime) -> Standing:
    """One reservation (the raw protobuf) as a `Standing`; a reservation whose shape is not
    given raises ValueError (the caller leaves it out)."""
    specific = raw.specific_reservation
    props = specific.instance_properties
    machine_type = gpus.short_name(props.machine_type)
    if not raw.HasField("specific_reservation") or not machine_type:
        raise ValueError("no specificReservation.instanceProperties.machineType")
    zone = gpus.short_name(raw.zone)
    attached = [(gpus.short_name(a.accelerator_type), int(a.accelerator_count))
                for a in props.guest_accelerators]
    gpu = gpus.detect(machine_type, attached)
    total, used = int(specific.count), int(specific.in_use_count)
    quoted = _shape_price(project, zone, machine_type, attached, observed_at)
    committed = bool(raw.commitment)
    source = (f"no on-demand price for {machine_type} in {region_of(zone)}" if quoted is None
              else quoted[1] + ("; a commitment discounts it" if committed else ""))
    free = max(total - used, 0)
    reserved = Reserved(
        instance_type=machine_type, capacity=total, used=min(used, total),
        accelerators=gpu.count if gpu else 0,
        accelerator=(gpu.spec.model if gpu.spec else gpu.accelerator) if gpu else None,
        unit_usd_per_hour=None if quoted is None else quoted[0],
        ends_at=parse_timestamp(raw.delete_at_time, observed_at) if raw.delete_at_time
        else None,
        match="targeted" if raw.specific_reservation_required else "open",
        twins=tuple(twins.get((zone, machine_type), ())) if free else ())
    usd = reserved.unused_usd_per_hour
    return Standing(
        kind=StandingKind.RESERVATION, provider="gcp", account=project,
        region=region_of(zone), zone=zone, resource_id=str(raw.id), name=raw.name,
        state=str(raw.status), in_use=free == 0, detail=reserved.words(),
        created_at=parse_timestamp(raw.creation_timestamp, observed_at),
        usd_per_month=None if usd is None else usd * HOURS_PER_MONTH,
        price_source=source[:128], observed_at=observed_at, reservation=reserved)


def _twins(instances: Any, project: str, wanted: list[Any], retry: gretry.Retry
           ) -> dict[_Shape, list[str]]:
    """(zone, machine type) -> the running standard VMs that could use the free capacity
    of `wanted` (see the module's words)."""
    from costguard.providers.gcp.compute import compute_v1

    open_shapes = {(gpus.short_name(r.zone),
                    gpus.short_name(r.specific_reservation.instance_properties.machine_type))
                   for r in wanted if not r.specific_reservation_required}
    shapes = {(gpus.short_name(r.zone),
               gpus.short_name(r.specific_reservation.instance_properties.machine_type))
              for r in wanted}
    out: dict[_Shape, list[str]] = {}
    request = compute_v1.AggregatedListInstancesRequest(project=project,
                                                        filter="status eq RUNNING")
    for page in instances.aggregated_list(request=request, retry=retry).pages:
        for scoped in page.items.values():
            for vm in scoped.instances:
                raw = compute_v1.Instance.pb(vm)
                shape = (gpus.short_name(raw.zone), gpus.short_name(raw.machine_type))
                if shape not in shapes or raw.status != "RUNNING":
                    continue
                if raw.scheduling.provisioning_model not in ("", "STANDARD") \
                        or raw.scheduling.preemptible:
                    continue  # spot, or bound to a calendar reservation
                kind = raw.reservation_affinity.consume_reservation_type
                outside = kind == "NO_RESERVATION" or (
                    kind in ("", "ANY_RESERVATION") and shape not in open_shapes)
                if outside:
                    out.setdefault(shape, []).append(raw.name)
    return out


def list_project(reservations: Any, instances: Any, project: str, *, retry: gretry.Retry,
                 observed_at: datetime) -> StandingList:
    """Every billing reservation of one project; a failure is a gap for the project."""
    def read() -> StandingList:
        raws = [type(r).pb(r) for page in reservations.aggregated_list(
            project=project, retry=retry).pages for scoped in page.items.values()
            for r in scoped.reservations]
        raws = [r for r in raws if r.status in BILLING]
        free = [r for r in raws if int(r.specific_reservation.count)
                > int(r.specific_reservation.in_use_count)]
        twins = _twins(instances, project, raws, retry) if free else {}
        return StandingList(items=parsed(project, "reservation", raws, lambda raw:
                                         to_reservation(project, raw, twins, observed_at)))

    return listed(project, read)


def describe(reservations: Any, instances: Any, item: Standing, *, retry: gretry.Retry,
             observed_at: datetime) -> Standing | None:
    """`item` as Compute Engine shows it now (None: gone, or no longer billing)."""
    zone, name = item.zone or "", item.name or ""
    try:
        found = reservations.get(project=item.account, zone=zone, reservation=name,
                                 retry=retry)
        raw = type(found).pb(found)
        if raw.status not in BILLING:
            return None
        twins = _twins(instances, item.account, [raw], retry)
    except gexc.NotFound:
        return None
    except gexc.GoogleAPICallError as exc:
        raise ProviderError("gcp", item.resource_id, explain(exc, item.account)) from exc
    return to_reservation(item.account, raw, twins, observed_at)
