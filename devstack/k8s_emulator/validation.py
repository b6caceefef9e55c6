"""Generic object-metadata validation (names, labels, annotations, finalizers)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from .errors import FieldError, duplicate, invalid, not_supported, required

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def dns1123_label(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not DNS1123_LABEL.match(value):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
            "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )
    return None


def dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.match(value):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return None


def dns1035_label(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not DNS1035_LABEL.match(value):
        return (
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
            "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    return None


def path_segment_name(value: str) -> str | None:
    if value in (".", ".."):
        return f"may not be '{value}'"
    if "/" in value or "%" in value:
        return "may not contain '/' or '%'"
    return None


def qualified_name(value: str) -> str | None:
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or dns1123_subdomain(prefix)):
        return "prefix part must be a valid DNS subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None


def label_value(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def iana_svc_name(value: str) -> str | None:
    if len(value) > 15 or not _IANA_SVC_NAME.match(value) or "--" in value or not re.search(r"[a-z]", value):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    return None


def is_ip(value: Any) -> bool:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def validate_labels(labels: Any, field: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if labels is None:
        return errs
    if not isinstance(labels, dict):
        return [invalid(field, labels, "must be a map of string to string")]
    for key, value in labels.items():
        if (msg := qualified_name(key)) is not None:
            errs.append(invalid(field, key, msg))
        if (msg := label_value(value)) is not None:
            errs.append(invalid(f"{field}[{key}]", value, msg))
    return errs


def validate_metadata(meta: dict[str, Any], name_check: str) -> list[FieldError]:
    """``name_check`` is one of dns1035, dns1123label, dns1123subdomain, path."""
    errs: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errs.append(required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errs.append(invalid("metadata.name", name, "must be a string"))
    else:
        check = {
            "dns1035": dns1035_label,
            "dns1123label": dns1123_label,
            "dns1123subdomain": dns1123_subdomain,
            "path": path_segment_name,
        }[name_check]
        if (msg := check(name)) is not None:
            errs.append(invalid("metadata.name", name, msg))
    errs += validate_labels(meta.get("labels"), "metadata.labels")
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            errs.append(invalid("metadata.annotations", annotations, "must be a map of string to string"))
        else:
            for key in annotations:
                if (msg := qualified_name(key.lower())) is not None:
                    errs.append(invalid("metadata.annotations", key, msg))
            # apimachinery ValidateAnnotationsSize: keys + values, at most TotalAnnotationSizeLimitB (256 KiB).
            if sum(len(k) + len(v) for k, v in annotations.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
                errs.append(
                    FieldError(
                        "FieldValueTooLong",
                        "metadata.annotations",
                        f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes",
                    )
                )
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list):
            errs.append(invalid("metadata.finalizers", finalizers, "must be a list of strings"))
        else:
            # Each finalizer by its index, as kube-apiserver names it: `metadata.finalizers[0]: Invalid value: ...`.
            for i, fin in enumerate(finalizers):
                errs += validate_finalizer_name(fin, f"metadata.finalizers[{i}]")
    return errs


STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})


def validate_finalizer_name(value: Any, field: str) -> list[FieldError]:
    """core/validation ValidateFinalizerName: a qualified name (apimachinery), and one without a domain prefix must
    be a standard finalizer (validateKubeFinalizerName, applied to every built-in type's ObjectMeta)."""
    if not isinstance(value, str):
        return [invalid(field, value, "must be a string")]
    if (msg := qualified_name(value)) is not None:
        return [invalid(field, value, msg)]
    if "/" not in value and value not in STANDARD_FINALIZERS:
        return [invalid(field, value, "name is neither a standard finalizer name nor is it fully qualified")]
    return []


def is_cidr(value: str) -> bool:
    """Go's net.ParseCIDR: address/prefix-length (host bits may be set); a bare address is not a CIDR."""
    address, slash, prefix = value.partition("/")
    if not slash or not prefix.isdigit():
        return False
    try:
        ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    except ValueError:
        return False
    return True


def validate_conditions(conditions: Any, field: str) -> list[FieldError]:
    """metav1.Condition rules (Service status uses the strict metav1 type)."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, cond in enumerate(conditions or []):
        path = f"{field}[{i}]"
        if not isinstance(cond, dict):
            errs.append(invalid(path, cond, "must be an object"))
            continue
        ctype = cond.get("type")
        if not ctype:
            errs.append(required(f"{path}.type"))
        elif ctype in seen:
            errs.append(duplicate(f"{path}.type", ctype))
        seen.add(str(ctype))
        if cond.get("status") not in ("True", "False", "Unknown"):
            errs.append(not_supported(f"{path}.status", cond.get("status"), ["False", "True", "Unknown"]))
        if not cond.get("lastTransitionTime"):
            errs.append(required(f"{path}.lastTransitionTime", "must be set"))
        reason = cond.get("reason")
        if not reason:
            errs.append(required(f"{path}.reason"))
        elif not re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", str(reason)):
            errs.append(invalid(f"{path}.reason", reason, "a condition reason must start with alphabetic character"))
        if len(str(cond.get("message", ""))) > 32768:
            errs.append(invalid(f"{path}.message", "...", "may not be more than 32768 bytes"))
    return errs
