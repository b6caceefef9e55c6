"""Composition root of the services function: both load balancer drivers behind LoadBalancers, the shared
security groups, the member nodes (membership table when configured, else a LIST of nodes), the reconciler."""

from __future__ import annotations

from ccm.aws.applied import AppliedTable
from ccm.aws.balancers import LoadBalancers
from ccm.aws.clb import ClassicLoadBalancers
from ccm.aws.clients import AwsClients
from ccm.aws.nlb import NetworkLoadBalancers
from ccm.aws.ownership import Ownership
from ccm.aws.security_groups import SecurityGroups
from ccm.aws.table import ClusterTable
from ccm.aws.table_views import MembershipTable
from ccm.config import Settings
from ccm.k8s.client import new_api_client
from ccm.k8s.kube import Kube
from ccm.membership.nodes import MemberNodes
from ccm.per_environment import PerEnvironment
from ccm.service.reconciler import ServiceReconciler
from ccm.service.runtime import ServiceRuntime
from ccm.wiring.settings import aws_region, settings_from_env


def build_service_runtime(
    settings: Settings, kube: Kube, clients: AwsClients, table: ClusterTable | None = None
) -> ServiceRuntime:
    """`table`: the cluster table (membership and checkpoints); None: LIST the nodes and read AWS in full."""
    cluster = settings.cluster  # built once: every driver and the reconciler get this one value
    groups = SecurityGroups(clients, cluster, settings.any_annotation_security_group)
    ownership = Ownership(clients, cluster)
    # The deployers (each type's and the security groups') hold the clients; the pass (LoadBalancers) holds none.
    balancer = LoadBalancers(
        NetworkLoadBalancers(clients, cluster, groups),
        ClassicLoadBalancers(clients, cluster, groups),
        cluster,
        security_groups=groups,
        # Checkpoints live in the membership table; without one every pass reads AWS in full.
        applied=AppliedTable(table) if table is not None else None,
        ownership=ownership,
    )
    reconciler = ServiceReconciler(
        kube,
        balancer,
        balancer,
        MemberNodes(kube, MembershipTable(table) if table is not None else None),
        cluster,
        ownership=ownership,
        endpoints=kube,
    )
    return ServiceRuntime(settings, clients, reconciler, balancer)


def _from_env() -> ServiceRuntime:
    settings = settings_from_env()
    clients = AwsClients(region=aws_region(settings))
    table = ClusterTable(settings.membership_table, clients) if settings.membership_table else None
    return build_service_runtime(settings, Kube(new_api_client(settings.kube)), clients, table)


runtime: PerEnvironment[ServiceRuntime] = PerEnvironment(_from_env)
