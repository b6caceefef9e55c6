"""Building the Kubernetes API client once per execution environment.

Modes (env KUBE_AUTH_MODE): `eks` (endpoint and CA from eks:DescribeCluster, bearer token minted locally; see
ccm.k8s.eks_token), `kubeconfig-secret` (a kubeconfig kept in Secrets Manager at KUBECONFIG_SECRET_ARN: clusters
that are not EKS), `kubeconfig` (a file at KUBECONFIG: the devstack) and `in-cluster`.
"""

from __future__ import annotations

import os

from ccm.k8s.kubeconfig import from_kubeconfig, from_kubeconfig_text, in_cluster
from ccm.k8s.rest import KubeRest
from ccm.logs import protect_secrets


def new_api_client() -> KubeRest:
    protect_secrets()  # before any credential is read or minted
    mode = os.environ.get("KUBE_AUTH_MODE", "kubeconfig" if os.environ.get("KUBECONFIG") else "eks")
    if mode == "kubeconfig":
        return from_kubeconfig(os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config"))
    if mode == "kubeconfig-secret":
        return from_kubeconfig_text(_kubeconfig_from_secret())
    if mode == "in-cluster":
        return in_cluster()
    if mode == "eks":
        from ccm.k8s.eks_token import eks_client  # imported lazily: only EKS mode needs STS/EKS clients

        return eks_client(os.environ["CLUSTER_NAME"])
    raise ValueError(f"unknown KUBE_AUTH_MODE {mode!r}")


def _kubeconfig_from_secret() -> str:
    import boto3  # only this mode needs Secrets Manager

    secret: str = boto3.client("secretsmanager").get_secret_value(SecretId=os.environ["KUBECONFIG_SECRET_ARN"])[
        "SecretString"
    ]
    return secret
