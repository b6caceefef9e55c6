"""Composition root of the routes function: the route reconciler on the VPC's route tables."""

from __future__ import annotations

from ccm.aws.clients import AwsClients
from ccm.aws.routes import VpcRoutes
from ccm.contracts.kube import RouteKubeApi
from ccm.k8s.client import new_api_client
from ccm.per_environment import PerEnvironment
from ccm.route.kube import RouteKube
from ccm.route.reconciler import RouteOutcome
from ccm.route.runtime import RouteRuntime, RouteSettings
from ccm.wiring.settings import aws_region, settings_from_env


def build_route_runtime(settings: RouteSettings, kube: RouteKubeApi, clients: AwsClients) -> RouteRuntime:
    return RouteRuntime(settings, kube, clients, VpcRoutes(clients, settings.vpc_id))


def _from_env() -> RouteRuntime:
    settings = settings_from_env()
    return build_route_runtime(
        RouteSettings.of(settings), RouteKube(new_api_client(settings.kube)), AwsClients(region=aws_region(settings))
    )


runtime: PerEnvironment[RouteRuntime] = PerEnvironment(_from_env)


def full_pass() -> RouteOutcome:
    """Entry point for a one-off thorough pass with the environment's settings."""
    return runtime().full_pass()
