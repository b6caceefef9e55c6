"""CallCounter counts throttling errors, retried ones included, over real botocore and real HTTP.

moto does not throttle, so a tiny local server answers like AWS does when it throttles: EC2's query-protocol XML
error (RequestLimitExceeded, HTTP 503) and a JSON-protocol error (ThrottlingException, HTTP 400), a few times,
then a valid answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ccm.aws.clients import (
    MAX_ATTEMPTS,
    THROTTLE_BACKOFF_CAP_SECONDS,
    THROTTLE_WAIT_SECONDS,
    AwsClients,
    throttle_sleep,
)

EC2_THROTTLED = (
    503,
    "text/xml",
    b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>'
    b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>r-1</RequestID></Response>",
)
EC2_ZONES = (
    200,
    "text/xml",
    b'<?xml version="1.0" encoding="UTF-8"?><DescribeAvailabilityZonesResponse '
    b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r-2</requestId><availabilityZoneInfo><item>'
    b"<zoneName>us-east-1a</zoneName><zoneId>use1-az1</zoneId><zoneState>available</zoneState>"
    b"<regionName>us-east-1</regionName></item></availabilityZoneInfo></DescribeAvailabilityZonesResponse>",
)
EC2_INVALID = (
    400,
    "text/xml",
    b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>InvalidParameterValue</Code>'
    b"<Message>bad</Message></Error></Errors><RequestID>r-3</RequestID></Response>",
)
TAGGING_THROTTLED = (
    400,
    "application/x-amz-json-1.1",
    json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode(),
)
TAGGING_OK = (200, "application/x-amz-json-1.1", json.dumps({"ResourceTagMappingList": []}).encode())


class FakeAws:
    """Answers each request with the next scripted response (the last one repeats)."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str, bytes]] = []
        self.requests = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # every AWS query/JSON protocol call is a POST
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fake.requests += 1
                status, content_type, body = fake.script.pop(0) if len(fake.script) > 1 else fake.script[0]
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAws]:
    server = FakeAws()
    # botocore's documented per-service endpoint variables: the code under test builds its clients unchanged.
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", server.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_RESOURCE_GROUPS_TAGGING_API", server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    yield server
    server.server.shutdown()


def test_retried_ec2_throttles_are_counted_per_attempt(fake: FakeAws) -> None:
    fake.script = [EC2_THROTTLED, EC2_THROTTLED, EC2_ZONES]
    clients = AwsClients(region="us-east-1")
    clients.counter.reset_thread()
    zones = clients.ec2.describe_availability_zones()["AvailabilityZones"]
    assert [z["ZoneId"] for z in zones] == ["use1-az1"]  # the retries hid the throttling from the caller
    assert fake.requests == 3
    assert clients.counter.thread_calls() == {"ec2:DescribeAvailabilityZones": 1}
    assert clients.counter.thread_throttles() == 2
    assert clients.counter.throttles == {"ec2:DescribeAvailabilityZones": 2}


def test_json_protocol_throttling_is_counted(fake: FakeAws) -> None:
    fake.script = [TAGGING_THROTTLED, TAGGING_OK]
    clients = AwsClients(region="us-east-1")
    clients.tagging.get_resources()
    assert clients.counter.throttles == {"resourcegroupstaggingapi:GetResources": 1}


def test_other_errors_are_not_throttles_and_the_thread_view_resets(fake: FakeAws) -> None:
    fake.script = [EC2_INVALID]
    clients = AwsClients(region="us-east-1")
    with pytest.raises(ClientError):
        clients.ec2.describe_availability_zones()
    assert clients.counter.thread_throttles() == 0 and clients.counter.thread_calls()
    fake.script = [EC2_THROTTLED, EC2_ZONES]
    clients.ec2.describe_availability_zones()
    assert clients.counter.thread_throttles() == 1
    clients.counter.reset_thread()
    assert clients.counter.thread_throttles() == 0 and clients.counter.throttles


EC2_UNAVAILABLE = (
    503,
    "text/xml",
    b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>Unavailable</Code>'
    b"<Message>down</Message></Error></Errors><RequestID>r-4</RequestID></Response>",
)


def test_a_throttled_call_keeps_waiting_after_botocores_attempts(fake: FakeAws) -> None:
    """Throttled 6 times in a row (botocore alone gives up after MAX_ATTEMPTS = 4): the call still succeeds."""
    fake.script = [EC2_THROTTLED] * 6 + [EC2_ZONES]
    clients = AwsClients(region="us-east-1")
    zones = clients.ec2.describe_availability_zones()["AvailabilityZones"]
    assert [z["ZoneId"] for z in zones] == ["use1-az1"]
    assert fake.requests == 7
    assert clients.counter.throttles == {"ec2:DescribeAvailabilityZones": 6}


def test_other_retryable_errors_still_stop_at_botocores_attempts(fake: FakeAws) -> None:
    fake.script = [EC2_UNAVAILABLE] * 6 + [EC2_ZONES]
    clients = AwsClients(region="us-east-1")
    with pytest.raises(ClientError) as err:
        clients.ec2.describe_availability_zones()
    assert err.value.response["Error"]["Code"] == "Unavailable"
    assert fake.requests == MAX_ATTEMPTS


@pytest.mark.parametrize(
    ("attempts", "throttled_for", "expected"),
    [
        (1, 0.0, None),  # botocore's own retries come first
        (MAX_ATTEMPTS - 1, 0.0, None),
        (MAX_ATTEMPTS, 0.0, 0.5 * THROTTLE_BACKOFF_CAP_SECONDS),
        (MAX_ATTEMPTS + 20, THROTTLE_WAIT_SECONDS - 0.1, 0.5 * THROTTLE_BACKOFF_CAP_SECONDS),
        (MAX_ATTEMPTS + 21, THROTTLE_WAIT_SECONDS, None),  # waited long enough: the record's retry takes over
    ],
)
def test_throttle_sleep(attempts: int, throttled_for: float, expected: float | None) -> None:
    assert throttle_sleep(attempts, throttled_for, 0.5) == expected
