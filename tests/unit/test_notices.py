"""ccm.aws.lbconfig.notices: what the annotations mean here that the upstream controllers read differently."""

from __future__ import annotations

import io
import json
from typing import Any

from ccm.aws.lbconfig import PREFIX, LbType, parse_load_balancer_config
from ccm.aws.lbconfig.exposure import HIGH_RISK_PORTS
from ccm.aws.lbconfig.exposure import REASON as EXPOSURE
from ccm.aws.lbconfig.notices import DIFFERS, IGNORED, SCHEME_DEFAULT, annotation_notices, main


def notices(annotations: dict[str, str], lb_type: LbType = "nlb", **spec: Any) -> dict[str, str]:
    svc = {
        "metadata": {"name": "web", "namespace": "default", "uid": "u", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "nodePort": 30080}], **spec},
    }
    config = parse_load_balancer_config(svc, default_lb_type=lb_type)
    return {w.reason: w.message for w in annotation_notices(config, annotations)}


def test_a_plain_service_gets_no_notice():
    assert notices({}) == {}
    assert notices({}, "clb") == {}
    assert notices({PREFIX + "healthcheck-interval": "10"}) == {}


def test_nlb_attributes_upstream_reads_for_classic_elbs_only_and_the_scheme_default():
    found = notices(
        {
            PREFIX + "access-log-enabled": "true",
            PREFIX + "access-log-s3-bucket-name": "logs-bucket",
            PREFIX + "access-log-emit-interval": "5",
            PREFIX + "cross-zone-load-balancing-enabled": "true",
        }
    )
    assert found[DIFFERS].startswith(SCHEME_DEFAULT + "; ")
    assert f"{PREFIX}access-log-enabled: applied to this NLB as its access_logs.s3.* attributes" in found[DIFFERS]
    assert f"{PREFIX}cross-zone-load-balancing-enabled: applied to this NLB" in found[DIFFERS]
    assert found[IGNORED] == f"{PREFIX}access-log-emit-interval: Classic ELBs only, no NLB equivalent; ignored"


def test_an_explicit_scheme_or_internal_is_not_told_the_default():
    lbc = {PREFIX + "alpn-policy": "HTTP2Preferred"}
    assert SCHEME_DEFAULT not in notices({**lbc, PREFIX + "scheme": "internet-facing"}).get(DIFFERS, "")
    assert SCHEME_DEFAULT not in notices({**lbc, PREFIX + "internal": "true"}).get(DIFFERS, "")
    assert notices({**lbc, PREFIX + "internal": ""})[DIFFERS] == SCHEME_DEFAULT  # empty counts as absent
    assert "TLS listeners get no ALPN policy" in notices(lbc)[IGNORED]


def test_the_source_ranges_annotation_loses_to_the_spec_field():
    found = notices(
        {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8"},
        "clb",
        loadBalancerSourceRanges=["192.168.0.0/16"],
    )
    assert found == {
        IGNORED: "service.beta.kubernetes.io/load-balancer-source-ranges: ignored, spec.loadBalancerSourceRanges wins"
    }


def test_the_pre_switch_listing_names_each_services_warnings(capsys: Any, monkeypatch: Any) -> None:
    items = {
        "items": [
            {
                "metadata": {"name": "plain", "namespace": "a", "uid": "1"},
                "spec": {"type": "LoadBalancer", "ports": [{"name": "h", "port": 80, "nodePort": 30080}]},
            },
            {"metadata": {"name": "ip", "namespace": "a", "uid": "2"}, "spec": {"type": "ClusterIP"}},
            {
                "metadata": {"name": "lbc", "namespace": "b", "uid": "3", "annotations": {PREFIX + "name": "x"}},
                "spec": {"type": "LoadBalancer", "ports": [{"name": "h", "port": 80, "nodePort": 30080}]},
            },
            {
                "metadata": {"name": "bad", "namespace": "b", "uid": "4", "annotations": {PREFIX + "type": "elb"}},
                "spec": {"type": "LoadBalancer"},
            },
        ]
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(items)))
    assert main(["clb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:2] for line in lines] == [
        ["b/lbc", "AnnotationIgnored"],
        ["b/bad", "SyncLoadBalancerFailed"],
    ]
    assert f"{PREFIX}name: only the AWS Load Balancer Controller understands it" in lines[0]


# Security Hub EC2.19's rule, as data: a rule from 0.0.0.0/0 or ::/0 to one of these ports is a finding.
EC2_19_PORTS = {20, 21, 22, 23, 25, 110, 135, 143, 445, 1433, 1434, 3000, 3306, 3389, 4333, 5000, 5432, 5500, 5601,
                8080, 8088, 8888, 9200, 9300}  # fmt: skip


def test_a_high_risk_port_open_to_the_internet_is_said_before_the_scanner_says_it():
    ssh = [{"name": "ssh", "port": 22, "nodePort": 30022}, {"name": "http", "port": 80, "nodePort": 30080}]
    found = notices({}, ports=ssh)
    assert found == {
        EXPOSURE: "listener port 22/TCP is open to 0.0.0.0/0: Security Hub EC2.19 (high-risk ports open to the "
        "internet) will flag this load balancer's security group; set spec.loadBalancerSourceRanges to the "
        "clients that need it"
    }
    dual = notices({PREFIX + "ip-address-type": "dualstack"}, ports=[{"name": "pg", "port": 5432, "nodePort": 30543}])
    assert "5432/TCP is open to 0.0.0.0/0 and ::/0" in dual[EXPOSURE]
    assert notices({}, "clb", ports=[{"name": "alt", "port": 8080, "nodePort": 30808}])[EXPOSURE].startswith(
        "listener port 8080/TCP"
    )


def test_web_ports_or_narrowed_ranges_say_nothing():
    assert EXPOSURE not in notices({}, ports=[{"name": "https", "port": 443, "nodePort": 30443}])
    ssh = [{"name": "ssh", "port": 22, "nodePort": 30022}]
    assert EXPOSURE not in notices({}, ports=ssh, loadBalancerSourceRanges=["203.0.113.0/24"])
    assert EXPOSURE not in notices({}, ports=ssh, loadBalancerSourceRanges=["0.0.0.0/1", "128.0.0.0/1"])


def test_the_high_risk_ports_are_ec2_19s():
    assert HIGH_RISK_PORTS == EC2_19_PORTS
