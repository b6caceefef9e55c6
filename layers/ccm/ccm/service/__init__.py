"""Service controller: predicates, decisions (pure) and the reconcile loop."""
