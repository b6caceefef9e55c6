"""AWS providerIDs (`Node.spec.providerID`): the one parser and the one formatter.

It sits with the contracts because it is the one fact both sides read alike: the Service predicates (which nodes
are targets), the node and route controllers and the AWS drivers all name an instance through it.

The parser follows cloud-provider-aws, `KubernetesInstanceID.MapToAWSInstanceID` (pkg/providers/v1/instances.go in
https://github.com/kubernetes/cloud-provider-aws), so a node means the same instance to us as to upstream:

- `aws:///<zone>/<id>` (what both write), `aws:////<id>` (no zone) and `aws:///<id>` (the legacy form);
- a string without the `aws://` prefix is read as `aws:////<string>`: a bare `<id>`, or `<zone>/<id>`;
- the URL's host is not looked at (`aws://<host>/<zone>/<id>`), nor its query or fragment; the path is
  percent-decoded, and its leading and trailing slashes do not count, but an empty segment inside it does;
- at most two path segments, the last being the ID, which starts with `i-` and holds no `/`.

Everything else is refused (None): another provider's ID (`gce://...`, `eks-hybrid:///...`), a volume or any other
`aws:///` resource, more segments, an empty string. Also refused: Fargate nodes (`aws:///<zone>/fargate-...` and
`aws:///<zone>/<hash>/fargate-...`), which upstream takes as node IDs but which are no EC2 instance: we never look
them up, never register them as targets and never route to them.

`is_well_formed_instance_id` is EC2's own rule for the ID (`i-` and 8 or 17 hex digits): a parsed ID may fail it
(upstream accepts `i-` and anything without `/`). EC2 answers `InvalidInstanceID.Malformed` to a call naming such
an ID, where a DescribeInstances *filter* would just return nothing, which would look like a vanished instance.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote, urlsplit

PREFIX: Final = "aws://"
_ID: Final = re.compile(r"i-[^/]*")  # upstream's awsInstanceRegMatch
_WELL_FORMED_ID: Final = re.compile(r"i-[0-9a-f]{8,17}")
_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")  # Go's url.Parse refuses it; unquote would keep it


def instance_id_from_provider_id(provider_id: str) -> str | None:
    """The EC2 instance ID a providerID names, or None when it names none (see the module docstring)."""
    if not provider_id or _BAD_ESCAPE.search(provider_id) or any(c < " " or c == "\x7f" for c in provider_id):
        return None  # url.Parse refuses control characters and broken escapes
    url = provider_id if provider_id.startswith(PREFIX) else f"{PREFIX}//{provider_id}"
    try:
        path = unquote(urlsplit(url).path)
    except ValueError:  # e.g. an unbalanced `[` in the host
        return None
    tokens = path.strip("/").split("/")
    if len(tokens) > 2:
        return None
    return tokens[-1] if _ID.fullmatch(tokens[-1]) else None


def provider_id_for(zone: str, instance_id: str) -> str:
    """`aws:///<zone>/<id>`, as upstream writes it (`aws:////<id>` without a zone: its form for "no zone")."""
    return f"{PREFIX}/{zone}/{instance_id}"


def is_well_formed_instance_id(instance_id: str) -> bool:
    """EC2's shape of an instance ID (`i-` + 8 or 17 lowercase hex digits)."""
    return _WELL_FORMED_ID.fullmatch(instance_id) is not None
