"""EKS authentication without a kubeconfig: endpoint + CA from DescribeCluster, token from a local presign.

Token = "k8s-aws-v1." + base64url(presigned STS GetCallerIdentity URL whose signature covers the header
x-k8s-aws-id: <cluster>). Valid 15 minutes; refreshed after 10 by the client's refresh hook.
"""

from __future__ import annotations

import base64
import tempfile
import time
from typing import Any

import boto3
from botocore.signers import RequestSigner
from kubernetes import client

TOKEN_PREFIX = "k8s-aws-v1."
TOKEN_LIFETIME_S = 600  # re-mint well before the 15-minute expiry


def mint_token(session: boto3.session.Session, cluster_name: str) -> str:
    sts = session.client("sts")
    signer = RequestSigner(
        sts.meta.service_model.service_id,
        sts.meta.region_name,
        "sts",
        "v4",
        session.get_credentials(),
        session.events,
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"{sts.meta.endpoint_url}/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster_name},
            "context": {},
        },
        region_name=sts.meta.region_name,
        expires_in=60,
        operation_name="",
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def configure_eks(configuration: client.Configuration, cluster_name: str) -> None:
    session = boto3.session.Session()
    cluster = session.client("eks").describe_cluster(name=cluster_name)["cluster"]
    with tempfile.NamedTemporaryFile(prefix="eks-ca-", suffix=".pem", delete=False) as ca:
        ca.write(base64.b64decode(cluster["certificateAuthority"]["data"]))
    configuration.host = cluster["endpoint"]
    configuration.ssl_ca_cert = ca.name
    install_token_refresh(configuration, session, cluster_name)


def install_token_refresh(configuration: client.Configuration, session: boto3.session.Session, cluster: str) -> None:
    """Mint a token now and again before it expires, just before a request needs it."""
    cluster_name = cluster
    minted = {"at": 0.0}

    def refresh(conf: Any) -> None:
        if time.time() - minted["at"] > TOKEN_LIFETIME_S:
            # kubernetes client v36+: the key is 'BearerToken' and the prefix must be part of the value.
            conf.api_key["BearerToken"] = "Bearer " + mint_token(session, cluster_name)
            conf.api_key_prefix.pop("BearerToken", None)
            minted["at"] = time.time()

    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    refresh(configuration)
