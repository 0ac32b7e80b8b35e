"""A loopback fake of the AWS calls costguard's cycle makes, for an organisation's fleet
(bench/_org_fleet.py), where moto cannot hold 100,000 instances in 500 accounts in time.

Served: STS GetCallerIdentity and AssumeRole (query protocol); EC2 DescribeInstances,
DescribeInstanceStatus, DescribeInstanceTypes, DescribeSpotPriceHistory, DescribeVolumes,
DescribeRegions, StopInstances, CreateTags, DeleteTags (EC2 protocol); Auto Scaling
DescribeAutoScalingGroups (query); CloudWatch GetMetricData (JSON 1.0, the protocol botocore
picks for CloudWatch). Answers follow the shapes of AWS's API references (element names,
namespaces, error documents); tests/test_bench_org.py checks that boto3 reads the same
records from this fake as from moto for the same fleet, and that a costguard cycle does the
same things against both.

The account of a call is the one its access key was issued for: AssumeRole hands out
`ASIA<account>XXXX` keys, and any other key is the ambient account (AMBIENT_ACCOUNT, which
holds nothing). The region and service come from the signature's credential scope. Nothing
is verified: this is a bench, not a security boundary.

The HTTP server, its routing and error documents are in bench/_org_aws_http.py
(`python -m bench._org_aws_http PORT SPEC_JSON`).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from xml.sax.saxutils import escape

from bench._org_fleet import (
    TYPES,
    Fleet,
    FleetInstance,
    gpu_utilization,
    host_cpu,
    spot_price,
)

EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"
ASG_NS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
_STATE_CODE = {"pending": 0, "running": 16, "stopping": 64, "stopped": 80}
MAX_DATAPOINTS = 100_800  # GetMetricData's limit per call
LAUNCHED = "2026-10-01T08:00:00.000Z"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _members(params: dict[str, str], prefix: str) -> list[str]:
    """`Prefix.1`, `Prefix.2`, ... in order (the query protocol's lists)."""
    out = []
    n = 1
    while f"{prefix}.{n}" in params:
        out.append(params[f"{prefix}.{n}"])
        n += 1
    return out


class OrgAws:
    """The fleet's mutable state and the operations on it."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.lock = threading.Lock()
        self.state: dict[str, str] = {}  # instance id -> state, where changed
        self.tags: dict[str, dict[str, str]] = {}  # instance id -> tags, where changed
        self.calls: Counter[str] = Counter()

    # -- helpers ---------------------------------------------------------------------------

    def _state_of(self, inst: FleetInstance) -> str:
        return self.state.get(inst.instance_id, inst.state)

    def _tags_of(self, inst: FleetInstance) -> dict[str, str]:
        return self.tags.get(inst.instance_id) or inst.tag_map

    def _owned(self, account: str, region: str, ids: list[str]) -> list[FleetInstance]:
        found = []
        missing = []
        for i in ids:
            inst = self.fleet.by_id.get(i)
            if inst is None or inst.account != account or inst.region != region:
                missing.append(i)
            else:
                found.append(inst)
        if missing:
            raise ApiError(400, "InvalidInstanceID.NotFound",
                           f"The instance IDs '{', '.join(missing)}' do not exist")
        return found

    # -- EC2 -------------------------------------------------------------------------------

    def ec2(self, action: str, p: dict[str, str], account: str, region: str) -> str:
        handler = getattr(self, f"_ec2_{action}", None)
        if handler is None:
            raise ApiError(400, "InvalidAction", f"The action {action} is not valid")
        if p.get("DryRun") == "true":
            raise ApiError(412, "DryRunOperation",
                           "Request would have succeeded, but DryRun flag is set.")
        body: str = handler(p, account, region)
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{EC2_NS}">'
                f"<requestId>{uuid.uuid4()}</requestId>{body}</{action}Response>")

    def _record(self, inst: FleetInstance) -> str:
        state = self._state_of(inst)
        tags = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>"
                       for k, v in self._tags_of(inst).items())
        spot = ("<instanceLifecycle>spot</instanceLifecycle>"
                f"<spotInstanceRequestId>sir-{inst.index:08x}</spotInstanceRequestId>"
                if inst.spot else "")
        reason = ("<stateReason><code>Client.UserInitiatedShutdown</code><message>"
                  "Client.UserInitiatedShutdown: User initiated shutdown</message></stateReason>"
                  if state == "stopped" else "")
        ip = f"10.{inst.index >> 16 & 255}.{inst.index >> 8 & 255}.{inst.index & 255}"
        return (
            f"<item><instanceId>{inst.instance_id}</instanceId><imageId>ami-0abcdef1234567890"
            f"</imageId><instanceState><code>{_STATE_CODE[state]}</code><name>{state}</name>"
            f"</instanceState><privateDnsName>{inst.private_dns}</privateDnsName><dnsName/>"
            f"<reason/><keyName>ml-key</keyName><amiLaunchIndex>0</amiLaunchIndex>"
            f"<productCodes/><instanceType>{inst.itype}</instanceType><launchTime>{LAUNCHED}"
            f"</launchTime><placement><availabilityZone>{inst.zone}</availabilityZone>"
            f"<groupName/><tenancy>default</tenancy></placement><monitoring><state>disabled"
            f"</state></monitoring><subnetId>subnet-0a1b2c3d</subnetId><vpcId>vpc-0a1b2c3d"
            f"</vpcId><privateIpAddress>{ip}</privateIpAddress><sourceDestCheck>true"
            f"</sourceDestCheck><groupSet><item><groupId>sg-0a1b2c3d</groupId><groupName>"
            f"default</groupName></item></groupSet>{reason}<architecture>x86_64</architecture>"
            f"<rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/xvda</rootDeviceName>"
            f"<blockDeviceMapping><item><deviceName>/dev/xvda</deviceName><ebs><volumeId>"
            f"vol-{inst.index:017x}</volumeId><status>attached</status><attachTime>{LAUNCHED}"
            f"</attachTime><deleteOnTermination>true</deleteOnTermination></ebs></item>"
            f"</blockDeviceMapping>{spot}<virtualizationType>hvm</virtualizationType>"
            f"<clientToken/><tagSet>{tags}</tagSet><hypervisor>xen</hypervisor>"
            f"<networkInterfaceSet><item><networkInterfaceId>eni-{inst.index:017x}"
            f"</networkInterfaceId><subnetId>subnet-0a1b2c3d</subnetId><vpcId>vpc-0a1b2c3d"
            f"</vpcId><description/><ownerId>{inst.account}</ownerId><status>in-use</status>"
            f"<macAddress>02:00:00:00:00:00</macAddress><privateIpAddress>{ip}"
            f"</privateIpAddress><sourceDestCheck>true</sourceDestCheck><groupSet><item>"
            f"<groupId>sg-0a1b2c3d</groupId><groupName>default</groupName></item></groupSet>"
            f"<attachment><attachmentId>eni-attach-{inst.index:017x}</attachmentId>"
            f"<deviceIndex>0</deviceIndex><status>attached</status><attachTime>{LAUNCHED}"
            f"</attachTime><deleteOnTermination>true</deleteOnTermination></attachment>"
            f"<privateIpAddressesSet><item><privateIpAddress>{ip}</privateIpAddress><primary>"
            f"true</primary></item></privateIpAddressesSet><interfaceType>interface"
            f"</interfaceType></item></networkInterfaceSet><ebsOptimized>true</ebsOptimized>"
            f"<enaSupport>true</enaSupport><cpuOptions><coreCount>2</coreCount>"
            f"<threadsPerCore>2</threadsPerCore></cpuOptions><metadataOptions><state>applied"
            f"</state><httpTokens>required</httpTokens><httpPutResponseHopLimit>2"
            f"</httpPutResponseHopLimit><httpEndpoint>enabled</httpEndpoint></metadataOptions>"
            f"</item>")

    def _reservations(self, insts: list[FleetInstance]) -> str:
        return "".join(
            f"<item><reservationId>r-{inst.index:017x}</reservationId><ownerId>{inst.account}"
            f"</ownerId><groupSet/><instancesSet>{self._record(inst)}</instancesSet></item>"
            for inst in insts)

    def _ec2_DescribeInstances(self, p: dict[str, str], account: str, region: str) -> str:
        ids = _members(p, "InstanceId")
        if ids:
            with self.lock:
                return f"<reservationSet>{self._reservations(self._owned(account, region, ids))}" \
                       "</reservationSet>"
        members = self.fleet.by_scope.get((account, region), [])
        size = min(int(p.get("MaxResults", "1000")), 1000)
        start = int(p.get("NextToken", "0"))
        page = members[start:start + size]
        token = (f"<nextToken>{start + size}</nextToken>"
                 if start + size < len(members) else "")
        with self.lock:
            return f"<reservationSet>{self._reservations(page)}</reservationSet>{token}"

    def _ec2_DescribeInstanceStatus(self, p: dict[str, str], account: str, region: str) -> str:
        with self.lock:
            insts = self._owned(account, region, _members(p, "InstanceId"))
            items = []
            for inst in insts:
                state = self._state_of(inst)
                if state != "running" and p.get("IncludeAllInstances") != "true":
                    continue
                check = "ok" if state == "running" else "not-applicable"
                items.append(
                    f"<item><instanceId>{inst.instance_id}</instanceId><availabilityZone>"
                    f"{inst.zone}</availabilityZone><instanceState><code>{_STATE_CODE[state]}"
                    f"</code><name>{state}</name></instanceState><systemStatus><status>{check}"
                    f"</status></systemStatus><instanceStatus><status>{check}</status>"
                    f"</instanceStatus></item>")
        return f"<instanceStatusSet>{''.join(items)}</instanceStatusSet>"

    def _ec2_DescribeInstanceTypes(self, p: dict[str, str], account: str, region: str) -> str:
        wanted = _members(p, "InstanceType")
        unknown = [t for t in wanted if t not in TYPES]
        if unknown:
            raise ApiError(400, "InvalidInstanceType",
                           f"The following supplied instance types do not exist: "
                           f"[{', '.join(unknown)}]")
        items = []
        for itype in wanted:
            gpu = TYPES[itype]
            info = "" if gpu is None else (
                f"<gpuInfo><gpus><item><name>{gpu[0]}</name><manufacturer>{gpu[1]}"
                f"</manufacturer><count>{gpu[2]}</count><memoryInfo><sizeInMiB>{gpu[3]}"
                f"</sizeInMiB></memoryInfo></item></gpus><totalGpuMemoryInfo><sizeInMiB>"
                f"{gpu[2] * gpu[3]}</sizeInMiB></totalGpuMemoryInfo></gpuInfo>")
            items.append(f"<item><instanceType>{itype}</instanceType><currentGeneration>true"
                         f"</currentGeneration><vCpuInfo><defaultVCpus>4</defaultVCpus>"
                         f"</vCpuInfo><memoryInfo><sizeInMiB>16384</sizeInMiB></memoryInfo>"
                         f"{info}</item>")
        return f"<instanceTypeSet>{''.join(items)}</instanceTypeSet>"

    def _ec2_DescribeSpotPriceHistory(self, p: dict[str, str], account: str, region: str
                                      ) -> str:
        products = _members(p, "ProductDescription") or ["Linux/UNIX"]
        at = _iso(self.fleet.now - timedelta(minutes=37))
        items = [
            f"<item><instanceType>{itype}</instanceType><productDescription>{escape(product)}"
            f"</productDescription><spotPrice>{spot_price(itype, zone):.6f}</spotPrice>"
            f"<timestamp>{at}</timestamp><availabilityZone>{zone}</availabilityZone></item>"
            for itype in _members(p, "InstanceType")
            for zone in (f"{region}a", f"{region}b", f"{region}c")
            for product in products if product == "Linux/UNIX"]
        return f"<spotPriceHistorySet>{''.join(items)}</spotPriceHistorySet><nextToken/>"

    def _ec2_DescribeVolumes(self, p: dict[str, str], account: str, region: str) -> str:
        ids: list[str] = []
        n = 1
        while f"Filter.{n}.Name" in p:
            if p[f"Filter.{n}.Name"] == "attachment.instance-id":
                ids += _members(p, f"Filter.{n}.Value")
            n += 1
        insts = [self.fleet.by_id[i] for i in ids if i in self.fleet.by_id
                 and self.fleet.by_id[i].account == account]
        items = [
            f"<item><volumeId>vol-{inst.index:017x}</volumeId><size>{100 + inst.index % 400}"
            f"</size><snapshotId/><availabilityZone>{inst.zone}</availabilityZone><status>"
            f"in-use</status><createTime>{LAUNCHED}</createTime><attachmentSet><item><volumeId>"
            f"vol-{inst.index:017x}</volumeId><instanceId>{inst.instance_id}</instanceId>"
            f"<device>/dev/xvda</device><status>attached</status><attachTime>{LAUNCHED}"
            f"</attachTime><deleteOnTermination>true</deleteOnTermination></item>"
            f"</attachmentSet><volumeType>gp3</volumeType><iops>3000</iops><throughput>125"
            f"</throughput><encrypted>false</encrypted><multiAttachEnabled>false"
            f"</multiAttachEnabled></item>"
            for inst in insts]
        return f"<volumeSet>{''.join(items)}</volumeSet>"

    def _ec2_DescribeRegions(self, p: dict[str, str], account: str, region: str) -> str:
        items = "".join(f"<item><regionName>{r}</regionName><regionEndpoint>ec2.{r}."
                        f"amazonaws.com</regionEndpoint><optInStatus>opt-in-not-required"
                        f"</optInStatus></item>" for r in self.fleet.regions)
        return f"<regionInfo>{items}</regionInfo>"

    def _ec2_StopInstances(self, p: dict[str, str], account: str, region: str) -> str:
        items = []
        with self.lock:
            for inst in self._owned(account, region, _members(p, "InstanceId")):
                before = self._state_of(inst)
                after = "stopped" if before in ("stopped", "stopping") else "stopping"
                self.state[inst.instance_id] = "stopped"
                items.append(
                    f"<item><instanceId>{inst.instance_id}</instanceId><currentState><code>"
                    f"{_STATE_CODE[after]}</code><name>{after}</name></currentState>"
                    f"<previousState><code>{_STATE_CODE[before]}</code><name>{before}</name>"
                    f"</previousState></item>")
        return f"<instancesSet>{''.join(items)}</instancesSet>"

    def _retag(self, p: dict[str, str], account: str, region: str, delete: bool) -> str:
        ids = _members(p, "ResourceId")
        pairs = []
        n = 1
        while f"Tag.{n}.Key" in p:
            pairs.append((p[f"Tag.{n}.Key"], p.get(f"Tag.{n}.Value", "")))
            n += 1
        with self.lock:
            for inst in self._owned(account, region, ids):
                tags = dict(self._tags_of(inst))
                for key, value in pairs:
                    if delete:
                        tags.pop(key, None)
                    else:
                        tags[key] = value
                self.tags[inst.instance_id] = tags
        return "<return>true</return>"

    def _ec2_CreateTags(self, p: dict[str, str], account: str, region: str) -> str:
        return self._retag(p, account, region, delete=False)

    def _ec2_DeleteTags(self, p: dict[str, str], account: str, region: str) -> str:
        return self._retag(p, account, region, delete=True)

    # -- STS and Auto Scaling (query protocol) ---------------------------------------------

    def query(self, service: str, action: str, p: dict[str, str], account: str,
              region: str) -> str:
        if service == "sts" and action == "GetCallerIdentity":
            result = (f"<Arn>arn:aws:iam::{account}:user/bench</Arn><UserId>AIDABENCH"
                      f"</UserId><Account>{account}</Account>")
            ns = STS_NS
        elif service == "sts" and action == "AssumeRole":
            result, ns = self._assume_role(p), STS_NS
        elif service == "autoscaling" and action == "DescribeAutoScalingGroups":
            result, ns = self._groups(p, account, region), ASG_NS
        else:
            raise ApiError(400, "InvalidAction", f"{service} {action} is not served here")
        return (f'<{action}Response xmlns="{ns}"><{action}Result>{result}</{action}Result>'
                f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
                f"</{action}Response>")

    def _assume_role(self, p: dict[str, str]) -> str:
        m = re.match(r"^arn:aws:iam::(\d{12}):role/(.+)$", p.get("RoleArn", ""))
        if m is None or m.group(1) not in self.fleet.accounts:
            raise ApiError(403, "AccessDenied", f"not authorized to assume {p.get('RoleArn')}")
        account, role = m.groups()
        expires = _iso(datetime.now(UTC) + timedelta(seconds=int(p.get("DurationSeconds",
                                                                         "3600"))))
        session = escape(p.get("RoleSessionName", "session"))
        return (f"<Credentials><AccessKeyId>ASIA{account}BNCH</AccessKeyId><SecretAccessKey>"
                f"bench-secret</SecretAccessKey><SessionToken>bench-token-{account}"
                f"</SessionToken><Expiration>{expires}</Expiration></Credentials>"
                f"<AssumedRoleUser><AssumedRoleId>AROABENCH:{session}</AssumedRoleId><Arn>"
                f"arn:aws:sts::{account}:assumed-role/{escape(role)}/{session}</Arn>"
                f"</AssumedRoleUser>")

    def _groups(self, p: dict[str, str], account: str, region: str) -> str:
        names = _members(p, "AutoScalingGroupNames.member")
        members: dict[str, list[FleetInstance]] = {}
        for inst in self.fleet.by_scope.get((account, region), []):
            if inst.group is not None:
                members.setdefault(inst.group, []).append(inst)
        items = []
        for name in names:
            insts = members.get(name)
            if not insts:
                continue
            live = "".join(
                f"<member><InstanceId>{i.instance_id}</InstanceId><InstanceType>{i.itype}"
                f"</InstanceType><AvailabilityZone>{i.zone}</AvailabilityZone><LifecycleState>"
                f"InService</LifecycleState><HealthStatus>Healthy</HealthStatus>"
                f"<ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>" for i in insts)
            items.append(
                f"<member><AutoScalingGroupName>{name}</AutoScalingGroupName>"
                f"<AutoScalingGroupARN>arn:aws:autoscaling:{region}:{account}:"
                f"autoScalingGroup:{uuid.uuid5(uuid.NAMESPACE_URL, name)}:"
                f"autoScalingGroupName/{name}</AutoScalingGroupARN><MinSize>0</MinSize>"
                f"<MaxSize>{len(insts) * 2}</MaxSize><DesiredCapacity>{len(insts)}"
                f"</DesiredCapacity><DefaultCooldown>300</DefaultCooldown><AvailabilityZones>"
                f"<member>{region}a</member></AvailabilityZones><HealthCheckType>EC2"
                f"</HealthCheckType><HealthCheckGracePeriod>300</HealthCheckGracePeriod>"
                f"<CreatedTime>{LAUNCHED}</CreatedTime><Instances>{live}</Instances><Tags>"
                f"<member><ResourceId>{name}</ResourceId><ResourceType>auto-scaling-group"
                f"</ResourceType><Key>team</Key><Value>platform</Value><PropagateAtLaunch>true"
                f"</PropagateAtLaunch></member></Tags></member>")
        return f"<AutoScalingGroups>{''.join(items)}</AutoScalingGroups>"

    # -- CloudWatch (JSON 1.0) -------------------------------------------------------------

    def get_metric_data(self, request: dict[str, Any], account: str) -> dict[str, Any]:
        start = datetime.fromtimestamp(float(request["StartTime"]), UTC)
        end = datetime.fromtimestamp(float(request["EndTime"]), UTC)
        queries = request["MetricDataQueries"]
        if len(queries) > 500:
            raise ApiError(400, "ValidationError",
                           "The collection MetricDataQueries must not have a size greater "
                           "than 500.")
        first = int(request.get("NextToken") or 0)
        results: list[dict[str, Any]] = []
        points = 0
        token = None
        for n in range(first, len(queries)):
            query = queries[n]
            stat = query["MetricStat"]
            series = self._series(query["Id"], stat, start, end, account)
            if points + len(series["Timestamps"]) > MAX_DATAPOINTS and results:
                token = str(n)
                break
            points += len(series["Timestamps"])
            results.append(series)
        answer: dict[str, Any] = {"MetricDataResults": results, "Messages": []}
        if token:
            answer["NextToken"] = token
        return answer

    def _series(self, qid: str, stat: dict[str, Any], start: datetime, end: datetime,
                account: str) -> dict[str, Any]:
        metric = stat["Metric"]
        dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
        inst = self.fleet.by_id.get(dims.get("InstanceId", ""))
        period = int(stat["Period"])
        name = metric["MetricName"]
        stamps: list[float] = []
        values: list[float] = []
        if inst is not None and inst.account == account and len(dims) == 1:
            # as CloudWatch answers (and moto): StartTime rounded down to its minute, the
            # periods counted from there, each stamped at its start and holding the one
            # point the fleet has in it (its points fall on the clock's periods)
            t = int(start.timestamp()) // 60 * 60
            while t < end.timestamp():
                point = -(-t // period) * period
                at = datetime.fromtimestamp(point, UTC)
                if point >= end.timestamp():  # the last period's point is past the end
                    value = None
                elif name == "CPUUtilization" and metric["Namespace"] == "AWS/EC2":
                    value = host_cpu(inst, at, self.fleet.now)
                elif name == "nvidia_smi_utilization_gpu" and metric["Namespace"] == "CWAgent":
                    value = gpu_utilization(inst, at, self.fleet.now)
                    if value is not None and stat["Stat"] == "Maximum":
                        value = min(100.0, value * 1.1)
                else:
                    value = None
                if value is not None:
                    stamps.append(float(t))
                    values.append(value)
                t += period
        return {"Id": qid, "Label": name, "Timestamps": stamps, "Values": values,
                "StatusCode": "Complete"}

    # -- what changed ----------------------------------------------------------------------

    def changes(self) -> dict[str, Any]:
        with self.lock:
            return {"stopped": sorted(i for i, s in self.state.items()
                                      if s == "stopped" and self.fleet.by_id[i].state != s),
                    "tags": {i: t for i, t in sorted(self.tags.items())}}
