"""The builder: one desired state per pass, pure (after the AWS Load Balancer Controller's model builder).

`build(service, member nodes, cluster)` reads the Service's annotations and spec exactly once and returns the
`LoadBalancerModel` every later step of the pass works from: the parsed configuration, the load balancer type,
its name, tags, listeners and target groups (`nlb` or `clb`, the type's own spec), the member instances, the
annotation notices and the fingerprint the checkpoint is compared with. Nothing after it parses the Service
again; the deployers (ccm.aws.nlb, ccm.aws.clb, ccm.aws.security_groups) observe AWS, plan against the model and
apply. What needs AWS reads to be known (a Classic ELB's subnets and groups, an NLB's placement) is added by the
deployer from what it observed, never by parsing again.

The targets are their own part of the model (`instances` today): the fingerprint covers everything but them, so
a host update never certifies a spec change, and a second target model (pod IPs from EndpointSlices) is a second
kind of targets here, not a second corridor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ccm.aws import clb_model, nlb_model
from ccm.aws import names as aws_names
from ccm.aws import security_groups_model as sgm
from ccm.aws.applied import fingerprint
from ccm.aws.lbconfig import LbType, LoadBalancerConfig, parse_load_balancer_config
from ccm.aws.lbconfig.notices import annotation_notices
from ccm.contracts import kube as p
from ccm.contracts.cloud import ImplementedElsewhere, KubeObject, LoadBalancerWarning
from ccm.contracts.cluster import Cluster
from ccm.contracts.endpoints import IpBackends


@dataclass(frozen=True, slots=True)
class LoadBalancerModel:
    """What one pass wants for one Service (ccm.contracts.cloud.Desired). Built once (`build`), read by every
    step; a deployer only adds what it observed (`dataclasses.replace`); the targets come with the members
    (`with_members`)."""

    service: KubeObject = field(compare=False, repr=False)
    uid: str
    key: str  # namespace/name
    name: str  # the load balancer's name (`a` + UID), under either API
    lb_type: LbType
    config: LoadBalancerConfig = field(repr=False)
    fingerprint: str  # of everything but the targets (ccm.aws.applied)
    notices: tuple[LoadBalancerWarning, ...] = field(default=(), compare=False)
    nlb: nlb_model.NLBSpec | None = field(default=None, repr=False)  # lb_type "nlb"
    clb: clb_model.CLBSpec | None = field(default=None, repr=False)  # lb_type "clb", without subnets and groups
    # The Service names our class: a first sight of it (no finalizer yet) cannot have a load balancer to adopt.
    of_our_class: bool = False
    # The member nodes (`with_members`): their instances are the targets; their zones place a new LB's subnets.
    nodes: tuple[KubeObject, ...] = field(default=(), compare=False, repr=False)
    instances: frozenset[str] = frozenset()
    # The security-group plan: bring-your-own groups, or the frontend rules and where they go (ccm.aws.security_groups).
    frontend: sgm.FrontendPlan | None = field(default=None, repr=False)

    @property
    def tags(self) -> dict[str, str]:
        spec = self.nlb if self.nlb is not None else self.clb
        return dict(spec.tags) if spec is not None else {}

    def instances_of(self, nodes: Sequence[KubeObject]) -> frozenset[str]:
        """Pure: which member nodes' instances are targets (a Classic ELB honours the node-selector annotation)."""
        ids = ((p.instance_id(n), n) for n in nodes)
        return frozenset(i for i, n in ids if i and (self.nlb is not None or self.config.selects_node(_labels(n))))

    @property
    def health_check_interval(self) -> int:
        return int(self.config.health_check.interval)

    @property
    def target_type(self) -> str:
        """`instance` (the member nodes) or `ip` (an NLB's pods, from the Service's EndpointSlices)."""
        return self.config.target_type if self.nlb is not None else "instance"

    def with_endpoints(self, endpoints: IpBackends | Sequence[KubeObject]) -> LoadBalancerModel:
        """An `ip` model with its targets: each Service port's ready endpoints, and those waiting only on our
        readiness gate (ccm.contracts.endpoints). A plain sequence is the EndpointSlices alone (no gated pods)."""
        if self.nlb is None or self.target_type != "ip":
            return self
        backends = endpoints if isinstance(endpoints, IpBackends) else IpBackends(tuple(endpoints))
        wanted = backends.targets(self.service)
        return replace(self, nlb=nlb_model.with_ip_targets(self.nlb, wanted.by_port))

    def with_members(self, nodes: Sequence[KubeObject]) -> LoadBalancerModel:
        """The model with its member nodes and their instances as targets, in the type's spec too."""
        members = tuple(nodes)
        instances = self.instances_of(nodes) if self.target_type == "instance" else frozenset()
        if self.nlb is not None:
            return replace(self, nodes=members, instances=instances, nlb=nlb_model.with_targets(self.nlb, instances))
        assert self.clb is not None
        return replace(self, nodes=members, instances=instances, clb=replace(self.clb, instances=instances))


def _labels(node: KubeObject) -> dict[str, str]:
    return dict(p.meta(node).get("labels") or {})


def build(service: KubeObject, cluster: Cluster) -> LoadBalancerModel:
    """Pure: the Service's model, without targets (`LoadBalancerModel.with_members`). The one place a pass parses
    the Service. Raises ImplementedElsewhere (not ours) or InvalidServiceConfig (bad input), before any AWS call."""
    if not p.belongs_to_us(service, cluster.load_balancer_class, cluster.claim_unclassed):
        raise ImplementedElsewhere()
    config = parse_load_balancer_config(service, default_lb_type=cluster.default_lb_type)
    meta = p.meta(service)
    uid = str(meta["uid"])
    nlb = clb = None
    spec: object
    if config.lb_type == "nlb":
        spec = nlb = nlb_model.desired_nlb(service, config, (), cluster.name, cluster.vpc_id)
    else:
        spec = clb = clb_model.desired_clb(service, config, (), cluster.name)
    return LoadBalancerModel(
        service=service,
        uid=uid,
        key=f"{meta.get('namespace')}/{meta.get('name')}",
        name=aws_names.load_balancer_name(uid),
        lb_type=config.lb_type,
        config=config,
        fingerprint=fingerprint(config.lb_type, config, spec, cluster.vpc_id),
        notices=annotation_notices(config, p.annotations_of(service)),
        nlb=nlb,
        clb=clb,
        of_our_class=p.spec(service).get("loadBalancerClass") == cluster.load_balancer_class,
        frontend=sgm.frontend_plan(config, config.lb_type),
    )


__all__ = ["LoadBalancerConfig", "LoadBalancerModel", "build"]
