"""Two AWS Security Hub controls as data, and their evaluation of security groups as DescribeSecurityGroups answers.

- EC2.18 (AWS Config `vpc-sg-open-only-to-authorized-ports`): a TCP or UDP rule from 0.0.0.0/0 or ::/0 on any port
  outside the authorized ones is a finding; Security Hub's default parameters authorize TCP 80 and 443, no UDP port.
- EC2.19 (high-risk ports): a rule from 0.0.0.0/0 or ::/0 reaching any of the listed ports is a finding.
A rule on all protocols ("-1") reaches every port of both. ICMP has no ports: neither control judges it.
Written from the controls' descriptions (Security Hub controls reference), independently of the code under test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

EVERYWHERE: Final = frozenset({"0.0.0.0/0", "::/0"})
EC2_18_AUTHORIZED: Final[Mapping[str, frozenset[int]]] = {"tcp": frozenset({80, 443}), "udp": frozenset()}
EC2_19_HIGH_RISK: Final = frozenset(
    {20, 21, 22, 23, 25, 110, 135, 143, 445, 1433, 1434, 3000, 3306, 3389, 4333, 5000, 5432, 5500, 5601, 8080,
     8088, 8888, 9200, 9300}
)  # fmt: skip
_PROTOCOLS: Final = {"6": "tcp", "17": "udp", "tcp": "tcp", "udp": "udp"}


def findings(groups: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, int, int]]:
    """(control, group id, protocol, from port, to port) of every rule either control flags."""
    out: list[tuple[str, str, str, int, int]] = []
    for group in groups:
        for perm in group.get("IpPermissions", []):
            sources = {r["CidrIp"] for r in perm.get("IpRanges", [])} | {
                r["CidrIpv6"] for r in perm.get("Ipv6Ranges", [])
            }
            if not sources & EVERYWHERE:
                continue
            raw = str(perm.get("IpProtocol", "-1")).lower()
            if raw == "-1":
                spans = [("tcp", 0, 65535), ("udp", 0, 65535)]
            elif raw in _PROTOCOLS:
                spans = [(_PROTOCOLS[raw], int(perm["FromPort"]), int(perm["ToPort"]))]
            else:
                continue  # ICMP and other protocols without ports
            for protocol, low, high in spans:
                authorized = {p for p in EC2_18_AUTHORIZED[protocol] if low <= p <= high}
                if high - low + 1 > len(authorized):
                    out.append(("EC2.18", group["GroupId"], protocol, low, high))
                if any(low <= p <= high for p in EC2_19_HIGH_RISK):
                    out.append(("EC2.19", group["GroupId"], protocol, low, high))
    return out
