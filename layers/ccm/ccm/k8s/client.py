"""Building the Kubernetes API client once per execution environment.

Modes (env KUBE_AUTH_MODE): `eks` (endpoint and CA from eks:DescribeCluster, bearer token minted locally; see
ccm.k8s.eks_token), `kubeconfig-secret` (a kubeconfig kept in Secrets Manager at KUBECONFIG_SECRET_ARN: clusters
that are not EKS), `kubeconfig` (a file at KUBECONFIG: the devstack) and `in-cluster`.
"""

from __future__ import annotations

import os
import tempfile

import urllib3
from kubernetes import client, config


def _with_retries(configuration: client.Configuration) -> client.Configuration:
    # Pooled connections may have been reset while the Lambda environment was frozen: retry idempotently.
    configuration.retries = urllib3.util.Retry(
        total=3, connect=3, read=2, backoff_factor=0.2, allowed_methods=None, status_forcelist=()
    )
    return configuration


def new_api_client() -> client.ApiClient:
    mode = os.environ.get("KUBE_AUTH_MODE", "kubeconfig" if os.environ.get("KUBECONFIG") else "eks")
    configuration = client.Configuration()
    if mode == "kubeconfig":
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
    elif mode == "kubeconfig-secret":
        config.load_kube_config(config_file=_kubeconfig_from_secret(), client_configuration=configuration)
    elif mode == "in-cluster":
        config.load_incluster_config(client_configuration=configuration)
    elif mode == "eks":
        from ccm.k8s.eks_token import configure_eks  # imported lazily: only EKS mode needs STS/EKS clients

        configure_eks(configuration, os.environ["CLUSTER_NAME"])
    else:
        raise ValueError(f"unknown KUBE_AUTH_MODE {mode!r}")
    return client.ApiClient(_with_retries(configuration))


def _kubeconfig_from_secret() -> str:
    import boto3  # only this mode needs Secrets Manager

    secret = boto3.client("secretsmanager").get_secret_value(SecretId=os.environ["KUBECONFIG_SECRET_ARN"])
    with tempfile.NamedTemporaryFile("w", prefix="kubeconfig-", delete=False) as handle:
        handle.write(secret["SecretString"])
    os.chmod(handle.name, 0o600)
    return handle.name
