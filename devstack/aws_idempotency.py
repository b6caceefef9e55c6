"""ELBv2 creates as AWS answers them for a name (or port) that exists (a patch of moto's ELBv2 backend).

The ELBv2 API reference says of CreateLoadBalancer, CreateTargetGroup and CreateListener alike: "This operation is
idempotent, which means that it completes at most one time. If you attempt to create multiple ... with the same
settings, each call succeeds", and answers DuplicateLoadBalancerName / DuplicateTargetGroupName / DuplicateListener
when the name (the port, for a listener) is taken with other settings. moto differed both ways: a second
CreateLoadBalancer of a name made a second load balancer of that name (a leak AWS never allows), and a repeated
CreateTargetGroup with the same settings was refused as a duplicate (a retry AWS accepts), and a second
CreateListener on a port made a second listener there (its duplicate check compared the port with ARNs).

"Same settings" is compared on what the request states: for a load balancer its type, scheme, IP address type,
subnets and security groups; for a target group the fields it gives (protocol, port, VPC, target type, health
check); for a listener its protocol, certificate, TLS policy and the target groups it forwards to. Tags are not
compared (a create does not change them on the existing resource).
"""

from __future__ import annotations

from typing import Any

_TG_FIELDS = {  # CreateTargetGroup argument (moto's name) -> FakeTargetGroup attribute
    "protocol": "protocol",
    "port": "port",
    "vpc_id": "vpc_id",
    "target_type": "target_type",
    "healthcheck_protocol": "health_check_protocol",
    "healthcheck_port": "health_check_port",
    "healthcheck_path": "health_check_path",
    "healthcheck_interval_seconds": "health_check_interval_seconds",
    "healthcheck_timeout_seconds": "health_check_timeout_seconds",
    "healthy_threshold_count": "healthy_threshold_count",
    "unhealthy_threshold_count": "unhealthy_threshold_count",
}


def _same(given: Any, stored: Any) -> bool:
    return str(given).upper() == str(stored).upper()


def patch_moto() -> None:
    from moto.elbv2.exceptions import DuplicateListenerError, DuplicateLoadBalancerName, DuplicateTargetGroupName
    from moto.elbv2.models import ELBv2Backend

    create_lb = ELBv2Backend.create_load_balancer
    create_tg = ELBv2Backend.create_target_group
    create_listener = ELBv2Backend.create_listener

    def create_load_balancer(
        self: Any,
        name: str,
        security_groups: list[str],
        subnet_ids: list[str],
        subnet_mappings: list[dict[str, str]] | None = None,
        scheme: str = "internet-facing",
        loadbalancer_type: str | None = None,
        ip_address_type: str = "ipv4",
        tags: list[dict[str, str]] | None = None,
    ) -> Any:
        existing = next((lb for lb in self.load_balancers.values() if lb.name == name), None)
        if existing is not None:
            subnets = {*subnet_ids, *(m["SubnetId"] for m in subnet_mappings or [])}
            if (
                existing.type == (loadbalancer_type or "application")
                and (existing.scheme or "internet-facing") == (scheme or "internet-facing")
                and (existing.ip_address_type or "ipv4") == (ip_address_type or "ipv4")
                and {s.id for s in existing.subnets} == subnets
                and set(existing.security_groups or []) == set(security_groups or [])
            ):
                return existing
            raise DuplicateLoadBalancerName()
        return create_lb(
            self,
            name=name,
            security_groups=security_groups,
            subnet_ids=subnet_ids,
            subnet_mappings=subnet_mappings,
            scheme=scheme,
            loadbalancer_type=loadbalancer_type,
            ip_address_type=ip_address_type,
            tags=tags,
        )

    def create_target_group(self: Any, name: str, **kwargs: Any) -> Any:
        existing = next((tg for tg in self.target_groups.values() if tg.name == name), None)
        if existing is not None:
            given = {k: v for k, v in kwargs.items() if k in _TG_FIELDS and v is not None}
            if all(_same(value, getattr(existing, _TG_FIELDS[key], None)) for key, value in given.items()):
                return existing
            raise DuplicateTargetGroupName()
        return create_tg(self, name, **kwargs)

    def create_listener_(
        self: Any,
        load_balancer_arn: str,
        protocol: str,
        port: str,
        ssl_policy: str,
        certificate: str | None,
        actions: list[dict[str, Any]],
        **kwargs: Any,
    ) -> Any:
        balancer = self.load_balancers.get(load_balancer_arn)
        # moto keys listeners by ARN, so its own "port in listeners" duplicate check never matched: by port here.
        listeners = balancer.listeners.values() if balancer is not None else ()
        existing = next((li for li in listeners if str(li.port) == str(port)), None)
        if existing is not None:
            forwards = [arn for action in actions for arn in self._get_target_group_arns_from(action_data=action)]
            stored = [arn for a in existing.default_actions for arn in self._get_target_group_arns_from(a.data)]
            if (
                _same(protocol, existing.protocol)
                and (certificate or None) == (existing.certificate or None)
                and (ssl_policy or None) == (existing.ssl_policy or None)
                and forwards == stored
            ):
                return existing
            raise DuplicateListenerError()
        return create_listener(
            self,
            load_balancer_arn=load_balancer_arn,
            protocol=protocol,
            port=port,
            ssl_policy=ssl_policy,
            certificate=certificate,
            actions=actions,
            **kwargs,
        )

    ELBv2Backend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]
    ELBv2Backend.create_target_group = create_target_group  # type: ignore[method-assign]
    ELBv2Backend.create_listener = create_listener_  # type: ignore[method-assign,assignment]
