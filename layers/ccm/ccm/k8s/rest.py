"""A small JSON-over-HTTPS client for the Kubernetes API, used by the Lambdas instead of the official client.

Why not `kubernetes`: importing `kubernetes.client` costs ~430 ms on every cold start (thousands of generated
model classes), and the functions make ten kinds of call, all on plain JSON. urllib3 is already loaded by
botocore, so this client costs nothing to import. The watcher uses it too (ccm.k8s.watch: list + watch), which
keeps the official client out of its image; the doctor and the tests keep the official client.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from ccm import deadline

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT = "serverless-ccm"

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
ATTEMPTS = 4  # the first try and urllib3's retries (total=3)
MIN_REQUEST_S = 2.0  # a request is not started with less call time left (ccm.deadline)


class ApiError(Exception):
    """A non-2xx answer. `status` as on the official client's ApiException; str() is one line without headers
    (it ends up in events and logs)."""

    def __init__(self, status: int, reason: str, body: bytes = b"") -> None:
        self.status = status
        self.reason = reason
        self.body = body.decode("utf-8", "replace")
        try:
            parsed = json.loads(self.body)
        except ValueError:
            parsed = None
        detail = parsed.get("message") if isinstance(parsed, dict) else None
        self.message: str = detail or self.body[:300] or reason
        super().__init__(f"({status}) {reason}: {self.message}")


class KubeRest:
    """One connection pool per execution environment. `token` is asked before every request, so a source that
    rotates (an EKS token, a projected service-account token) is always current."""

    def __init__(
        self,
        server: str,
        *,
        token: Callable[[], str | None] | None = None,
        ca_file: str | None = None,
        verify: bool = True,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> None:
        import urllib3  # loaded with botocore on the first AWS call anyway; not on the handler's import path

        self.server = server.rstrip("/")
        self._token = token
        tls: dict[str, Any] = {}
        if self.server.startswith("https://"):
            tls = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE", "ca_certs": ca_file}
            if cert_file:
                tls.update(cert_file=cert_file, key_file=key_file)
            if not verify:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        # Pooled connections may have been reset while the Lambda environment was frozen: retry connection and
        # read failures (every verb: our writes are merge patches, preconditioned deletes and events, safe to
        # repeat), never HTTP statuses - those are the reconcilers' decisions.
        retries = urllib3.util.Retry(
            total=ATTEMPTS - 1, connect=3, read=2, backoff_factor=0.2, allowed_methods=None, status_forcelist=()
        )
        timeout = urllib3.util.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
        # A Lambda runs one invocation at a time; 10 covers the devstack, where several share one process.
        self.pool = urllib3.PoolManager(maxsize=10, retries=retries, timeout=timeout, **tls)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """Send one request; the decoded JSON answer (None if empty). Non-2xx raises ApiError."""
        url = self._url(path, query)
        headers = self._headers()
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        response = self.pool.request(
            method, url, body=payload, headers=headers, preload_content=True, **self._deadline_timeout()
        )
        if response.status >= 400:
            raise ApiError(response.status, response.reason or "", response.data)
        return json.loads(response.data) if response.data else None

    def open(self, path: str, *, query: Mapping[str, str | int] | None = None, timeout: tuple[float, float]) -> Any:
        """GET whose body the caller reads as it arrives (a watch stream): the unread urllib3 response, to be
        released by the caller. `timeout` is (connect, read): the read one bounds each wait for more bytes. No
        retries: a long-lived stream's caller decides when and where to resume. Non-2xx raises ApiError."""
        import urllib3

        response = self.pool.request(
            "GET",
            self._url(path, query),
            headers=self._headers(),
            preload_content=False,
            retries=False,
            timeout=urllib3.util.Timeout(connect=timeout[0], read=timeout[1]),
        )
        if response.status >= 400:
            try:
                raise ApiError(response.status, response.reason or "", response.read())
            finally:
                response.release_conn()
        return response

    def _url(self, path: str, query: Mapping[str, str | int] | None) -> str:
        return self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": JSON, "User-Agent": USER_AGENT}
        token = self._token() if self._token else None
        if token:
            headers["Authorization"] = "Bearer " + token
        return headers

    @staticmethod
    def _deadline_timeout() -> dict[str, Any]:
        """Within an invocation, every attempt's timeouts shrink so all of them end before its deadline."""
        left = deadline.calls_remaining()
        if left is None:
            return {}
        deadline.check(MIN_REQUEST_S, "Kubernetes request")
        import urllib3

        per_attempt = (left - 1.5) / ATTEMPTS  # 1.5 s: urllib3's backoff sleeps (0.2 s doubling) between them
        return {
            "timeout": urllib3.util.Timeout(
                connect=min(CONNECT_TIMEOUT_S, per_attempt / 2), read=min(READ_TIMEOUT_S, per_attempt / 2)
            )
        }

    def get(self, path: str, query: Mapping[str, str | int] | None = None) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> Any:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: Any = None) -> Any:
        return self.request("DELETE", path, body=body)


def quote(segment: str) -> str:
    """A name or namespace as one URL path segment."""
    return urllib.parse.quote(segment, safe="")
