"""An HTTP proxy in front of the moto server that answers some requests with real AWS error responses.

Clients are pointed at the proxy by endpoint URL (the devstack's Lambda environment gets AWS_ENDPOINT_URL = the
proxy), so botocore's retry logic and our own backoff run over the real wire protocols: an ELB query-protocol
`Throttling` XML error (400), EC2's `RequestLimitExceeded` (503), JSON-protocol `ThrottlingException`, and 5xx
bursts (`ServiceUnavailable`, `InternalError`). Everything not matched by a rule passes through unchanged.

    proxy = AwsFaultProxy(moto_url).start()            # proxy.url
    proxy.inject(FaultRule("elasticloadbalancing", "throttle", count=3))
    proxy.inject(FaultRule("ec2", "5xx", count=10, probability=0.3, mutating_only=True))
    proxy.clear(); proxy.stop()

A rule fails the next `count` matching requests (each with `probability`, drawn from a seeded RNG); rules are
consumed in the order they were added. `injected` counts what was answered with an error, per service:operation.
"""

from __future__ import annotations

import http.client
import random
import re
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import parse_qs, urlsplit

FaultKind = Literal["throttle", "5xx"]
READ_PREFIXES = ("Describe", "Get", "List", "Query", "Scan", "BatchGet", "Receive")
_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"})
# Query (XML) protocol services we answer in XML; everything else we see uses a JSON protocol.
_QUERY_NAMESPACES = {
    "elasticloadbalancing": "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/",
}


@dataclass
class FaultRule:
    service: str  # the SigV4 signing name: elasticloadbalancing, ec2, tagging, sqs, dynamodb
    kind: FaultKind
    count: int  # how many requests to fail
    probability: float = 1.0  # each matching request fails with this probability while count lasts
    operations: frozenset[str] | None = None  # only these operations (None: any)
    mutating_only: bool = False  # leave Describe*/Get*/List* alone

    def matches(self, service: str, operation: str) -> bool:
        if self.count <= 0 or service != self.service:
            return False
        if self.operations is not None and operation not in self.operations:
            return False
        return not (self.mutating_only and operation.startswith(READ_PREFIXES))


def error_response(service: str, kind: FaultKind, request_id: str) -> tuple[int, str, bytes]:
    """(HTTP status, content type, body) of the error AWS itself returns for this service and fault."""
    if service == "ec2":  # EC2's own XML shape; throttling is a 503 there
        code, message, status = (
            ("RequestLimitExceeded", "Request limit exceeded.", 503)
            if kind == "throttle"
            else ("InternalError", "An internal error has occurred", 500)
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
        return status, "text/xml;charset=UTF-8", body.encode()
    if service in _QUERY_NAMESPACES:
        code, message, status, party = (
            ("Throttling", "Rate exceeded", 400, "Sender")
            if kind == "throttle"
            else ("ServiceUnavailable", "Service is unavailable, please try again later.", 503, "Receiver")
        )
        body = (
            f'<ErrorResponse xmlns="{_QUERY_NAMESPACES[service]}"><Error><Type>{party}</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return status, "text/xml", body.encode()
    code, message, status = (
        ("ThrottlingException", "Rate exceeded", 400)
        if kind == "throttle"
        else ("InternalServiceException", "Internal service error", 500)
    )
    body = f'{{"__type":"{code}","message":"{message}"}}'
    return status, "application/x-amz-json-1.1", body.encode()


def classify(headers: dict[str, str], body: bytes, path: str) -> tuple[str, str]:
    """(service signing name, operation) of a botocore request; ("", "") when not recognisable."""
    scope = _SCOPE.search(headers.get("authorization", ""))
    service = scope.group(1) if scope else ""
    target = headers.get("x-amz-target", "")
    if target:
        return service, target.rsplit(".", 1)[-1]
    params = parse_qs(body.decode("utf-8", "replace")) or parse_qs(urlsplit(path).query)
    return service, (params.get("Action") or [""])[0]


class AwsFaultProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0, seed: int = 0) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._random = random.Random(seed)
        self.injected: Counter[str] = Counter()
        self.passed = 0
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> AwsFaultProxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="aws-fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def inject(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules.append(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        """Requests the rules would still fail (an upper bound with probabilities < 1)."""
        with self._lock:
            return sum(r.count for r in self._rules)

    def take(self, service: str, operation: str) -> FaultKind | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(service, operation):
                    if self._random.random() >= rule.probability:
                        return None
                    rule.count -= 1
                    self._rules = [r for r in self._rules if r.count > 0]
                    self.injected[f"{service}:{operation}"] += 1
                    return rule.kind
            self.passed += 1
            return None


def _handler_for(proxy: AwsFaultProxy) -> type[BaseHTTPRequestHandler]:
    local = threading.local()  # one keep-alive upstream connection per proxy thread

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # botocore keeps connections alive

        def log_message(self, format: str, *args: object) -> None:
            return

        def _relay(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            kind = proxy.take(*classify(headers, body, self.path))
            if kind is not None:
                service, _ = classify(headers, body, self.path)
                status, content_type, payload = error_response(service, kind, str(uuid.uuid4()))
                self._answer(status, [("Content-Type", content_type), ("x-amzn-RequestId", str(uuid.uuid4()))], payload)
                return
            status, reply_headers, payload = self._forward(body)
            self._answer(status, reply_headers, payload)

        def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            out = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            out["Content-Length"] = str(len(body))
            for attempt in range(2):  # a stale keep-alive connection fails once; a fresh one must not
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=out)
                    resp = conn.getresponse()
                    payload = resp.read()
                    # send_response writes its own Server and Date headers
                    kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP | {"server", "date"}]
                    return resp.status, kept, payload
                except (OSError, http.client.HTTPException):
                    conn.close()
                    local.conn = None
                    if attempt:
                        raise
            raise AssertionError("unreachable")

        def _answer(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _relay

    return Handler
