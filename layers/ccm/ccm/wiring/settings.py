"""The one reading of the environment (per execution environment): every function's settings as one value.

Left outside on purpose (process-level, each says why where it reads): the Powertools logger/metrics names (needed
by the handler decorators at import; Powertools reads its own variables anyway), CCM_GROUP_CONCURRENCY in ccm.batch
(read per batch, as tests change it) and the test/bench-only hooks (CCM_RETRY_DELAY_SCALE in ccm.retry,
CCM_RECORD_RESERVE_SECONDS in ccm.deadline, CCM_FAULTS_FILE in ccm.aws.faults, CCM_AWS_INJECT_LATENCY_MS in
ccm.aws.clients): no deployment sets them, and tests change them while a runtime lives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ccm.config import DEFAULT_BUCKET_SECONDS, DEFAULT_LOAD_BALANCER_CLASS, KubeSettings, Settings
from ccm.senders import senders_from_env


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    return Settings(
        cluster_name=env["CLUSTER_NAME"],
        vpc_id=env.get("VPC_ID", ""),
        load_balancer_class=env.get("LOAD_BALANCER_CLASS") or DEFAULT_LOAD_BALANCER_CLASS,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION", ""),
        default_lb_type=env.get("DEFAULT_LOAD_BALANCER_TYPE") or "clb",
        claim_unclassed=env.get("SERVICES_WITHOUT_CLASS", "claim").strip().lower() != "ignore",
        any_annotation_security_group=env.get("ANNOTATION_SECURITY_GROUPS", "").strip().lower() == "any",
        membership_table=env.get("MEMBERSHIP_TABLE", ""),
        services_queue_url=env.get("SERVICES_QUEUE_URL", ""),
        routes_queue_url=env.get("ROUTES_QUEUE_URL", ""),
        cluster_cidrs=tuple(env.get("CLUSTER_CIDRS", "").split(",")),
        host_bucket_seconds=float(env.get("HOST_UPDATE_BUCKET_SECONDS") or DEFAULT_BUCKET_SECONDS),
        senders=senders_from_env(env),
        sweeper_table=env.get("SWEEPER_TABLE") or env.get("MEMBERSHIP_TABLE", ""),
        sweeper_dry_run=env.get("SWEEPER_DRY_RUN", "false").strip().lower() in ("1", "true", "yes"),
        sweeper_grace_seconds=60.0 * float(env.get("SWEEPER_GRACE_MINUTES") or 30),
        kube=kube_settings_from_env(env),
    )


def kube_settings_from_env(env: Mapping[str, str]) -> KubeSettings:
    return KubeSettings(
        auth_mode=env.get("KUBE_AUTH_MODE", "kubeconfig" if env.get("KUBECONFIG") else "eks"),
        cluster_name=env.get("CLUSTER_NAME", ""),
        kubeconfig=env.get("KUBECONFIG") or os.path.expanduser("~/.kube/config"),
        kubeconfig_secret_arn=env.get("KUBECONFIG_SECRET_ARN", ""),
        service_host=env.get("KUBERNETES_SERVICE_HOST", ""),
        service_port=env.get("KUBERNETES_SERVICE_PORT", ""),
    )


def aws_region(settings: Settings) -> str | None:
    """The region the AWS clients use (AWS_REGION as the Lambda runtime sets it; None: boto3's own default)."""
    return settings.region or None
