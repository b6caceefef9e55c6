"""The contracts every package agrees on, in one place (nothing here imports a controller or a driver):

- `cloud`: what the controllers ask of a cloud (the load balancer driver by UID, instances, routes), its status and
  error types, and the per-call pass flags;
- `kube`: the Kubernetes side: objects as plain JSON dicts, the upstream predicates over them, and the protocols
  the controllers use to read and write them;
- `messages`: the schema of the queue messages (the watcher imports it too: keep this package free of imports, so
  its image copies only `messages`).
"""
