"""In-cluster watcher: lists/watches Services and Nodes and forwards relevant changes as deltas to SQS FIFO.

See watcher/README.md for the design (relevance, buffering, relists, resync) and configuration.
"""
