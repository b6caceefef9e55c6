"""The AWS provider's load-balancer configuration of a Service: its annotations and spec, parsed and validated in
one place into a typed, frozen `LoadBalancerConfig` that the drivers and the sweeper read by attribute.

- `config`: the typed result (LoadBalancerConfig, Listener, HealthCheck: the one health-check type of both
  drivers);
- `values`: the value parsers; `table`: the annotation table (one row per annotation);
- `listeners`: building listeners and the health check; `parse`: the parser and its rules;
- `docs`: the generator of docs/annotations.md; `notices`: the Warnings on annotations the upstream controllers
  read differently. Both are also command-line tools, so this package does not import them.
"""

from ccm.aws.lbconfig.config import LB_TYPES, TRAFFIC_PORT, HealthCheck, LbType, Listener, LoadBalancerConfig
from ccm.aws.lbconfig.errors import InvalidAnnotation, ServiceConfigErrors, errors_of
from ccm.aws.lbconfig.parse import parse_load_balancer_config, validate_against_subnets
from ccm.aws.lbconfig.table import (
    ANNOTATIONS,
    EIP_ANNOTATION,
    EXTRA_SECURITY_GROUPS_ANNOTATION,
    INTERNAL_ANNOTATION,
    PREFIX,
    PREFIX_LISTS_ANNOTATION,
    SCHEME_ANNOTATION,
    SECURITY_GROUPS_ANNOTATION,
    SSL_CERT_ANNOTATION,
    SUBNETS_ANNOTATION,
    TABLE,
    TYPE_ANNOTATION,
)

__all__ = [
    "ANNOTATIONS",
    "EIP_ANNOTATION",
    "EXTRA_SECURITY_GROUPS_ANNOTATION",
    "INTERNAL_ANNOTATION",
    "LB_TYPES",
    "PREFIX",
    "PREFIX_LISTS_ANNOTATION",
    "SCHEME_ANNOTATION",
    "SECURITY_GROUPS_ANNOTATION",
    "SSL_CERT_ANNOTATION",
    "SUBNETS_ANNOTATION",
    "TABLE",
    "TRAFFIC_PORT",
    "TYPE_ANNOTATION",
    "HealthCheck",
    "InvalidAnnotation",
    "LbType",
    "Listener",
    "LoadBalancerConfig",
    "ServiceConfigErrors",
    "errors_of",
    "parse_load_balancer_config",
    "validate_against_subnets",
]
