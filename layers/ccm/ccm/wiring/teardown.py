"""Composition root of the teardown function (the stack's custom resource): the sweeper's inventory and deletes on
the security groups driver; no Kubernetes client (the stack is going, the API may already be)."""

from __future__ import annotations

from ccm.aws.clients import AwsClients
from ccm.aws.security_groups import SecurityGroups
from ccm.per_environment import PerEnvironment
from ccm.sweeper.teardown import Teardown, TeardownResource
from ccm.wiring.settings import aws_region, settings_from_env


def _from_env() -> TeardownResource:
    settings = settings_from_env()
    clients = AwsClients(region=aws_region(settings))
    cluster = settings.cluster  # built once: the driver, the inventory and the deletes share it
    groups = SecurityGroups(clients, cluster)
    return TeardownResource(Teardown(clients, cluster, groups))


runtime: PerEnvironment[TeardownResource] = PerEnvironment(_from_env)
