"""The sweeper: deletes cluster-tagged load balancers, target groups and security groups nobody wants any more
(after a grace period) and re-enqueues Services whose load balancer drifted. See docs/sweeper.md.

Provider-side, not a controller (docs/architecture.md, "Code layout"): it reads the AWS inventory and judges it with
the drivers' own models (ccm.aws), like the doctor; it imports no controller (import-linter `provider-side-tools`)
and reaches the service controller only through the queue."""
