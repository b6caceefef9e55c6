"""Node reconciler Lambda: SQS FIFO batch of Node deltas, EC2 state-change events and safety-pass ticks.

Its consumers (membership, the routes feed) are chosen by the composition root, ccm.wiring.nodes.
"""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from ccm.batch import share_across_threads
from ccm.node.runtime import logger, metrics
from ccm.wiring.nodes import runtime

# The groups of a batch run in parallel threads (ccm.batch): per-record log keys per thread, metrics under a lock.
share_across_threads(logger, metrics)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics  # no ColdStart metric: every log line carries `cold_start` (Logs Insights counts it)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return runtime().handle_batch(event, context)
