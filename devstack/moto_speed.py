"""moto's linear scans that dominate the devstack's CPU at bench scale, made cheap with the same answers.

The latency bench runs moto in one process (one GIL) beside the emulator; a profile of its 200-Service burst
(py-spy, every process) put most of that process's time in four places that cost O(resources) per request, or
O(resources^2) per call, and change no answer:

- request dispatch: every request lists moto's package directory (`list_of_moto_modules`: os.listdir plus an
  isdir per entry) and then tries every service's URL patterns, under one process-wide lock;
- DescribeTargetGroups by LoadBalancerArn: moto asks every target group for its load balancers, and with
  `aws_faithful`'s listener associations each of those asks every load balancer's listeners: 400 target groups x
  200 load balancers per call;
- SQS ReceiveMessage: the retention check of each message received reads all the queue's attributes, three of
  which count the queue's messages.

Each patch keeps moto's answer (a test compares them, tests/devstack/test_moto_speed.py); none touches a client.
Idempotent; installed by `devstack.aws.start_moto_server` after `aws_faithful` (whose association rule the target
group filter follows).
"""

from __future__ import annotations

import functools
from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    _cache_dispatch()
    _target_groups_of_one_load_balancer()
    _retention_without_attributes()


def _cache_dispatch() -> None:
    from moto import backends
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    # moto's package directories do not change while the process runs.
    modules = frozenset(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules

    find = DomainDispatcherApplication.get_backend_for_host
    found: dict[tuple[int, str | None], Any] = {}

    @functools.wraps(find)
    def get_backend_for_host(self: Any, host: str | None) -> Any:
        key = (id(self), host)
        if key not in found:
            found[key] = find(self, host)
        return found[key]

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]


def _target_groups_of_one_load_balancer() -> None:
    from moto.elbv2.exceptions import LoadBalancerNotFoundError, TargetGroupNotFoundError
    from moto.elbv2.models import ELBv2Backend

    from devstack import aws_faithful

    describe = ELBv2Backend.describe_target_groups

    @functools.wraps(describe)
    def describe_target_groups(
        self: Any, load_balancer_arn: str | None, target_group_arns: list[str], names: list[str] | None
    ) -> Any:
        if not load_balancer_arn or target_group_arns or names or not aws_faithful.settings().listener_associations:
            return describe(self, load_balancer_arn, target_group_arns, names)  # moto's checks and answers
        lb = self.load_balancers.get(load_balancer_arn)
        if lb is None:
            raise LoadBalancerNotFoundError()
        # The target groups this one load balancer's listener rules forward to: the set moto finds by asking every
        # target group whether `load_balancer_arn` is among its `load_balancer_arns` (which aws_faithful derives
        # from every load balancer's listeners).
        arns = {
            arn
            for listener in lb.listeners.values()
            for rule in listener.rules.values()
            for action in rule.actions
            for arn in self._get_target_group_arns_from(action_data=action.data)
        }
        found = [tg for tg in self.target_groups.values() if tg.arn in arns]
        if not found:
            raise TargetGroupNotFoundError()
        return sorted(found, key=lambda tg: tg.name)

    ELBv2Backend.describe_target_groups = describe_target_groups  # type: ignore[method-assign]


def _retention_without_attributes() -> None:
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        queue = self.get_queue(queue_name)
        retain_until = int(queue.message_retention_period) + message.sent_timestamp / 1000
        return bool(retain_until > unix_time())

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]
