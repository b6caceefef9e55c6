"""Teardown Lambda (the stack's custom resource): on stack deletion, refuse while load balancers of the cluster
remain, else delete the cluster's shared security groups and their node rules (ccm.sweeper.teardown)."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from ccm.sweeper.custom_resource import handle
from ccm.sweeper.runtime import logger, metrics
from ccm.wiring.teardown import runtime


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics  # the deletion's outcome is in the log; no metric is emitted
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, str]:
    teardown = runtime()
    outcome = handle(
        event,
        teardown.physical_id,
        on_delete=lambda: teardown.delete(context.get_remaining_time_in_millis),
        on_other=teardown.keep,
    )
    return {"Status": outcome.status, "Reason": outcome.reason}
