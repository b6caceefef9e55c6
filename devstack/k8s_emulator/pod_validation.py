"""Pods as the pod registry keeps them: defaulting, validation, the status reset on create, the immutable spec and
graceful deletion (pkg/apis/core/v1/defaults.go, pkg/apis/core/validation ValidatePod*, pkg/registry/core/pod
strategy.go). A subset: the fields a controller of Services, EndpointSlices and readiness gates reads or writes.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import FieldError, duplicate, forbidden, invalid, not_supported, required
from .validation import dns1123_label, iana_svc_name, is_ip, qualified_name

Obj = dict[str, Any]

PROTOCOLS = ["SCTP", "TCP", "UDP"]
RESTART_POLICIES = ["Always", "Never", "OnFailure"]
DEFAULT_GRACE_SECONDS = 30
# ValidatePodUpdate's refusal (1.32 wording without the trailing spec diff the real server appends).
SPEC_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _image_pull_policy(image: str) -> str:
    """SetDefaults_Container: Always for a :latest (or untagged) image, else IfNotPresent."""
    name = image.rsplit("/", 1)[-1]
    if "@" in name:
        return "IfNotPresent"
    tag = name.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def apply_defaults(pod: Obj) -> None:
    """SetDefaults_PodSpec / SetDefaults_Container / SetDefaults_ContainerPort: what decoding fills in."""
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for container in spec.get("containers") or []:
        if not isinstance(container, dict):
            continue
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        if isinstance(container.get("image"), str):
            container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
        for port in container.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")


def prepare_create(pod: Obj) -> None:
    """podStrategy.PrepareForCreate: the status is the server's (Pending, the QoS class), whatever was sent."""
    apply_defaults(pod)
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(pod)}


def _qos_class(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    if not any(
        (c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits") for c in containers
    ):
        return "BestEffort"
    return "Burstable"  # Guaranteed (requests == limits for every resource of every container) is not worked out


def validate_spec(pod: Obj) -> list[FieldError]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errs: list[FieldError] = []
    containers = spec.get("containers")
    if not containers:
        errs.append(required("spec.containers"))
    names: set[str] = set()
    port_names: set[str] = set()
    for i, container in enumerate(containers or []):
        path = f"spec.containers[{i}]"
        if not isinstance(container, dict):
            errs.append(invalid(path, container, "must be an object"))
            continue
        name = container.get("name")
        if not name:
            errs.append(required(f"{path}.name"))
        elif (msg := dns1123_label(str(name))) is not None:
            errs.append(invalid(f"{path}.name", name, msg))
        elif name in names:
            errs.append(duplicate(f"{path}.name", name))
        names.add(str(name))
        if not container.get("image"):
            errs.append(required(f"{path}.image"))
        for j, port in enumerate(container.get("ports") or []):
            ppath = f"{path}.ports[{j}]"
            number = port.get("containerPort") if isinstance(port, dict) else None
            if number is None:
                errs.append(required(f"{ppath}.containerPort"))
            elif not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
                errs.append(invalid(f"{ppath}.containerPort", number, "must be between 1 and 65535, inclusive"))
            pname = port.get("name") if isinstance(port, dict) else None
            if pname:
                if (msg := iana_svc_name(str(pname))) is not None:
                    errs.append(invalid(f"{ppath}.name", pname, msg))
                elif pname in port_names:  # unique across all containers of the pod (validateContainerPorts)
                    errs.append(duplicate(f"{ppath}.name", pname))
                port_names.add(str(pname))
            protocol = port.get("protocol") if isinstance(port, dict) else None
            if protocol not in PROTOCOLS:
                errs.append(not_supported(f"{ppath}.protocol", protocol, PROTOCOLS))
    if spec.get("restartPolicy") not in RESTART_POLICIES:
        errs.append(not_supported("spec.restartPolicy", spec.get("restartPolicy"), RESTART_POLICIES))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
        errs.append(invalid("spec.terminationGracePeriodSeconds", grace, "must be an integer"))
    for i, gate in enumerate(spec.get("readinessGates") or []):
        ctype = gate.get("conditionType") if isinstance(gate, dict) else None
        if not ctype:
            errs.append(required(f"spec.readinessGates[{i}].conditionType"))
        elif (msg := qualified_name(str(ctype))) is not None:
            errs.append(invalid(f"spec.readinessGates[{i}].conditionType", ctype, msg))
    return errs


def _mutable_view(spec: Obj) -> Obj:
    """The spec with what ValidatePodUpdate lets change blanked out."""
    view = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for container in view.get(key) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    view.pop("activeDeadlineSeconds", None)
    view.pop("terminationGracePeriodSeconds", None)
    view.pop("tolerations", None)
    return view


def validate_update(pod: Obj, old: Obj) -> list[FieldError]:
    spec, old_spec = pod.get("spec") or {}, old.get("spec") or {}
    errs: list[FieldError] = []
    if _mutable_view(spec) != _mutable_view(old_spec):
        errs.append(forbidden("spec", SPEC_UPDATE_FORBIDDEN))
    old_tolerations = old_spec.get("tolerations") or []
    if any(t not in (spec.get("tolerations") or []) for t in old_tolerations):
        errs.append(
            forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")
        )
    return errs


def validate_status(pod: Obj, old: Obj) -> list[FieldError]:
    """ValidatePodStatusUpdate, the part about addresses and conditions; nodeName cannot move through /status."""
    status = pod.get("status") or {}
    errs: list[FieldError] = []
    if (pod.get("spec") or {}).get("nodeName") != (old.get("spec") or {}).get("nodeName"):
        errs.append(forbidden("status.nodeName", "may not be changed directly"))
    pod_ip = status.get("podIP")
    if pod_ip and not is_ip(pod_ip):
        errs.append(invalid("status.podIP", pod_ip, "must be a valid IP address"))
    pod_ips = status.get("podIPs") or []
    if len(pod_ips) > 2:
        errs.append(invalid("status.podIPs", pod_ips, "may specify no more than one IP for each IP family"))
    seen: set[str] = set()
    for i, entry in enumerate(pod_ips):
        ip = entry.get("ip") if isinstance(entry, dict) else None
        if not ip or not is_ip(ip):
            errs.append(invalid(f"status.podIPs[{i}]", ip, "must be a valid IP address"))
        elif ip in seen:
            errs.append(duplicate(f"status.podIPs[{i}]", ip))
        seen.add(str(ip))
    if pod_ips and pod_ip and isinstance(pod_ips[0], dict) and pod_ips[0].get("ip") != pod_ip:
        errs.append(invalid("status.podIPs[0].ip", pod_ips[0].get("ip"), "must be equal to status.podIP"))
    for i, cond in enumerate(status.get("conditions") or []):
        if not isinstance(cond, dict) or not cond.get("type"):
            errs.append(required(f"status.conditions[{i}].type"))
    return errs


def grace_period(pod: Obj, requested: Any) -> int:
    """podStrategy.CheckGracefulDelete: the DeleteOptions' gracePeriodSeconds, else the pod's
    terminationGracePeriodSeconds; 0 for a pod never scheduled (no kubelet to wait for) or already finished;
    a negative value means 1."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    period = requested if isinstance(requested, int) and not isinstance(requested, bool) else None
    if period is None:
        period = spec.get("terminationGracePeriodSeconds")
        period = DEFAULT_GRACE_SECONDS if period is None else int(period)
    if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded"):
        return 0
    return 1 if period < 0 else period
