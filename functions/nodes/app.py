"""Node reconciler Lambda: SQS FIFO batch of Node deltas, EC2 state-change events and safety-pass ticks.

Modules that plug into the node runtime (NODE_DELTA_CONSUMERS / PERIODIC_CONSUMERS, see ccm.node.runtime)
register themselves when imported: import them here.
"""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

import ccm.membership.consumer  # registers membership: member set + coalesced HOSTS messages
import ccm.route.consumer  # noqa: F401  (registers the routes feed: route-relevant Node deltas -> RoutesQueue)
from ccm.node.runtime import logger, metrics, runtime


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return runtime().handle_batch(event, context)
