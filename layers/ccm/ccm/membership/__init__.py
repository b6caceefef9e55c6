"""Load balancer membership: which nodes back LB Services, kept where a reconcile reads it cheaply."""
