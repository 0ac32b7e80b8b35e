"""DescribeInstances, read for the fields costguard uses.

botocore turns every element of an instance's record (block devices, network interfaces,
security groups, metadata options: well over a hundred nodes) into dicts through its generic
shape walk. That walk was the largest client cost of reading a fleet: about 0.3 ms an
instance, some 3 s of CPU for 4,000 instances and the re-check before acting on a quarter of
them. costguard reads eleven fields of a record (`FIELDS`).

`read_describe_instances` is registered on costguard's EC2 clients for botocore's
`before-parse.ec2.DescribeInstances` event, and reads a call made inside `lean_records()`
(the inventory, the batched re-check before acting, the CloudWatch host-name lookup); any
other DescribeInstances (stop, start and terminate of one instance, which read block devices)
gets botocore's whole record. On a 200 answer it parses the body with lxml
(libxml2 builds the tree in C, without the GIL; a Python object is made only for the
elements walked: half the cost of ElementTree, which makes one for every node), builds each
record with those fields, typed as botocore types them, and hands the result to botocore as
the customized response; botocore then parses only a shell that carries the request id.
The parser resolves no entities and fetches nothing. Errors, and a body lxml cannot read,
are left to botocore, which parses and raises them as before.
tests/providers/aws/test_instance_xml.py checks that every field equals botocore's own parse
of the same answer.

A field those callers start to read must be added here, or it is absent from their records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from lxml import etree

from costguard.providers.aws.timestamps import fast_timestamp

EVENT = "before-parse.ec2.DescribeInstances"
_LEAN: ContextVar[bool] = ContextVar("costguard_lean_instance_records", default=False)

# XML name -> the name botocore gives it
_TEXT = {
    "instanceId": "InstanceId",
    "instanceType": "InstanceType",
    "instanceLifecycle": "InstanceLifecycle",
    "spotInstanceRequestId": "SpotInstanceRequestId",
    "privateDnsName": "PrivateDnsName",
}
_Members = dict[str, tuple[str, Callable[[str], Any]]]
_STRUCTS: dict[str, tuple[str, _Members]] = {
    "instanceState": ("State", {"code": ("Code", int), "name": ("Name", str)}),
    "stateReason": ("StateReason", {"code": ("Code", str), "message": ("Message", str)}),
    "placement": ("Placement", {"availabilityZone": ("AvailabilityZone", str)}),
    "iamInstanceProfile": ("IamInstanceProfile", {"arn": ("Arn", str), "id": ("Id", str)}),
}
_TAG = {"key": "Key", "value": "Value"}
_RESERVATION = {"reservationId": "ReservationId", "ownerId": "OwnerId"}

FIELDS = frozenset({*_TEXT.values(), *(s[0] for s in _STRUCTS.values()), "Tags", "LaunchTime"})


def _local(tag: str) -> str:
    """The element's name without its namespace (EC2 answers in a default namespace)."""
    return tag.rpartition("}")[2]


def _parser() -> etree.XMLParser:
    """A parser for one answer (lxml parsers are not shared between threads)."""
    return etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=True,
                           remove_pis=True)


def _text(node: etree._Element) -> str:
    return node.text or ""  # botocore reads an empty element as ""


def _struct(node: etree._Element, members: _Members) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for child in node:
        member = members.get(_local(child.tag))
        if member is not None:
            out[member[0]] = member[1](_text(child))
    return out


def _tags(node: etree._Element) -> list[dict[str, str]]:
    return [{_TAG[k]: _text(c) for c in item if (k := _local(c.tag)) in _TAG} for item in node]


def instance_record(item: etree._Element) -> dict[str, Any]:
    """One `instancesSet/item` as botocore would parse it, restricted to `FIELDS`."""
    out: dict[str, Any] = {}
    for child in item:
        name = _local(child.tag)
        if (key := _TEXT.get(name)) is not None:
            out[key] = _text(child)
        elif (spec := _STRUCTS.get(name)) is not None:
            out[spec[0]] = _struct(child, spec[1])
        elif name == "tagSet":
            out["Tags"] = _tags(child)
        elif name == "launchTime":
            out["LaunchTime"] = fast_timestamp(_text(child))
    return out


def _reservation(item: etree._Element) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for child in item:
        name = _local(child.tag)
        if (key := _RESERVATION.get(name)) is not None:
            out[key] = _text(child)
        elif name == "instancesSet":
            out["Instances"] = [instance_record(i) for i in child]
    return out


def _shell(root: etree._Element) -> bytes:
    """What botocore still parses: the response element with its request id only."""
    shell = etree.Element(_local(root.tag))
    for child in root:
        if _local(child.tag) == "requestId":
            etree.SubElement(shell, "requestId").text = child.text
    out: bytes = etree.tostring(shell)
    return out


@contextmanager
def lean_records() -> Iterator[None]:
    """DescribeInstances calls made inside (in this thread or task) get `FIELDS` only."""
    token = _LEAN.set(True)
    try:
        yield
    finally:
        _LEAN.reset(token)


def read_describe_instances(response_dict: dict[str, Any],
                            customized_response_dict: dict[str, Any], **_: Any) -> None:
    """botocore `before-parse` handler for DescribeInstances (see the module's doc)."""
    if not _LEAN.get() or response_dict.get("status_code") != 200:
        return
    try:
        root = etree.fromstring(response_dict["body"], _parser())
    except (etree.XMLSyntaxError, ValueError, TypeError):
        return  # botocore's own parser reports it
    reservations: list[dict[str, Any]] = []
    for child in root:
        name = _local(child.tag)
        if name == "reservationSet":
            reservations = [_reservation(item) for item in child]
        elif name == "nextToken":
            customized_response_dict["NextToken"] = _text(child)
    customized_response_dict["Reservations"] = reservations
    response_dict["body"] = _shell(root)
