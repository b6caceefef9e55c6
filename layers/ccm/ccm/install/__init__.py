"""`python -m ccm.install` (scripts/install-watcher): from a deployed stack to a running watcher, in one command."""
