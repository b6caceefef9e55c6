"""Composition root of the nodes function: the node controller plus the consumers it feeds, chosen here from the
settings (membership when its table and the services queue are configured; the routes feed when routes are on)."""

from __future__ import annotations

from ccm.aws.clients import AwsClients
from ccm.aws.instances import Ec2Instances
from ccm.aws.table import ClusterTable
from ccm.aws.table_views import MembershipTable
from ccm.config import Settings
from ccm.k8s.client import new_api_client
from ccm.k8s.kube import Kube
from ccm.membership.consumer import Membership
from ccm.node.runtime import NodeDeltaConsumer, NodeRuntime, PeriodicConsumer
from ccm.per_environment import PerEnvironment
from ccm.route.consumer import RoutesFeedConsumer
from ccm.wiring.settings import aws_region, settings_from_env


def consumers(settings: Settings, clients: AwsClients) -> tuple[list[NodeDeltaConsumer], list[PeriodicConsumer]]:
    """Membership first (a node's Services hear of it), then the routes feed: the order they always ran in."""
    on_delta: list[NodeDeltaConsumer] = []
    on_pass: list[PeriodicConsumer] = []
    if settings.membership_table and settings.services_queue_url:
        membership = Membership(
            MembershipTable(ClusterTable(settings.membership_table, clients)),
            clients.queue(settings.services_queue_url),
            int(settings.host_bucket_seconds),
        )
        on_delta.append(membership.on_node_delta)
        on_pass.append(membership.on_safety_pass)
    if settings.routes_queue_url:
        on_delta.append(RoutesFeedConsumer(settings.routes_queue_url))
    return on_delta, on_pass


def build_node_runtime(settings: Settings, kube: Kube, clients: AwsClients) -> NodeRuntime:
    on_delta, on_pass = consumers(settings, clients)
    instances = Ec2Instances(clients, settings.region, settings.vpc_id)
    return NodeRuntime(settings, kube, clients, instances, delta_consumers=on_delta, periodic_consumers=on_pass)


def _from_env() -> NodeRuntime:
    settings = settings_from_env()
    return build_node_runtime(settings, Kube(new_api_client(settings.kube)), AwsClients(region=aws_region(settings)))


runtime: PerEnvironment[NodeRuntime] = PerEnvironment(_from_env)
