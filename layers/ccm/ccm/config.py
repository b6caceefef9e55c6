"""The settings of every function, as one value. Reading them from the environment is the composition root's
job (ccm.wiring.settings, once per execution environment): nothing below it reads the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ccm.contracts.cluster import Cluster
from ccm.contracts.kube import DEFAULT_LOAD_BALANCER_CLASS

__all__ = ["DEFAULT_LOAD_BALANCER_CLASS", "KubeSettings", "Settings", "claims_unclassed", "load_balancer_class"]


def load_balancer_class(stack_parameters: Mapping[str, str]) -> str:
    """The stack's LoadBalancerClass parameter (template.yaml), its default when the stack does not list it."""
    return stack_parameters.get("LoadBalancerClass") or DEFAULT_LOAD_BALANCER_CLASS


def claims_unclassed(stack_parameters: Mapping[str, str]) -> bool:
    """template.yaml's ClaimServicesWithoutClass condition: `claim`, or `auto` (the default) off EKS auth."""
    mode = stack_parameters.get("ServicesWithoutClass") or "auto"
    return mode == "claim" or (mode == "auto" and (stack_parameters.get("KubeAuthMode") or "eks") != "eks")


# How long node changes are coalesced into one HOSTS message (the nodes Lambda) and the longest a HOSTS message
# may wait (the services Lambda): both read the same variable.
DEFAULT_BUCKET_SECONDS: Final = 15


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """How the functions reach the Kubernetes API (ccm.k8s.client.new_api_client)."""

    # eks (eks:DescribeCluster + a locally minted token), kubeconfig-secret, kubeconfig (a file: the devstack) or
    # in-cluster; KUBE_AUTH_MODE, defaulting to kubeconfig when KUBECONFIG is set, else eks.
    auth_mode: str = "eks"
    cluster_name: str = ""  # eks: the EKS cluster
    kubeconfig: str = ""  # kubeconfig: the file (KUBECONFIG, else ~/.kube/config)
    kubeconfig_secret_arn: str = ""  # kubeconfig-secret: the Secrets Manager secret holding the kubeconfig
    service_host: str = ""  # in-cluster: KUBERNETES_SERVICE_HOST / _PORT, as the kubelet sets them
    service_port: str = ""


@dataclass(frozen=True, slots=True)
class Settings:
    cluster_name: str
    vpc_id: str
    load_balancer_class: str = DEFAULT_LOAD_BALANCER_CLASS
    region: str = ""
    # cloud-provider-aws's default (Classic ELB) keeps a migration drop-in; the template lets new clusters pick nlb.
    default_lb_type: str = "clb"
    # Serve LoadBalancer Services without spec.loadBalancerClass too (self-managed clusters, migration from
    # cloud-provider-aws). The template turns it off on EKS, whose own controller serves those.
    claim_unclassed: bool = True
    # security-groups / extra-security-groups may name any group of the VPC (else only cluster-tagged ones).
    any_annotation_security_group: bool = False
    # Membership table and the services queue ("": membership off; the services Lambda then LISTs nodes).
    membership_table: str = ""
    services_queue_url: str = ""
    routes_queue_url: str = ""  # "": routes disabled (the nodes Lambda forwards nothing)
    cluster_cidrs: tuple[str, ...] = ()  # raw CLUSTER_CIDRS items; the routes root parses and refuses bad ones
    host_bucket_seconds: float = DEFAULT_BUCKET_SECONDS
    # Who may send which message (ccm.senders; None: not configured, anyone the queue policy admits).
    senders: Mapping[str, frozenset[str] | None] | None = None
    # The sweeper.
    sweeper_table: str = ""
    sweeper_dry_run: bool = False
    sweeper_grace_seconds: float = 1800.0
    # The Kubernetes client.
    kube: KubeSettings = KubeSettings()

    @property
    def cluster(self) -> Cluster:
        """The cluster value the composition roots hand to the drivers (ccm.contracts.cluster)."""
        return Cluster.of(
            self.cluster_name, self.vpc_id, self.load_balancer_class, self.claim_unclassed, self.default_lb_type
        )
