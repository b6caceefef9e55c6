"""EKS authentication without a kubeconfig: endpoint + CA from DescribeCluster, token from a local presign.

Token = "k8s-aws-v1." + base64url(presigned STS GetCallerIdentity URL whose signature covers the header
x-k8s-aws-id: <cluster>). Valid 15 minutes; re-minted after 10, just before the request that needs it.
"""

from __future__ import annotations

import base64
import tempfile
import time
from collections.abc import Callable

import boto3
from botocore.signers import RequestSigner

from ccm.k8s.rest import KubeRest
from ccm.logs import protect_secrets

TOKEN_PREFIX = "k8s-aws-v1."
TOKEN_LIFETIME_S = 600  # re-mint well before the 15-minute expiry


def mint_token(session: boto3.session.Session, cluster_name: str) -> str:
    protect_secrets()  # botocore.auth would log the presigned URL's signature at DEBUG
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


class EksToken:
    """A token source for KubeRest: minted on first use and again once it is TOKEN_LIFETIME_S old."""

    def __init__(self, session: boto3.session.Session, cluster_name: str, clock: Callable[[], float] = time.time):
        self.session, self.cluster_name, self.clock = session, cluster_name, clock
        self._token = ""
        self._minted_at = float("-inf")

    def __call__(self) -> str:
        if self.clock() - self._minted_at > TOKEN_LIFETIME_S:
            self._token = mint_token(self.session, self.cluster_name)
            self._minted_at = self.clock()
        return self._token


def eks_client(cluster_name: str, session: boto3.session.Session | None = None) -> KubeRest:
    session = session or boto3.session.Session()
    cluster = session.client("eks").describe_cluster(name=cluster_name)["cluster"]
    with tempfile.NamedTemporaryFile(prefix="eks-ca-", suffix=".pem", delete=False) as ca:
        ca.write(base64.b64decode(cluster["certificateAuthority"]["data"]))
    return KubeRest(cluster["endpoint"], token=EksToken(session, cluster_name), ca_file=ca.name)
