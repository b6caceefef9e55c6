"""EKS-style token authentication for the emulator: what the EKS authenticator checks, verified locally.

A token is ``k8s-aws-v1.`` + base64url(presigned STS GetCallerIdentity URL). EKS forwards the URL to STS with the
header ``x-k8s-aws-id: <cluster>``; STS accepts it only if the SigV4 signature covers that header with that value.
Here there is no STS, so the signature is recomputed from the URL, the expected cluster name and the secret of the
access key (the devstack's credentials are known): a token minted for another cluster, tampered with, expired, or
not a GetCallerIdentity presign is refused (401), exactly the cases EKS refuses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from calendar import timegm
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_HEADER = "x-k8s-aws-id"
TOKEN_VALIDITY_S = 15 * 60  # from signing, as EKS
MAX_PRESIGN_EXPIRES_S = 60  # what aws-iam-authenticator and `aws eks get-token` sign with
EMPTY_PAYLOAD_SHA256 = hashlib.sha256(b"").hexdigest()


class EksTokenValidator:
    """``validate(token) -> username | None``, usable as ``Emulator(token_validator=...)``.

    `secrets`: access key id -> secret access key; `identities`: access key id -> the username EKS would map the
    caller to (an access entry's principal ARN); by default the IAM-user-like ARN of the key.
    """

    def __init__(
        self,
        cluster_name: str,
        secrets: Mapping[str, str],
        identities: Mapping[str, str] | None = None,
        clock: object = time,
    ) -> None:
        self.cluster_name = cluster_name
        self.secrets = dict(secrets)
        self.identities = dict(identities or {})
        self._clock = clock
        self.refusals: list[str] = []  # why each refused token was refused (tests read it)

    def __call__(self, token: str) -> str | None:
        reason = self.refusal(token)
        if reason:
            self.refusals.append(reason)
            return None
        access_key = _credential_scope(_query(_url(token)))[0]
        return self.identities.get(access_key, f"arn:aws:iam::123456789012:user/{access_key}")

    def refusal(self, token: str) -> str:
        """Empty when the token is good; else the reason (pure apart from the clock)."""
        if not token.startswith(TOKEN_PREFIX):
            return "not a k8s-aws-v1 token"
        try:
            url = _url(token)
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return "token is not base64url of a URL"
        parts, query = urlsplit(url), _query(url)
        if parts.path not in ("", "/") or query.get("Action") != "GetCallerIdentity":
            return "not a presigned GetCallerIdentity URL"
        if query.get("Version") != "2011-06-15" or query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            return "unexpected STS version or signing algorithm"
        signed = query.get("X-Amz-SignedHeaders", "").split(";")
        if CLUSTER_HEADER not in signed or "host" not in signed:
            return f"signature does not cover {CLUSTER_HEADER}"
        try:
            access_key, date, region, service = _credential_scope(query)
            signed_at = timegm(time.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
            expires = int(query["X-Amz-Expires"])
        except (KeyError, ValueError):
            return "malformed presign parameters"
        if service != "sts" or not query["X-Amz-Date"].startswith(date):
            return "credential scope is not sts for the signing date"
        if not 0 < expires <= MAX_PRESIGN_EXPIRES_S:
            return f"X-Amz-Expires must be 1..{MAX_PRESIGN_EXPIRES_S}"
        now = self._clock.time()  # type: ignore[attr-defined]
        if not signed_at - 60 <= now <= signed_at + TOKEN_VALIDITY_S:
            return "token expired (or signed in the future)"
        secret = self.secrets.get(access_key)
        if secret is None:
            return f"unknown access key {access_key}"
        headers = {"host": parts.netloc, CLUSTER_HEADER: self.cluster_name}
        expected = _signature(parts.query, signed, headers, secret, query["X-Amz-Date"], date, region, service)
        if not hmac.compare_digest(expected, query.get("X-Amz-Signature", "")):
            return f"signature does not match (token minted for another cluster than {self.cluster_name}?)"
        return ""


def _url(token: str) -> str:
    raw = token[len(TOKEN_PREFIX) :]
    url = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    if not url.startswith(("https://", "http://")):
        raise ValueError("not a URL")
    return url


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def _credential_scope(query: Mapping[str, str]) -> tuple[str, str, str, str]:
    access_key, date, region, service, terminator = query["X-Amz-Credential"].split("/")
    if terminator != "aws4_request":
        raise ValueError("bad credential scope")
    return access_key, date, region, service


def _signature(
    raw_query: str,
    signed_headers: list[str],
    headers: Mapping[str, str],
    secret: str,
    amz_date: str,
    date: str,
    region: str,
    service: str,
) -> str:
    """SigV4 of a presigned GET (AWS General Reference, 'Create a signed AWS API request'), computed here."""
    pairs = sorted(tuple(p.split("=", 1)) if "=" in p else (p, "") for p in raw_query.split("&") if p)
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs if k != "X-Amz-Signature")
    canonical_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed_headers)
    canonical_request = "\n".join(
        ["GET", "/", canonical_query, canonical_headers, ";".join(signed_headers), EMPTY_PAYLOAD_SHA256]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
