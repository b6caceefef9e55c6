"""The one rule both drivers follow for a scheme the live load balancer does not have (ccm.aws.fixed_settings)."""

from __future__ import annotations

import pytest

from ccm.aws.fixed_settings import scheme_kept
from ccm.aws.lbconfig import parse_load_balancer_config
from tests.factories import service

P = "service.beta.kubernetes.io/aws-load-balancer-"


@pytest.mark.parametrize(("lb_type", "kind"), [("nlb", "NLB"), ("clb", "Classic ELB")])
def test_a_scheme_change_is_one_warning_naming_the_annotations_for_both_types(lb_type: str, kind: str):
    config = parse_load_balancer_config(service(annotations={P + "internal": "true"}), default_lb_type=lb_type)
    message = scheme_kept(kind, "internet-facing", config)
    assert message is not None
    assert f"the {kind} scheme is internet-facing and cannot change to internal" in message
    assert P + "scheme" in message and P + "internal" in message
    assert f"the live {kind} is kept" in message and "delete and re-create the Service" in message
    assert scheme_kept(kind, "internal", config) is None  # as asked: nothing to say
    assert scheme_kept(kind, "", config) is None  # not reported by the API: nothing to compare
