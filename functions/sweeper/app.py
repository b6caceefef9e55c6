"""Sweeper Lambda (EventBridge schedule): delete orphaned cluster-tagged ELB resources after a grace period and
re-enqueue Services whose load balancer drifted. Returns the run's summary (no decisions: they are logged)."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from ccm.sweeper.runtime import logger, metrics, vars_of
from ccm.wiring.sweeper import runtime


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics  # no ColdStart metric: every log line carries `cold_start` (Logs Insights counts it)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = runtime().run()
    return {k: v for k, v in vars_of(report).items() if k != "decisions"}
