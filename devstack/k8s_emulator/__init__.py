"""Kubernetes API server emulator for tests; the real ``kubernetes`` client and ``kubectl`` talk to it.

    emu = Emulator().start()                      # port 0 -> any free port; emu.url
    kubeconfig = emu.write_kubeconfig(path)       # token "admin-token" (user "admin") by default
    emu.faults.fail_next(2, status=500, method="GET", path_regex="/services")
    emu.stop()

Behaviour worth knowing:
- ``compact()`` forgets history: new watches / continue tokens from an older resourceVersion get
  HTTP 410, and watches open at that moment receive an in-stream ERROR event (code 410) and end.
- ``drop_watches()`` ends open watch streams cleanly (terminating chunk), like an apiserver restart.
- Request-log entries are appended before the response is written; a watch entry appears when the
  stream starts and its ``bytes`` is filled in when the stream ends. ``/_emulator/*`` is not logged.
- kubectl only sends bearer tokens over TLS: use ``Emulator(tls=True)`` with ``require_token=True``.
- HTTP controls: POST /_emulator/faults {n,status,method,path_regex}, DELETE /_emulator/faults,
  POST /_emulator/latency {ms}, POST /_emulator/drop-watches, POST /_emulator/compact,
  GET|DELETE /_emulator/requests.
- ``dryRun=All`` on writes validates without persisting (``kubectl apply --dry-run=server``). Besides services,
  nodes, events and leases it stores serviceaccounts, configmaps, secrets, deployments, poddisruptionbudgets and the
  RBAC kinds (no controllers), enough to apply ``deploy/``.
- RBAC is off until ``emu.enable_rbac({username: [groups]})``: then the Role/ClusterRole/(Cluster)RoleBinding
  objects in the store are enforced per token (``emu.tokens``: token -> username), see ``rbac.py``.
- Standalone: ``python -m devstack.k8s_emulator --port 6443 --kubeconfig /tmp/kc``.
"""

from .emulator import Emulator
from .errors import ApiError

__all__ = ["ApiError", "Emulator"]
