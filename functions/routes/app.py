"""Route reconciler Lambda: SQS FIFO batch of route triggers (Node deltas, scheduled passes) -> one reconcile of
every cluster-tagged route table."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from ccm.route.runtime import logger, metrics
from ccm.wiring.routes import runtime


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics  # no ColdStart metric: every log line carries `cold_start` (Logs Insights counts it)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return runtime().handle_batch(event, context)
