"""Composition root of the sweeper function: the sweeper is provider-side (it lists and deletes ELB/EC2 resources
with the drivers' own models, docs/architecture.md); it gets the security groups driver and its store of orphan
marks from here, and the one `Cluster` value (`SweeperSettings.cluster`) that the driver, the inventory, the deletes
and the decisions all judge for."""

from __future__ import annotations

from ccm.aws.clients import AwsClients
from ccm.aws.security_groups import SecurityGroups
from ccm.aws.table import ClusterTable
from ccm.aws.table_views import OrphanMarksTable
from ccm.config import Settings
from ccm.k8s.kube import Kube
from ccm.per_environment import PerEnvironment
from ccm.sweeper.runtime import ServiceLister, Sweeper, SweeperSettings
from ccm.wiring.settings import aws_region, settings_from_env


def sweeper_settings(settings: Settings) -> SweeperSettings:
    return SweeperSettings.of(settings)


def _from_env() -> Sweeper:
    from ccm.k8s.client import new_api_client  # the Kubernetes client is built once per execution environment

    settings = sweeper_settings(settings_from_env())
    api_client = new_api_client(settings.base.kube)
    clients = AwsClients(region=aws_region(settings.base))
    groups = SecurityGroups(clients, settings.cluster)  # the one Cluster value, built once by SweeperSettings
    marks = OrphanMarksTable(ClusterTable(settings.table, clients))
    return Sweeper(settings, Kube(api_client), ServiceLister(api_client), clients, groups, marks)


runtime: PerEnvironment[Sweeper] = PerEnvironment(_from_env)
