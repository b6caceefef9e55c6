"""Say it before the scanner does: a Service whose listeners open a high-risk port to the whole internet.

AWS Security Hub control EC2.19 ("Security groups should not allow unrestricted access to ports with high risk")
fails a security group with a rule from 0.0.0.0/0 or ::/0 to any of these ports; the accounts that gate production
on it then flag the load balancer's group. The load balancer is still made (the Service asks for it): the Warning
names the port, the protocol and the control, once per change of the Service (like the annotation notices), so
its author can narrow spec.loadBalancerSourceRanges before the finding.

Pure: from the parsed configuration to at most one LoadBalancerWarning.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from ccm.aws.lbconfig.config import LoadBalancerConfig
from ccm.contracts.cloud import LoadBalancerWarning

REASON: Final = "HighRiskPortOpenToInternet"
CONTROL: Final = "Security Hub EC2.19"
# EC2.19's high-risk ports (its documented default parameter list).
HIGH_RISK_PORTS: Final = frozenset(
    {20, 21, 22, 23, 25, 110, 135, 143, 445, 1433, 1434, 3000, 3306, 3389, 4333, 5000, 5432, 5500, 5601, 8080,
     8088, 8888, 9200, 9300}
)  # fmt: skip
_EVERYWHERE: Final = frozenset({ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")})


def high_risk_exposure(config: LoadBalancerConfig) -> LoadBalancerWarning | None:
    """The Warning for listeners on EC2.19 high-risk ports reachable from 0.0.0.0/0 or ::/0; None when none is."""
    open_to = sorted(str(n) for n in set(config.source_ranges) & _EVERYWHERE)
    if not open_to:
        return None
    exposed = sorted({(ls.port, ls.protocol) for ls in config.listeners if ls.port in HIGH_RISK_PORTS})
    if not exposed:
        return None
    ports = ", ".join(f"{port}/{protocol}" for port, protocol in exposed)
    return LoadBalancerWarning(
        REASON,
        f"listener port {ports} is open to {' and '.join(open_to)}: {CONTROL} (high-risk ports open to the "
        "internet) will flag this load balancer's security group; set spec.loadBalancerSourceRanges to the "
        "clients that need it",
    )
