"""Building the Kubernetes API client once per execution environment, from the settings (ccm.config.KubeSettings,
read from the environment by the composition root: ccm.wiring.settings).

Modes (KUBE_AUTH_MODE): `eks` (endpoint and CA from eks:DescribeCluster, bearer token minted locally; see
ccm.k8s.eks_token), `kubeconfig-secret` (a kubeconfig kept in Secrets Manager at KUBECONFIG_SECRET_ARN: clusters
that are not EKS), `kubeconfig` (a file at KUBECONFIG: the devstack) and `in-cluster`.
"""

from __future__ import annotations

from ccm.config import KubeSettings
from ccm.k8s.kubeconfig import from_kubeconfig, from_kubeconfig_text, in_cluster
from ccm.k8s.rest import KubeRest
from ccm.logs import protect_secrets


def new_api_client(settings: KubeSettings) -> KubeRest:
    protect_secrets()  # before any credential is read or minted
    mode = settings.auth_mode
    if mode == "kubeconfig":
        return from_kubeconfig(settings.kubeconfig)
    if mode == "kubeconfig-secret":
        return from_kubeconfig_text(
            _kubeconfig_from_secret(_required(settings.kubeconfig_secret_arn, "KUBECONFIG_SECRET_ARN"))
        )
    if mode == "in-cluster":
        return in_cluster(
            _required(settings.service_host, "KUBERNETES_SERVICE_HOST"),
            _required(settings.service_port, "KUBERNETES_SERVICE_PORT"),
        )
    if mode == "eks":
        from ccm.k8s.eks_token import eks_client  # imported lazily: only EKS mode needs STS/EKS clients

        return eks_client(_required(settings.cluster_name, "CLUSTER_NAME"))
    raise ValueError(f"unknown KUBE_AUTH_MODE {mode!r}")


def _required(value: str, variable: str) -> str:
    """What the mode cannot do without (a KeyError naming the variable, as reading it directly raised)."""
    if not value:
        raise KeyError(variable)
    return value


def _kubeconfig_from_secret(secret_arn: str) -> str:
    import boto3  # only this mode needs Secrets Manager

    secret: str = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)["SecretString"]
    return secret
