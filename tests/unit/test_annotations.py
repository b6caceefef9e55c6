"""The annotation parser: one case per annotation (valid -> typed value, invalid -> error naming annotation and
value), defaults per LB type and traffic policy, hard rules, cross-field checks, the generated reference, and a
property test that random annotations never escape as anything but InvalidServiceConfig."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck as Hypothesis
from hypothesis import given, settings
from hypothesis import strategies as st

from ccm.aws import lbconfig as a
from ccm.aws import nlb_model
from ccm.aws.lbconfig import docs
from ccm.aws.lbconfig.config import AccessLog, ConnectionDraining, HealthCheck, Listener, LoadBalancerConfig
from ccm.aws.lbconfig.table import AnnotationValues
from ccm.contracts.cloud import ImplementedElsewhere, InvalidServiceConfig
from tests.factories import service

ROOT = Path(__file__).resolve().parents[2]
P = a.PREFIX
CERT = "arn:aws:acm:us-east-1:123456789012:certificate/0f1e2d3c-aaaa-bbbb-cccc-111122223333"
CERT2 = "arn:aws:iam::123456789012:server-certificate/prod/web"
SUBNETS = "subnet-0123456789abcdef0,subnet-89abcdef"
EIPS = "eipalloc-0123456789abcdef0,eipalloc-89abcdef"


def parse(ann: dict[str, str] | None = None, lb: str = "nlb", **spec: Any) -> LoadBalancerConfig:
    """`lb` goes into the type annotation so the default LB type does not matter."""
    return a.parse_load_balancer_config(service(annotations={P + "type": lb, **(ann or {})}, **spec))


def problems(ann: dict[str, str] | None = None, lb: str = "nlb", **spec: Any) -> tuple[InvalidServiceConfig, ...]:
    with pytest.raises(InvalidServiceConfig) as info:
        parse(ann, lb, **spec)
    return a.errors_of(info.value)


def annotation_error(suffix: str, value: str, lb: str = "nlb", **spec: Any) -> a.InvalidAnnotation:
    errors = problems({P + suffix: value}, lb, **spec)
    assert len(errors) == 1, errors
    err = errors[0]
    assert isinstance(err, a.InvalidAnnotation)
    assert err.annotation == P + suffix
    assert P + suffix in str(err)
    return err


# -- valid values -> typed values -------------------------------------------------------------------------------------
def _hc(cfg: LoadBalancerConfig) -> HealthCheck:
    return cfg.health_check


VALID = [
    ("internal", "true", "nlb", lambda c: c.scheme, "internal"),
    ("internal", "0.0.0.0/0", "clb", lambda c: c.scheme, "internal"),
    ("internal", "False", "nlb", lambda c: c.scheme, "internal"),  # exactly upstream: only "false" is not internal
    ("internal", "false", "nlb", lambda c: c.scheme, "internet-facing"),
    ("internal", "", "nlb", lambda c: c.scheme, "internet-facing"),
    ("scheme", "Internal", "nlb", lambda c: c.scheme, "internal"),
    ("scheme", "internet-facing", "clb", lambda c: c.scheme, "internet-facing"),
    ("subnets", " subnet-0123456789abcdef0 , public-a ,", "nlb", lambda c: c.subnets,
     ("subnet-0123456789abcdef0", "public-a")),
    ("subnets", "subnet-89abcdef,my subnet", "clb", lambda c: (c.subnet_ids, c.subnet_names),
     (("subnet-89abcdef",), ("my subnet",))),
    ("eip-allocations", "eipalloc-0123456789abcdef0", "nlb", lambda c: c.eip_allocations,
     ("eipalloc-0123456789abcdef0",)),
    ("ip-address-type", "DualStack", "nlb", lambda c: c.ip_address_type, "dualstack"),
    ("ssl-cert", f"{CERT}, {CERT2}", "nlb", lambda c: c.ssl_certificates, (CERT, CERT2)),
    ("ssl-ports", "443, p80", "nlb", lambda c: c.ssl_ports, frozenset({443, "p80"})),
    ("ssl-ports", "*", "clb", lambda c: c.ssl_ports, "*"),
    ("ssl-negotiation-policy", "ELBSecurityPolicy-TLS13-1-2-2021-06", "nlb", lambda c: c.ssl_negotiation_policy,
     "ELBSecurityPolicy-TLS13-1-2-2021-06"),
    ("backend-protocol", "HTTP", "clb", lambda c: c.backend_protocol, "http"),
    ("proxy-protocol", "*", "clb", lambda c: c.proxy_protocol, True),
    ("connection-draining-enabled", "true", "clb", lambda c: c.connection_draining, ConnectionDraining(True, 300)),
    ("connection-draining-timeout", "60", "clb", lambda c: c.connection_draining, ConnectionDraining(False, 60)),
    ("connection-idle-timeout", "3600", "clb", lambda c: c.idle_timeout, 3600),
    ("access-log-emit-interval", "5", "clb", lambda c: c.access_log.emit_interval, 5),
    ("access-log-s3-bucket-name", "my.logs-bucket", "nlb", lambda c: c.access_log.bucket, "my.logs-bucket"),
    ("access-log-s3-bucket-prefix", "team/a", "nlb", lambda c: c.access_log.prefix, "team/a"),
    ("cross-zone-load-balancing-enabled", "T", "nlb", lambda c: c.cross_zone, True),
    ("cross-zone-load-balancing-enabled", "0", "clb", lambda c: c.cross_zone, False),
    ("additional-resource-tags", "team=web, cost-center=42,empty=,bare", "nlb", lambda c: c.additional_tags,
     {"team": "web", "cost-center": "42", "empty": "", "bare": ""}),
    ("additional-resource-tags", "url=a=b", "clb", lambda c: c.additional_tags, {"url": "a=b"}),
    ("security-groups", "sg-0123456789abcdef0,sg-89abcdef", "nlb", lambda c: c.security_groups,
     ("sg-0123456789abcdef0", "sg-89abcdef")),
    ("extra-security-groups", "sg-89abcdef", "clb", lambda c: c.extra_security_groups, ("sg-89abcdef",)),
    ("target-node-labels", "node.kubernetes.io/role=lb,tier=", "nlb", lambda c: c.target_node_labels,
     {"node.kubernetes.io/role": "lb", "tier": ""}),
    ("target-group-attributes", "preserve_client_ip.enabled=False,deregistration_delay.timeout_seconds=30\n",
     "nlb", lambda c: c.target_group_attributes,
     {"preserve_client_ip.enabled": "false", "deregistration_delay.timeout_seconds": "30"}),
    ("target-group-attributes", "load_balancing.cross_zone.enabled=use_load_balancer_configuration", "nlb",
     lambda c: c.target_group_attributes, {"load_balancing.cross_zone.enabled": "use_load_balancer_configuration"}),
    ("healthcheck-protocol", "http", "nlb", lambda c: (_hc(c).protocol, _hc(c).path, _hc(c).timeout), ("HTTP", "/", 6)),
    ("healthcheck-protocol", "ssl", "clb", lambda c: (_hc(c).protocol, _hc(c).path), ("SSL", "")),
    ("healthcheck-port", "8080", "nlb", lambda c: _hc(c).port, "8080"),
    ("healthcheck-port", "traffic-port", "nlb", lambda c: _hc(c).port, "traffic-port"),
    ("healthcheck-path", "/ready", "nlb", lambda c: _hc(c).path, ""),  # a path only matters for HTTP(S)
    ("healthcheck-healthy-threshold", "5", "nlb", lambda c: _hc(c).healthy, 5),
    ("healthcheck-unhealthy-threshold", "+10", "clb", lambda c: _hc(c).unhealthy, 10),
    ("healthcheck-timeout", "20", "nlb", lambda c: _hc(c).timeout, 20),
    ("healthcheck-interval", "5", "clb", lambda c: (_hc(c).interval, _hc(c).timeout), (5, 4)),  # default lowered
    ("healthcheck-interval", "300", "nlb", lambda c: _hc(c).interval, 300),
]  # fmt: skip


@pytest.mark.parametrize(("suffix", "value", "lb", "get", "expected"), VALID, ids=[f"{c[0]}={c[1]!r}" for c in VALID])
def test_valid_values_become_typed_settings(suffix, value, lb, get, expected):
    assert get(parse({P + suffix: value}, lb)) == expected


def test_source_ranges_annotation_and_spec_field():
    ann = {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.1/8, 192.168.0.0/16,10.0.0.0/8"}
    assert parse(ann).source_range_cidrs == ("10.0.0.0/8", "192.168.0.0/16")  # host bits masked, duplicate dropped
    cfg = parse(ann, loadBalancerSourceRanges=["203.0.113.0/24", " 2001:db8::/32 "])
    assert cfg.source_range_cidrs == ("203.0.113.0/24", "2001:db8::/32")  # the spec field wins, as upstream
    assert "service.beta.kubernetes.io/load-balancer-source-ranges" in cfg.ignored_annotations


def test_private_ipv4_addresses_on_an_internal_nlb():
    cfg = parse({P + "internal": "true", P + "private-ipv4-addresses": "10.0.1.10, 10.0.2.10", P + "subnets": SUBNETS})
    assert cfg.private_ipv4_addresses == ("10.0.1.10", "10.0.2.10")


def test_eip_allocations_with_matching_subnets():
    cfg = parse({P + "eip-allocations": EIPS, P + "subnets": SUBNETS})
    assert len(cfg.eip_allocations) == len(cfg.subnets) == 2


def test_access_logs_enabled_with_a_bucket():
    cfg = parse({P + "access-log-enabled": "true", P + "access-log-s3-bucket-name": "logs"}, "clb")
    assert cfg.access_log == AccessLog(True, 60, "logs", "")


# -- invalid values -> InvalidAnnotation naming annotation and value --------------------------------------------------
INVALID = [
    ("type", "alb", "must be one of"),
    ("scheme", "public", "must be one of"),
    ("subnets", "subnet-xyz", "not an ID of the form subnet-"),
    ("subnets", "subnet-89abcdef,subnet-89abcdef", "listed twice"),
    ("eip-allocations", "eip-123", "not an ID of the form eipalloc-"),
    ("private-ipv4-addresses", "10.0.0.300", "not an IPv4 address"),
    ("ip-address-type", "ipv6", "must be one of"),
    ("ssl-cert", "my-cert", "not an ACM or IAM certificate ARN"),
    ("ssl-ports", "0", "between 1 and 65535"),
    ("ssl-negotiation-policy", "bad policy!", "not a security policy name"),
    ("backend-protocol", "grpc", "must be one of"),
    ("proxy-protocol", "true", "only value supported is '*'"),
    ("access-log-enabled", "yes", "not a boolean"),
    ("access-log-emit-interval", "10", "one of 5, 60"),
    ("access-log-s3-bucket-name", "Bad_Bucket", "not an S3 bucket name"),
    ("access-log-s3-bucket-prefix", "x/AWSLogs", "without AWSLogs"),
    ("cross-zone-load-balancing-enabled", "enabled", "not a boolean"),
    ("additional-resource-tags", "aws:owner=me", "aws: prefix"),
    ("additional-resource-tags", "kubernetes.io/cluster/other=owned", "ownership tags"),
    ("additional-resource-tags", "=v", "has no key"),
    ("additional-resource-tags", "a=1,a=2", "repeats a key"),
    ("additional-resource-tags", "k=v#", "not an AWS tag"),
    ("security-groups", "default", "not an ID of the form sg-"),
    ("security-groups", ",".join(f"sg-{i:08x}" for i in range(6)), "at most 5"),
    ("target-node-labels", "bad key=1", "not a label key"),
    ("target-node-labels", "role=has space", "not a label value"),
    ("target-group-attributes", "stickiness.enabled=maybe", "not a boolean"),
    ("target-group-attributes", "deregistration_delay.timeout_seconds=-1", "between 0 and 3600"),
    ("target-group-attributes", "slow_start.duration_seconds=30", "not a supported target-group attribute"),
    ("healthcheck-protocol", "SSL", "must be one of"),  # NLB health checks have no SSL
    ("healthcheck-protocol", "udp", "must be one of"),
    ("healthcheck-port", "http", "not an integer"),
    ("healthcheck-port", "70000", "between 1 and 65535"),
    ("healthcheck-path", "healthz", "not a path"),
    ("healthcheck-healthy-threshold", "1", "between 2 and 10"),
    ("healthcheck-unhealthy-threshold", "3.0", "not an integer"),
    ("healthcheck-timeout", "1_0", "not an integer"),
    ("healthcheck-timeout", "121", "between 2 and 120"),
    ("healthcheck-interval", "99999999999999999999", "between 5 and 300"),
]
CLB_INVALID = [
    ("connection-draining-enabled", "on", "not a boolean"),
    ("connection-draining-timeout", "0", "between 1 and 3600"),
    ("connection-idle-timeout", "4001", "between 1 and 4000"),
    ("healthcheck-timeout", "61", "between 2 and 60"),
    ("extra-security-groups", "sg-1", "not an ID of the form sg-"),
]


@pytest.mark.parametrize(
    ("suffix", "value", "lb", "reason"),
    [(*c[:2], "nlb", c[2]) for c in INVALID] + [(*c[:2], "clb", c[2]) for c in CLB_INVALID],
    ids=[f"{c[0]}={c[1]!r}" for c in INVALID + CLB_INVALID],
)
def test_invalid_values_name_the_annotation_and_the_value(suffix, value, lb, reason):
    ann = {P + suffix: value}
    if suffix == "type":
        ann = {}
    errors = problems(ann, value if suffix == "type" else lb)
    assert len(errors) == 1, errors
    err = errors[0]
    assert isinstance(err, a.InvalidAnnotation)
    assert err.annotation == P + suffix and err.value == value
    assert reason in err.reason
    assert P + suffix in str(err) and repr(value)[1:-1] in str(err)


def test_source_ranges_errors_name_the_field_or_annotation():
    err = problems(loadBalancerSourceRanges=["10.0.0.0/8", "10.0.0.1"])[0]
    assert isinstance(err, a.InvalidAnnotation) and err.annotation == "spec.loadBalancerSourceRanges"
    assert "10.0.0.1" in str(err) and "not a CIDR" in str(err)
    err = problems({"service.beta.kubernetes.io/load-balancer-source-ranges": "0.0.0.0/33"})[0]
    assert "service.beta.kubernetes.io/load-balancer-source-ranges" in str(err) and "not a valid CIDR" in str(err)


def test_long_values_are_truncated_in_the_message():
    value = "x" * 5000
    err = annotation_error("backend-protocol", value)
    assert err.value == value and "(5000 characters)" in str(err) and len(str(err)) < 400


def test_all_problems_are_reported_together():
    with pytest.raises(a.ServiceConfigErrors) as info:
        parse(
            {
                P + "healthcheck-interval": "abc",
                P + "target-group-attributes": "foo=1",
                P + "internal": "true",
                P + "scheme": "internet-facing",
            },
            sessionAffinity="ClientIP",
        )
    message = str(info.value)
    assert message.startswith("4 problems: ")
    for needle in ("healthcheck-interval=\"abc\"", "target-group-attributes=\"foo=1\"", "aws-load-balancer-scheme",
                   "unsupported load balancer affinity"):  # fmt: skip
        assert needle in message
    assert len(info.value.errors) == 4


def test_non_string_annotation_values_are_refused_not_crashed_on():
    svc = service(annotations={P + "type": "nlb", P + "healthcheck-interval": 10})
    with pytest.raises(a.InvalidAnnotation, match=r"healthcheck-interval=.*strings"):
        a.parse_load_balancer_config(svc)


# -- defaults ---------------------------------------------------------------------------------------------------------
def test_defaults_of_a_plain_nlb_service():
    cfg = parse()
    assert (cfg.lb_type, cfg.scheme, cfg.subnets, cfg.ssl_ports, cfg.backend_protocol) == (
        "nlb", "internet-facing", (), "*", "tcp"
    )  # fmt: skip
    assert cfg.health_check == HealthCheck("TCP", "traffic-port", "", 3, 3, 30, 10)
    assert cfg.source_range_cidrs == ("0.0.0.0/0",)
    assert [(ls.port, ls.protocol, ls.target_protocol, ls.node_port) for ls in cfg.listeners] == [
        (80, "TCP", "TCP", 30080),
        (443, "TCP", "TCP", 30443),
    ]
    assert cfg.external_traffic_policy == "Cluster" and cfg.health_check_node_port is None
    assert cfg.unknown_annotations == cfg.ignored_annotations == ()


def test_defaults_of_a_plain_clb_service():
    cfg = parse(lb="clb")
    assert cfg.health_check == HealthCheck("TCP", "traffic-port", "", 2, 6, 10, 5)
    assert cfg.connection_draining == ConnectionDraining(False, 300) and cfg.idle_timeout == 60
    assert cfg.access_log == AccessLog() and not cfg.cross_zone


@pytest.mark.parametrize(
    ("lb", "expected"),
    [
        ("nlb", HealthCheck("HTTP", "31999", "/healthz", 2, 2, 10, 6)),
        ("clb", HealthCheck("HTTP", "31999", "/healthz", 2, 6, 10, 5)),
    ],
)
def test_local_policy_checks_kube_proxy_healthz(lb, expected):
    cfg = parse(lb=lb, externalTrafficPolicy="Local", healthCheckNodePort=31999)
    assert cfg.health_check == expected
    assert (cfg.external_traffic_policy, cfg.health_check_node_port) == ("Local", 31999)


def test_local_policy_health_check_can_be_overridden():
    ann = {P + "healthcheck-path": "/ready", P + "healthcheck-interval": "30"}
    hc = parse(ann, externalTrafficPolicy="Local", healthCheckNodePort=31999).health_check
    assert (hc.protocol, hc.port, hc.path, hc.interval) == ("HTTP", "31999", "/ready", 30)
    # Upstream CLB keeps healthCheckNodePort for "traffic-port"; upstream NLB takes it literally.
    ann = {P + "healthcheck-port": "traffic-port"}
    assert parse(ann, "clb", externalTrafficPolicy="Local", healthCheckNodePort=31999).health_check.port == "31999"
    assert parse(ann, "nlb", externalTrafficPolicy="Local", healthCheckNodePort=31999).health_check.port == (
        "traffic-port"
    )


def test_clb_health_check_follows_backend_protocol():
    assert parse({P + "backend-protocol": "https"}, "clb").health_check.protocol == "SSL"
    assert parse({P + "backend-protocol": "http"}, "clb").health_check.protocol == "TCP"


def test_dualstack_default_source_ranges_cover_both_families():
    cfg = parse({P + "ip-address-type": "dualstack"})
    assert cfg.source_ranges == (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


def test_default_lb_type_is_configurable_and_type_annotation_wins():
    assert a.parse_load_balancer_config(service()).lb_type == "clb"  # cloud-provider-aws's default
    assert a.parse_load_balancer_config(service(), default_lb_type="nlb").lb_type == "nlb"
    svc = service(annotations={P + "type": " NLB "})
    assert a.parse_load_balancer_config(svc, default_lb_type="clb").lb_type == "nlb"
    assert a.parse_load_balancer_config(service(annotations={P + "type": "clb"}), "nlb").lb_type == "clb"
    with pytest.raises(ValueError, match="default_lb_type"):
        a.parse_load_balancer_config(service(), default_lb_type="alb")


@pytest.mark.parametrize("value", ["external", "nlb-ip", "External"])
def test_lbc_services_are_implemented_elsewhere(value):
    with pytest.raises(ImplementedElsewhere):
        a.parse_load_balancer_config(service(annotations={P + "type": value, P + "healthcheck-port": "bad"}))


def test_annotations_for_the_other_lb_type_and_unknown_ones_are_ignored():
    ann = {
        P + "connection-idle-timeout": "not-a-number",  # CLB only: upstream ignores it on an NLB
        P + "target-group-attributes": "junk",  # NLB only
        P + "alpn-policy": "HTTP2Preferred",  # an LBC annotation we do not implement
        P + "healthcheck-intervall": "10",  # a typo
    }
    nlb = parse({k: v for k, v in ann.items() if "target-group" not in k})
    assert nlb.ignored_annotations == (P + "connection-idle-timeout",)
    assert nlb.unknown_annotations == (P + "alpn-policy", P + "healthcheck-intervall")
    assert nlb.idle_timeout == 60
    clb = parse({k: v for k, v in ann.items() if "idle" not in k}, "clb")
    assert clb.ignored_annotations == (P + "target-group-attributes",) and clb.target_group_attributes == {}


def test_blank_values_count_as_absent():
    cfg = parse({P + "healthcheck-interval": " ", P + "subnets": "", P + "scheme": ""})
    assert cfg.health_check.interval == 30 and cfg.subnets == () and cfg.scheme == "internet-facing"


# -- listeners --------------------------------------------------------------------------------------------------------
def test_nlb_tls_listeners_on_ssl_ports_with_tls_targets_for_backend_ssl():
    ann = {P + "ssl-cert": CERT, P + "ssl-ports": "p443", P + "backend-protocol": "ssl",
           P + "ssl-negotiation-policy": "ELBSecurityPolicy-2016-08"}  # fmt: skip
    plain, tls = parse(ann).listeners
    assert plain == Listener(80, "TCP", "TCP", 30080, ("p80",))
    assert tls == Listener(443, "TLS", "TLS", 30443, ("p443",), (CERT,), "ELBSecurityPolicy-2016-08")
    assert tls.secure and not plain.secure


def test_nlb_without_ssl_ports_puts_the_certificate_on_every_tcp_port():
    assert [ls.protocol for ls in parse({P + "ssl-cert": CERT}).listeners] == ["TLS", "TLS"]


def test_nlb_tcp_and_udp_on_one_port_become_tcp_udp():
    ports = [
        {"name": "dns-tcp", "protocol": "TCP", "port": 53, "nodePort": 30053},
        {"name": "dns-udp", "protocol": "UDP", "port": 53, "nodePort": 30053},
        {"name": "syslog", "protocol": "UDP", "port": 514, "nodePort": 30514},
        {"name": "web", "protocol": "TCP", "port": 443, "nodePort": 30443},
    ]
    svc = service(annotations={P + "type": "nlb", P + "ssl-cert": CERT})
    svc["spec"]["ports"] = ports
    cfg = a.parse_load_balancer_config(svc)
    assert [(ls.port, ls.protocol, ls.node_port, ls.port_names) for ls in cfg.listeners] == [
        (53, "TCP_UDP", 30053, ("dns-tcp", "dns-udp")),
        (514, "UDP", 30514, ("syslog",)),
        (443, "TLS", 30443, ("web",)),  # `*` puts TLS only where it can go
    ]
    svc["metadata"]["annotations"][P + "ssl-ports"] = "53,web"
    with pytest.raises(InvalidServiceConfig) as info:
        a.parse_load_balancer_config(svc)
    err = a.errors_of(info.value)
    assert len(err) == 1 and "port 53 is TCP_UDP; TLS needs a TCP-only port" in str(err[0])
    svc["spec"]["ports"][1]["nodePort"] = 30054
    with pytest.raises(InvalidServiceConfig, match="one TCP_UDP listener needs one nodePort"):
        a.parse_load_balancer_config(svc)


@pytest.mark.parametrize(
    ("backend", "with_cert", "expected"),
    [
        ("tcp", True, ("SSL", "TCP")),
        ("ssl", True, ("SSL", "SSL")),
        ("http", True, ("HTTPS", "HTTP")),
        ("https", True, ("HTTPS", "HTTPS")),
        ("http", False, ("HTTP", "HTTP")),
        ("https", False, ("TCP", "TCP")),  # upstream: without a certificate only http changes the listener
        ("tcp", False, ("TCP", "TCP")),
    ],
)
def test_clb_listener_protocols_follow_upstream_build_listener(backend, with_cert, expected):
    ann = {P + "backend-protocol": backend, P + "ssl-ports": "443"}
    if with_cert:
        ann[P + "ssl-cert"] = CERT
    plain, secure = parse(ann, "clb").listeners
    assert (secure.protocol, secure.target_protocol) == expected
    assert (plain.protocol, plain.target_protocol) == (("HTTP", "HTTP") if backend == "http" else ("TCP", "TCP"))
    assert secure.certificates == ((CERT,) if with_cert else ())


# -- hard rules -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "lb", "message"),
    [
        ({"sessionAffinity": "ClientIP"}, "nlb", 'unsupported load balancer affinity: "ClientIP"'),
        ({"loadBalancerIP": "1.2.3.4"}, "clb", "LoadBalancerIP cannot be specified for AWS ELB"),
        ({"ports": []}, "nlb", "requested load balancer with no ports"),
    ],
)
def test_hard_rules_on_the_spec(spec, lb, message):
    errors = problems(lb=lb, **spec)
    assert [str(e) for e in errors] == [message]


def _with_ports(lb: str, *ports: dict[str, Any]) -> dict[str, Any]:
    svc = service(annotations={P + "type": lb})
    svc["spec"]["ports"] = list(ports)
    return svc


TCP80 = {"name": "a", "protocol": "TCP", "port": 80, "nodePort": 30080}
UDP53 = {"name": "b", "protocol": "UDP", "port": 53, "nodePort": 30053}
SCTP = {"name": "c", "protocol": "SCTP", "port": 99, "nodePort": 30099}


@pytest.mark.parametrize(
    ("svc", "message"),
    [
        (_with_ports("clb", UDP53), "Protocol UDP not supported by LoadBalancer"),
        (_with_ports("clb", TCP80, UDP53), "mixed protocol is not supported for LoadBalancer"),
        (_with_ports("nlb", TCP80, SCTP), 'Protocol "SCTP" not supported by LoadBalancer'),
        (_with_ports("nlb", TCP80, {**TCP80, "name": "dup"}), "port 80/TCP is listed twice"),
        (_with_ports("nlb", {**TCP80, "nodePort": None}), "has no nodePort"),
        (_with_ports("nlb", {**TCP80, "port": "eighty"}), "invalid port"),
    ],
)
def test_hard_rules_on_ports(svc, message):
    with pytest.raises(InvalidServiceConfig, match=message):
        a.parse_load_balancer_config(svc)


def test_nlb_allows_mixed_protocols_on_different_ports():
    cfg = a.parse_load_balancer_config(_with_ports("nlb", TCP80, UDP53))
    assert [ls.protocol for ls in cfg.listeners] == ["TCP", "UDP"]


def test_an_invalid_type_does_not_add_guessed_protocol_errors():
    svc = _with_ports("nbl", UDP53)
    with pytest.raises(InvalidServiceConfig) as info:
        a.parse_load_balancer_config(svc)
    errors = a.errors_of(info.value)
    assert len(errors) == 1 and "aws-load-balancer-type" in str(errors[0])


# -- cross-field checks -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ann", "lb", "spec", "blamed", "reason"),
    [
        ({"internal": "true", "scheme": "internet-facing"}, "nlb", {}, "scheme", "contradicts"),
        ({"internal": "false", "scheme": "internal"}, "clb", {}, "scheme", "contradicts"),
        ({"eip-allocations": EIPS, "internal": "true"}, "nlb", {}, "eip-allocations", "needs an internet-facing"),
        ({"eip-allocations": EIPS, "subnets": "subnet-89abcdef"}, "nlb", {}, "eip-allocations", "2 entries for 1"),
        ({"private-ipv4-addresses": "10.0.0.5"}, "nlb", {}, "private-ipv4-addresses", "needs an internal"),
        ({"private-ipv4-addresses": "10.0.0.5", "scheme": "internal", "subnets": SUBNETS}, "nlb", {},
         "private-ipv4-addresses", "1 entries for 2"),
        ({"ssl-ports": "8443"}, "nlb", {}, "ssl-ports", "8443: no such port in the Service (ports: 80 (p80)"),
        ({"ssl-ports": "https"}, "clb", {}, "ssl-ports", "https: no such port"),
        ({"ssl-cert": f"{CERT},{CERT2}"}, "clb", {}, "ssl-cert", "takes one certificate"),
        ({"healthcheck-timeout": "30"}, "nlb", {}, "healthcheck-timeout", "smaller than the health-check interval"),
        ({"healthcheck-timeout": "10", "healthcheck-interval": "10"}, "clb", {}, "healthcheck-timeout", "smaller"),
        ({"access-log-enabled": "true"}, "nlb", {}, "access-log-enabled", "need"),
        ({"proxy-protocol": "*", "target-group-attributes": "proxy_protocol_v2.enabled=false"}, "nlb", {},
         "target-group-attributes", "contradicts"),
        ({"security-groups": "sg-00000001,sg-00000002,sg-00000003", "extra-security-groups":
          "sg-00000004,sg-00000005,sg-00000006"}, "clb", {}, "extra-security-groups", "more than 5"),
        ({"extra-security-groups": "sg-00000004,sg-00000005,sg-00000006,sg-00000007"}, "clb", {},
         "extra-security-groups", "__ok__"),
    ],
)  # fmt: skip
def test_cross_field_checks(ann, lb, spec, blamed, reason):
    full = {P + k: v for k, v in ann.items()}
    if reason == "__ok__":  # 4 extra groups + the managed one is exactly the AWS limit
        parse(full, lb, **spec)
        return
    errors = problems(full, lb, **spec)
    assert len(errors) == 1, errors
    assert isinstance(errors[0], a.InvalidAnnotation) and errors[0].annotation == P + blamed
    assert reason in errors[0].reason


def test_udp_ports_cannot_disable_client_ip_preservation():
    svc = _with_ports("nlb", TCP80, UDP53)
    svc["metadata"]["annotations"][P + "target-group-attributes"] = "preserve_client_ip.enabled=false"
    with pytest.raises(a.InvalidAnnotation, match="always preserve the client IP"):
        a.parse_load_balancer_config(svc)


def test_validate_against_discovered_subnets():
    eips = parse({P + "eip-allocations": EIPS})
    a.validate_against_subnets(eips, ["subnet-1", "subnet-2"])
    with pytest.raises(a.InvalidAnnotation, match=r"eip-allocations=.*exactly one allocation for each of 3 subnets"):
        a.validate_against_subnets(eips, ["subnet-1", "subnet-2", "subnet-3"])
    ips = parse({P + "scheme": "internal", P + "private-ipv4-addresses": "10.0.1.5,10.0.2.5"})
    cidrs = {"subnet-1": "10.0.1.0/24", "subnet-2": "10.0.2.0/24"}
    a.validate_against_subnets(ips, ["subnet-1", "subnet-2"], cidrs)
    with pytest.raises(a.InvalidAnnotation, match=r"10\.0\.2\.5 is not in a subnet of its own"):
        a.validate_against_subnets(ips, ["subnet-1", "subnet-2"], {**cidrs, "subnet-2": "10.0.3.0/24"})
    with pytest.raises(a.InvalidAnnotation, match="exactly one address"):
        a.validate_against_subnets(ips, ["subnet-1"])


# -- integration points -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, nlb_model.HealthCheck("TCP", "traffic-port", "", 3, 3, 30, 10)),
        (
            {"externalTrafficPolicy": "Local", "healthCheckNodePort": 31999},
            nlb_model.HealthCheck("HTTP", "31999", "/healthz", 2, 2, 10, 6),
        ),
    ],
)
def test_nlb_health_check_defaults_convert_to_the_driver_type(spec, expected):
    svc = service(annotations={P + "type": "nlb"}, **spec)
    hc = a.parse_load_balancer_config(svc).health_check
    assert nlb_model.HealthCheck(**dataclasses.asdict(hc)) == expected


@pytest.mark.parametrize(
    ("value", "scheme"),
    [
        (None, "internet-facing"),
        ("true", "internal"),
        ("false", "internet-facing"),
        ("0.0.0.0/0", "internal"),
        ("anything", "internal"),
    ],
)
def test_internal_annotation_like_cloud_provider_aws(value, scheme):
    svc = service(annotations={P + "type": "nlb", **({P + "internal": value} if value is not None else {})})
    assert a.parse_load_balancer_config(svc).scheme == scheme


def test_config_helpers():
    cfg = parse(
        {
            P + "proxy-protocol": "*",
            P + "target-group-attributes": "deregistration_delay.timeout_seconds=0",
            P + "target-node-labels": "role=lb",
        }
    )
    assert cfg.effective_target_group_attributes() == {
        "deregistration_delay.timeout_seconds": "0",
        "proxy_protocol_v2.enabled": "true",
    }
    assert cfg.selects_node({"role": "lb", "zone": "a"}) and not cfg.selects_node({"role": "web"})
    assert dataclasses.asdict(cfg)["health_check"]["interval"] == 30  # plain data all the way down


# -- the table and its reference --------------------------------------------------------------------------------------
def test_every_row_feeds_a_config_field_or_a_combined_part():
    config_fields = {f.name for f in dataclasses.fields(LoadBalancerConfig)}
    value_fields = [f.name for f in dataclasses.fields(AnnotationValues)]
    rows = a.TABLE
    assert rows[0].annotation == a.TYPE_ANNOTATION  # parsed first: it decides which rows apply
    assert rows[0].field in config_fields
    assert len({r.annotation for r in rows}) == len(rows)
    # One typed field per other row, and no field without its row: the build phase reads them by attribute.
    assert [row.field for row in rows[1:]] == value_fields
    for row in rows:
        assert row.types and row.types <= {"clb", "nlb"}


def test_docs_annotations_md_is_the_generated_reference():
    assert (ROOT / "docs" / "annotations.md").read_text() == docs.reference_markdown(), (
        "regenerate: PYTHONPATH=layers/ccm python -m ccm.aws.lbconfig.docs --markdown > docs/annotations.md"
    )


def test_markdown_cli():
    out = subprocess.run(
        [sys.executable, "-m", "ccm.aws.lbconfig.docs", "--markdown"],
        cwd=ROOT / "layers" / "ccm",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == docs.reference_markdown()
    assert docs.main([]) == 2


# -- property: random annotations -------------------------------------------------------------------------------------
_INTERESTING = [
    "", " ", "*", "true", "false", "False", "0", "1", "-1", "65536", "1e3", "nlb", "clb", "external", "NLB",
    "internal", "internet-facing", "dualstack", "ipv4", "tcp", "ssl", "http", "https", "HTTP", "TCP", "SSL", "UDP",
    "traffic-port", "/", "/healthz", "0.0.0.0/0", "::/0", "10.0.0.0/8,2001:db8::/32", "10.0.0.1", "10.0.0.300/8",
    SUBNETS, "subnet-0123456789abcdef0", "public-a,private-b", EIPS, "sg-89abcdef", CERT, f"{CERT},{CERT2}",
    "443", "80,443", "p80", "https,8443", "k=v,k2=v2", "aws:x=1", "=", ",", ",,", "a=b=c",
    "preserve_client_ip.enabled=false", "proxy_protocol_v2.enabled=true", "deregistration_delay.timeout_seconds=30",
    "stickiness.type=source_ip", "unknown.attr=1", "10.0.1.5,10.0.2.5", "x" * 300,
]  # fmt: skip
_values = st.one_of(
    st.sampled_from(_INTERESTING),
    st.text(max_size=40),
    st.integers(-(10**6), 10**6).map(str),
    st.builds(lambda ip, n: f"{ip}/{n}", st.ip_addresses(), st.integers(0, 140)),
    st.lists(st.sampled_from(_INTERESTING[:40]), max_size=4).map(",".join),
)
_keys = st.one_of(
    st.sampled_from(sorted(a.ANNOTATIONS - {a.TYPE_ANNOTATION})),
    st.text("abcdefghijklmnopqrstuvwxyz-.", min_size=1, max_size=20).map(lambda s: a.PREFIX + s),
)
_annotations = st.dictionaries(_keys, _values, max_size=8)
_types = st.sampled_from([None, "nlb", "clb"])
_specs = st.sampled_from(
    [{}, {"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000}, {"loadBalancerSourceRanges": []}]
)


def _check_outcome(svc: dict[str, Any], default: str) -> None:
    annotations = svc["metadata"]["annotations"]
    try:
        cfg = a.parse_load_balancer_config(svc, default_lb_type=default)
    except ImplementedElsewhere:
        assert annotations.get(a.TYPE_ANNOTATION, "").strip().lower() in ("external", "nlb-ip")
        return
    except InvalidServiceConfig as err:
        for problem in a.errors_of(err):
            # The spec is valid, so every problem is an annotation's, named in the message and present in the input.
            assert isinstance(problem, a.InvalidAnnotation), problem
            assert problem.annotation in annotations, problem
            assert problem.annotation in str(err)
        return
    assert cfg.lb_type in ("clb", "nlb") and cfg.listeners and cfg.source_ranges
    assert cfg.health_check.timeout < cfg.health_check.interval
    hash(cfg.health_check)


@settings(max_examples=300, deadline=None, suppress_health_check=[Hypothesis.too_slow])
@given(annotations=_annotations, lb_type=_types, spec=_specs, default=st.sampled_from(["clb", "nlb"]))
def test_random_annotations_yield_a_config_or_invalid_service_config(annotations, lb_type, spec, default):
    if lb_type is not None:
        annotations = {**annotations, a.TYPE_ANNOTATION: lb_type}
    _check_outcome(service(annotations=annotations, **spec), default)


@settings(max_examples=50, deadline=None)
@given(value=st.text(max_size=30), annotations=_annotations)
def test_random_type_values_never_crash(value, annotations):
    _check_outcome(service(annotations={**annotations, a.TYPE_ANNOTATION: value}), "clb")


_port = st.fixed_dictionaries(
    {
        "protocol": st.sampled_from(["TCP", "UDP", "SCTP", "tcp", None, 7]),
        "port": st.one_of(st.integers(-1, 70000), st.just("80"), st.none()),
        "nodePort": st.one_of(st.integers(30000, 30003), st.none(), st.just("x")),
        "name": st.sampled_from(["", "http", "https", "p80"]),
    }
)


@settings(max_examples=100, deadline=None)
@given(
    ports=st.one_of(st.lists(_port, max_size=4), st.none(), st.just("not-a-list")),
    annotations=_annotations,
    affinity=st.sampled_from([None, "None", "ClientIP"]),
    lb_ip=st.sampled_from([None, "", "1.2.3.4"]),
    ranges=st.one_of(st.none(), st.lists(_values, max_size=3)),
)
def test_random_specs_only_ever_raise_invalid_service_config(ports, annotations, affinity, lb_ip, ranges):
    svc = service(annotations=annotations)
    svc["spec"].update(ports=ports, sessionAffinity=affinity, loadBalancerIP=lb_ip, loadBalancerSourceRanges=ranges)
    with contextlib.suppress(InvalidServiceConfig, ImplementedElsewhere):
        a.parse_load_balancer_config(svc, default_lb_type="nlb")


def test_prefix_lists_are_the_only_sources_without_ranges_and_join_given_ranges() -> None:
    only = parse(ann={P + "security-group-prefix-lists": "pl-0123abcd,pl-0123456789abcdef0"})
    assert only.prefix_lists == ("pl-0123abcd", "pl-0123456789abcdef0")
    assert only.source_ranges == ()  # not 0.0.0.0/0: reachable only from the lists (as the LBC)
    both = parse(ann={P + "security-group-prefix-lists": "pl-0123abcd"}, loadBalancerSourceRanges=["10.0.0.0/8"])
    assert both.source_range_cidrs == ("10.0.0.0/8",) and both.prefix_lists == ("pl-0123abcd",)
    assert parse().prefix_lists == () and parse().source_range_cidrs == ("0.0.0.0/0",)


def test_a_malformed_prefix_list_id_is_refused() -> None:
    with pytest.raises(InvalidServiceConfig, match="security-group-prefix-lists"):
        parse(ann={P + "security-group-prefix-lists": "sg-0123abcd"})
