"""ccm.aws.lbconfig.notices: what the annotations mean here that the upstream controllers read differently."""

from __future__ import annotations

import io
import json
from typing import Any

from ccm.aws.lbconfig import PREFIX, LbType, parse_load_balancer_config
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
