"""The listener groups' pure part: the port-set key and its inverse, names, and make-before-break group sets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ccm.aws import frontend_model as fm
from ccm.aws import lbconfig as a
from ccm.aws import security_groups_model as m
from tests.factories import service


def rules(lb_type: str, ports: list[int], **ann: str) -> frozenset[m.IngressRule]:
    svc = service(annotations={a.PREFIX + "type": lb_type, **ann}, ports=[(p, 30000 + i) for i, p in enumerate(ports)])
    return m.desired_lb_rules(a.parse_load_balancer_config(svc), lb_type)


def test_the_key_names_family_protocols_and_ports_compactly() -> None:
    assert fm.listener_key(rules("nlb", [53, 80, 81, 82, 443])) == "ipv4 tcp:53,80-82,443"
    dual = rules("nlb", [443], **{a.PREFIX + "ip-address-type": "dualstack"})
    assert fm.listener_key(dual) == "dualstack tcp:443"
    assert fm.rules_of_key("dualstack tcp:443") == dual
    assert fm.listener_key(rules("clb", [443, 80])) == fm.listener_key(rules("nlb", [80, 443]))  # one group for both


@given(
    st.sets(st.integers(1, 65535), min_size=1, max_size=40),
    st.sets(st.integers(1, 65535), max_size=10),
    st.sampled_from(["ipv4", "dualstack"]),
)
def test_a_key_holds_exactly_the_rules_it_was_made_from(tcp: set[int], udp: set[int], family: str) -> None:
    cidrs = ["0.0.0.0/0"] + (["::/0"] if family == "dualstack" else [])
    made = {m.IngressRule("tcp", p, p, cidr=c) for p in tcp for c in cidrs}
    made |= {m.IngressRule("udp", p, p, cidr=c) for p in udp for c in cidrs}
    made |= {m.IngressRule("icmp", 3, 4, cidr="0.0.0.0/0")}
    made |= {m.IngressRule("icmpv6", 2, 0, cidr="::/0")} if family == "dualstack" else set()
    key = fm.listener_key(made)
    assert fm.rules_of_key(key) == made
    name = fm.listener_group_name("c", key)
    assert name.startswith("serverless-ccm-listeners-") and len(name) <= 255
    assert len(fm.listener_group_description("c" * 100, key)) <= 255


def test_only_short_keys_are_tagged() -> None:
    short = fm.listener_tags("kubernetes.io/cluster/c", "ipv4 tcp:80", m.ROLE_TAG)
    assert short[fm.LISTENERS_TAG] == "ipv4 tcp:80" and short[m.ROLE_TAG] == m.ROLE_LISTENERS
    long_key = "ipv4 tcp:" + ",".join(str(p) for p in range(1000, 1200, 2))
    assert fm.LISTENERS_TAG not in fm.listener_tags("kubernetes.io/cluster/c", long_key, m.ROLE_TAG)


def test_a_swap_carries_old_and_new_groups_first_within_five() -> None:
    assert fm.interim_groups(["old", "backend"], ["new", "backend"]) == ("old", "backend", "new")
    assert fm.interim_groups(["backend"], ["new", "backend"]) is None  # only added: one change is enough
    assert fm.interim_groups(["old", "backend"], ["backend"]) is None  # only removed
    full = ["a", "b", "c", "old"]
    assert fm.interim_groups(full, ["a", "b", "c", "new1", "new2"]) is None  # six groups: one change


def test_a_malformed_key_is_refused() -> None:
    for key in ("", "ipv4", "ipv6 tcp:80", "ipv4 sctp:80", "ipv4 tcp:"):
        try:
            fm.rules_of_key(key)
        except ValueError:
            continue
        raise AssertionError(key)
