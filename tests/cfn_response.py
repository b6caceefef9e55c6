"""CloudFormation's side of a custom resource for tests: the pre-signed response URL (a local HTTP server that
records every PUT) and the request events it sends."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

CLUSTER = "test-cluster"


class CloudFormation:
    """The pre-signed response URL: records every PUT body."""

    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                assert self.headers.get("Content-Type", "") == ""  # the pre-signed URL's signature needs it empty
                outer.responses.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def event(self, request_type: str) -> dict[str, Any]:
        return {
            "RequestType": request_type,
            "ResponseURL": f"http://127.0.0.1:{self.server.server_port}/presigned",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/ccm/1",
            "RequestId": "r-1",
            "LogicalResourceId": "ClusterTeardown",
            "ResourceType": "Custom::ServerlessCcmTeardown",
            "ResourceProperties": {"ClusterName": CLUSTER},
            **({"PhysicalResourceId": f"serverless-ccm-teardown-{CLUSTER}"} if request_type != "Create" else {}),
        }
