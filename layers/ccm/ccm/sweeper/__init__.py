"""The sweeper: deletes cluster-tagged load balancers, target groups and security groups nobody wants any more
(after a grace period) and re-enqueues Services whose load balancer drifted. See docs/sweeper.md."""
