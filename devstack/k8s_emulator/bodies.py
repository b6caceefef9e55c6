"""Request body decoding: JSON, YAML, and the protobuf kubectl sends for typed objects."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

from . import protobuf
from .errors import ApiError, bad_request

if TYPE_CHECKING:
    from .api import Request

PROTOBUF = "application/vnd.kubernetes.protobuf"
BODY_TYPES = ("application/json", "application/yaml", f"{PROTOBUF} (Namespace, ConfigMap, ServiceAccount, Service)")
# What a create or a replace (POST, PUT) may be sent as: the serializers' media types, nothing else (a patch type
# is only for PATCH). kube-apiserver's NegotiateInputSerializer answers anything else 415.
OBJECT_TYPES = ("application/json", "application/yaml", PROTOBUF)


def require_object_media_type(req: Request) -> None:
    """415 UnsupportedMediaType for a create or replace whose body is not an object's media type (an empty
    Content-Type is taken as JSON)."""
    ctype = req.content_type.split(";")[0].strip()
    if ctype and ctype not in OBJECT_TYPES:
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(OBJECT_TYPES),
            "UnsupportedMediaType",
        )


def decode_body(req: Request) -> Any:
    if not req.body:
        return None
    ctype = req.content_type.split(";")[0].strip()
    if ctype == PROTOBUF:
        # kubectl sends protobuf for typed objects and does not retry with JSON on a 415: decode what it sends.
        try:
            return protobuf.decode(req.body)
        except (protobuf.UndecodableBody, UnicodeDecodeError) as exc:
            raise ApiError(
                415,
                f"{exc}; the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(BODY_TYPES)}",
                "UnsupportedMediaType",
            ) from exc
    try:
        if ctype.endswith("yaml"):
            return yaml.safe_load(req.body)
        return json.loads(req.body)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding request body: {exc}") from exc
