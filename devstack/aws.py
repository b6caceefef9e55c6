"""A local AWS (moto in server mode) and a seeded cluster network to reconcile against.

The server speaks the real AWS HTTP protocols, so boto3 and our drivers run unchanged, pointed at it through
`endpoint_url` (or the AWS_ENDPOINT_URL environment variable, which boto3 honours for every service).
`seed_world` builds what an EKS-style cluster network looks like to cloud-provider-aws: a tagged VPC, public
subnets (routed to an internet gateway) and private subnets in several AZs, a node security group and running
instances; `World.node_objects()` gives the matching Kubernetes Node objects.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from ccm.contracts.provider_id import provider_id_for
from devstack import aws_faithful
from devstack.aws_faithful import FaithfulSettings
from devstack.queues import harden_moto_sqs
from devstack.sqs_sender import faithful_moto_sqs_sender

# moto accepts any string; fixed dummy credentials keep boto3 from looking for real ones.
DUMMY_CREDENTIALS: dict[str, Any] = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
VPC_CIDR = "10.0.0.0/16"
INSTANCE_TYPE = "t3.medium"
# One of moto's built-in AMIs (the image is irrelevant to a CCM); listing moto's AMIs would cost ~2 s.
NODE_IMAGE_ID = "ami-12c6146b"


def start_moto_server(port: int = 0, faithful: FaithfulSettings | None = None) -> tuple[ThreadedMotoServer, str]:
    """Start moto on 127.0.0.1 (port 0 = any free port); returns the server (call .stop()) and its URL.
    `faithful`: how closely moto answers as AWS does (devstack.aws_faithful; default: all its defaults)."""
    # werkzeug logs every request at INFO on stderr; pollers make that thousands of lines.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # Our pollers receive/delete concurrently; moto's SQS needs fixes to keep FIFO guarantees then.
    harden_moto_sqs()
    faithful_moto_sqs_sender()  # SenderId = the signing principal, as SQS reports it
    faithful_moto_route_state()
    faithful_moto_nlb_listeners()
    aws_faithful.install(faithful)
    serialize_moto_backends()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    endpoint = f"http://{host}:{bound}"
    # moto keeps its backends per process, shared by every server it runs: start each world empty, or a second
    # stack in the same process (the next test module) would see the previous one's instances and tables.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    return server, endpoint


_moto_backends_lock = threading.RLock()


def serialize_moto_backends() -> None:
    """One request at a time per process into moto's backends, except SQS. Its backends are plain dicts, not
    thread-safe: concurrent ELB requests (the parallel records of one batch) made it answer HTTP 500 ("OrderedDict
    mutated during iteration"), which AWS never does for that. SQS is left out because a long poll waits inside
    its request (its own fixes: harden_moto_sqs). Throttling and injected latency are unaffected: the first answers
    before the backend is touched, the second is slept on the client side. Idempotent."""
    from moto.core.responses import BaseResponse

    if getattr(BaseResponse, "_ccm_serialized", False):
        return
    call_action = BaseResponse.call_action

    def serialized_call_action(self: Any) -> Any:
        if (getattr(self, "service_name", None) or "") == "sqs":
            return call_action(self)
        with _moto_backends_lock:
            return call_action(self)

    BaseResponse.call_action = serialized_call_action  # type: ignore[method-assign]
    BaseResponse._ccm_serialized = True  # type: ignore[attr-defined]


def faithful_moto_nlb_listeners() -> None:
    """moto 5.2's ModifyListener refuses every protocol but HTTP/HTTPS/TCP ("UnsupportedProtocol: Protocol UDP is
    not supported"); AWS accepts UDP and TCP_UDP on NLB listeners. The chaos test found it: a UDP listener switched
    to a new target group (nodePorts change when a Service goes ClusterIP and back) failed until the DLQ. Patches
    moto's server-side model, never boto3. Idempotent."""
    from moto.elbv2.models import ELBv2Backend

    if getattr(ELBv2Backend, "_ccm_nlb_protocols", False):
        return
    original = ELBv2Backend.modify_listener

    def modify_listener(self: Any, arn: str, port: Any = None, protocol: Any = None, *args: Any, **kwargs: Any) -> Any:
        udp = protocol in ("UDP", "TCP_UDP")
        listener = original(self, arn, port, None if udp else protocol, *args, **kwargs)
        if udp:
            listener.protocol = protocol
        return listener

    ELBv2Backend.modify_listener = modify_listener  # type: ignore[method-assign]
    ELBv2Backend._ccm_nlb_protocols = True  # type: ignore[attr-defined]


def faithful_moto_route_state() -> None:
    """moto 5.2 reports every VPC route `active`; AWS reports `blackhole` once the target is gone (a terminated
    instance, a deleted network interface or NAT gateway). Make moto's in-process Route model derive its state
    from its target the same way, so blackhole handling is tested against the API shape AWS returns. Patches
    moto's server-side model (like harden_moto_sqs), never boto3. Idempotent."""
    from moto.ec2.models.route_tables import Route

    if getattr(Route, "_ccm_faithful_state", False):
        return

    def state(route: Any) -> str:
        if route.instance is not None and route.instance.state in ("shutting-down", "terminated"):
            return "blackhole"
        if route.interface is not None and route.interface.id not in route.interface.ec2_backend.enis:
            return "blackhole"
        if route.nat_gateway is not None and route.nat_gateway.state in ("deleting", "deleted"):
            return "blackhole"
        return "active"

    Route.state = property(state)  # type: ignore[assignment,method-assign]
    Route._ccm_faithful_state = True  # type: ignore[attr-defined]


def client(service: str, endpoint_url: str, region: str, **kwargs: Any) -> Any:
    """A boto3 client for the local endpoint with dummy credentials."""
    # Any: boto3-stubs types clients per literal service name, which a str parameter cannot satisfy.
    session: Any = boto3.session.Session(region_name=region, **DUMMY_CREDENTIALS)
    return session.client(service, endpoint_url=endpoint_url, **kwargs)


@dataclass(frozen=True, slots=True)
class Instance:
    instance_id: str
    az: str
    subnet_id: str
    private_dns: str
    private_ip: str
    instance_type: str = INSTANCE_TYPE

    @property
    def provider_id(self) -> str:
        return provider_id_for(self.az, self.instance_id)


@dataclass(frozen=True, slots=True)
class World:
    endpoint_url: str
    region: str
    cluster_name: str
    vpc_id: str
    internet_gateway_id: str
    public_route_table_id: str
    private_route_table_id: str
    public_subnets: dict[str, str]  # AZ -> subnet id
    private_subnets: dict[str, str]  # AZ -> subnet id
    node_sg_id: str
    instances: list[Instance] = field(default_factory=list)
    # AZ -> private route table when seeded with one per AZ (each cluster-tagged); empty with the single table.
    private_route_tables: dict[str, str] = field(default_factory=dict)

    @property
    def cluster_route_table_ids(self) -> list[str]:
        """The route tables tagged for the cluster: where pod-CIDR routes go."""
        return sorted(set(self.private_route_tables.values())) or [self.private_route_table_id]

    @property
    def cluster_tag_key(self) -> str:
        return f"kubernetes.io/cluster/{self.cluster_name}"

    @property
    def azs(self) -> list[str]:
        return list(self.public_subnets)

    def node_objects(self) -> list[dict[str, Any]]:
        """Kubernetes Node objects (plain JSON dicts, as the API server returns them) for the instances."""
        return [self._node(i, inst) for i, inst in enumerate(self.instances)]

    def _node(self, index: int, inst: Instance) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": inst.private_dns,
                # Stable per instance so repeated calls describe the same objects.
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, inst.provider_id)),
                "resourceVersion": "1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {
                    "kubernetes.io/hostname": inst.private_dns,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "node.kubernetes.io/instance-type": inst.instance_type,
                    "topology.kubernetes.io/zone": inst.az,
                    "topology.kubernetes.io/region": self.region,
                },
            },
            "spec": {
                "providerID": inst.provider_id,
                "podCIDR": f"10.244.{index}.0/24",
                "podCIDRs": [f"10.244.{index}.0/24"],
            },
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": inst.private_ip},
                    {"type": "InternalDNS", "address": inst.private_dns},
                    {"type": "Hostname", "address": inst.private_dns},
                ],
            },
        }


def _tags(**pairs: str) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in pairs.items()]


def _tag_spec(resource_type: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def seed_world(
    endpoint_url: str,
    region: str,
    cluster_name: str,
    nodes: int = 3,
    *,
    zones: int = 2,
    nodes_in_public_subnets: bool = False,
    route_table_per_az: bool = False,
) -> World:
    """Create the cluster network and `nodes` running instances spread round-robin over `zones` AZs.

    Nodes go to the private subnets by default (the usual EKS layout: internet-facing LBs in public subnets,
    instance targets in private ones). route_table_per_az: one cluster-tagged private route table per AZ (the
    layout with a NAT gateway per AZ) instead of a single one.
    """
    ec2 = client("ec2", endpoint_url, region)
    cluster_tag = f"kubernetes.io/cluster/{cluster_name}"
    azs = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]][:zones]
    if len(azs) < zones:
        raise ValueError(f"{region} has only {len(azs)} availability zones")

    vpc_id = ec2.create_vpc(
        CidrBlock=VPC_CIDR, TagSpecifications=_tag_spec("vpc", {"Name": cluster_name, cluster_tag: "shared"})
    )["Vpc"]["VpcId"]
    # Instances need DNS hostnames to get the private DNS names that become Node names.
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsSupport={"Value": True})
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    igw_id = ec2.create_internet_gateway(
        TagSpecifications=_tag_spec("internet-gateway", {"Name": cluster_name, cluster_tag: "shared"})
    )["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=vpc_id)

    public_rt = ec2.create_route_table(
        VpcId=vpc_id, TagSpecifications=_tag_spec("route-table", {"Name": f"{cluster_name}-public"})
    )["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw_id)
    # The private table is the one tagged for the cluster: it is where pod-CIDR routes go (the route
    # controller picks the single cluster-tagged table, as cloud-provider-aws does).
    private_rt = ec2.create_route_table(
        VpcId=vpc_id,
        TagSpecifications=_tag_spec("route-table", {"Name": f"{cluster_name}-private", cluster_tag: "owned"}),
    )["RouteTable"]["RouteTableId"]
    private_rts: dict[str, str] = {azs[0]: private_rt} if route_table_per_az else {}
    for az in azs[1:] if route_table_per_az else []:
        private_rts[az] = ec2.create_route_table(
            VpcId=vpc_id,
            TagSpecifications=_tag_spec("route-table", {"Name": f"{cluster_name}-private-{az}", cluster_tag: "owned"}),
        )["RouteTable"]["RouteTableId"]

    public_subnets: dict[str, str] = {}
    private_subnets: dict[str, str] = {}
    for i, az in enumerate(azs):
        public_subnets[az] = _subnet(
            ec2,
            vpc_id,
            az,
            f"10.0.{i}.0/24",
            public_rt,
            {
                "Name": f"{cluster_name}-public-{az}",
                cluster_tag: "shared",
                "kubernetes.io/role/elb": "1",
            },
        )
        private_subnets[az] = _subnet(
            ec2,
            vpc_id,
            az,
            f"10.0.{128 + i}.0/24",
            private_rts.get(az, private_rt),
            {
                "Name": f"{cluster_name}-private-{az}",
                cluster_tag: "shared",
                "kubernetes.io/role/internal-elb": "1",
            },
        )

    node_sg_id = ec2.create_security_group(
        GroupName=f"{cluster_name}-nodes",
        Description=f"Nodes of cluster {cluster_name}",
        VpcId=vpc_id,
        TagSpecifications=_tag_spec("security-group", {"Name": f"{cluster_name}-nodes", cluster_tag: "owned"}),
    )["GroupId"]

    node_subnets = public_subnets if nodes_in_public_subnets else private_subnets
    instances: list[Instance] = []
    for n in range(nodes):
        az = azs[n % len(azs)]
        run = ec2.run_instances(
            ImageId=NODE_IMAGE_ID,
            InstanceType=INSTANCE_TYPE,
            MinCount=1,
            MaxCount=1,
            SubnetId=node_subnets[az],
            SecurityGroupIds=[node_sg_id],
            TagSpecifications=_tag_spec("instance", {"Name": f"{cluster_name}-node-{n}", cluster_tag: "owned"}),
        )
        inst = run["Instances"][0]
        instances.append(
            Instance(
                instance_id=inst["InstanceId"],
                az=az,
                subnet_id=node_subnets[az],
                private_dns=inst["PrivateDnsName"],
                private_ip=inst["PrivateIpAddress"],
            )
        )
    ids = [i.instance_id for i in instances]
    if ids:
        # run_instances answers "pending"; ELB target registration requires "running".
        ec2.get_waiter("instance_running").wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 10})

    aws_faithful.settle()  # the network predates the controller: no eventual-consistency gap on what was seeded
    return World(
        endpoint_url=endpoint_url,
        region=region,
        cluster_name=cluster_name,
        vpc_id=vpc_id,
        internet_gateway_id=igw_id,
        public_route_table_id=public_rt,
        private_route_table_id=private_rt,
        public_subnets=public_subnets,
        private_subnets=private_subnets,
        node_sg_id=node_sg_id,
        instances=instances,
        private_route_tables=private_rts,
    )


def _subnet(ec2: Any, vpc_id: str, az: str, cidr: str, route_table_id: str, tags: dict[str, str]) -> str:
    subnet_id: str = ec2.create_subnet(
        VpcId=vpc_id, AvailabilityZone=az, CidrBlock=cidr, TagSpecifications=_tag_spec("subnet", tags)
    )["Subnet"]["SubnetId"]
    ec2.associate_route_table(RouteTableId=route_table_id, SubnetId=subnet_id)
    return subnet_id


def register_eks_cluster(
    endpoint_url: str, region: str, name: str, api_server_url: str, ca_pem: bytes, role_arn: str
) -> dict[str, Any]:
    """Create the EKS cluster in moto (through its API) and point it at the local API server, so the functions'
    real EKS path (DescribeCluster -> endpoint + CA, then a locally minted token) reaches the emulator. moto invents
    an endpoint and a random CA; a real cluster's are what DescribeCluster returns, so set those on moto's
    server-side model (moto runs in this process), never on boto3."""
    import base64

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.eks.models import eks_backends

    eks = client("eks", endpoint_url, region)
    ec2 = client("ec2", endpoint_url, region)
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:2]
    eks.create_cluster(name=name, roleArn=role_arn, resourcesVpcConfig={"subnetIds": subnets})
    cluster = eks_backends[DEFAULT_ACCOUNT_ID][region].clusters[name]
    cluster.endpoint = api_server_url
    cluster.certificate_authority = {"data": base64.b64encode(ca_pem).decode()}
    described: dict[str, Any] = eks.describe_cluster(name=name)["cluster"]
    return described
