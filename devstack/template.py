"""Read template.yaml (and its nested observability.yaml: TemplateFacts.nested) into the facts the devstack and
the event-source runner need.

The devstack stands in for CloudFormation + Lambda, so it must take its settings (queues, timeouts, batch sizes,
concurrency, environment) from the template itself rather than a copy that drifts. This module is pure parsing:
it resolves the intrinsics that appear in those settings (Ref, Sub, GetAtt, Join, If, Select;
devstack.template_intrinsics) against parameter values (defaults applied), pseudo parameters and the names of
already-created resources.

Typical use::

    facts = load_template("template.yaml", {"ClusterName": "dev", "VpcId": world.vpc_id})
    urls = create_queues(sqs, facts, "dev")           # needs only parameters
    facts = facts.with_resources(urls)                # now !Ref ServicesQueue in env resolves to its URL
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

from devstack.template_intrinsics import NO_VALUE, Resolver, TemplateError, Unresolved


@dataclass(frozen=True, slots=True)
class SqsEventSource:
    name: str
    queue_logical_id: str
    batch_size: int
    function_response_types: tuple[str, ...]
    maximum_concurrency: int | None  # None: no ScalingConfig (Lambda then scales up to 1000)

    @property
    def report_batch_item_failures(self) -> bool:
        return "ReportBatchItemFailures" in self.function_response_types


@dataclass(frozen=True, slots=True)
class FunctionFacts:
    logical_id: str
    code_dir: Path
    handler: str  # "app.lambda_handler"
    handler_module: str  # "app"
    handler_function: str  # "lambda_handler"
    runtime: str
    timeout: int
    memory_size: int
    environment: dict[str, str]
    layer_dirs: tuple[Path, ...]
    sqs_events: tuple[SqsEventSource, ...]
    # Env vars whose value needs a resource name or parameter not given yet (value is a "${Name}" placeholder).
    unresolved: tuple[str, ...] = ()
    # LoggingConfig: LogFormat (Text or JSON); ApplicationLogLevel applies only to JSON (INFO by default there).
    log_format: str = "Text"
    application_log_level: str = ""

    @property
    def handler_path(self) -> Path:
        return self.code_dir.joinpath(*self.handler_module.split(".")).with_suffix(".py")


@dataclass(frozen=True, slots=True)
class QueueFacts:
    logical_id: str
    name: str
    fifo: bool
    visibility_timeout: int
    redrive_target: str | None  # logical id of the DLQ
    max_receive_count: int | None
    attributes: dict[str, str]  # SQS CreateQueue attributes, RedrivePolicy excluded (it needs the DLQ's ARN)


@dataclass(frozen=True, slots=True)
class TemplateFacts:
    path: Path
    parameters: dict[str, str]
    functions: dict[str, FunctionFacts]
    queues: dict[str, QueueFacts]
    region: str
    account_id: str
    stack_name: str
    resource_names: dict[str, str] = field(default_factory=dict)
    _doc: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def with_parameters(self, parameters: Mapping[str, str | int]) -> TemplateFacts:
        """The same template re-read with some parameter values replaced."""
        merged = {**self.parameters, **{k: str(v) for k, v in parameters.items()}}
        return _build(self, parameters=merged)

    def with_resources(self, resource_names: Mapping[str, str]) -> TemplateFacts:
        """Re-resolve with what `Ref <LogicalId>` (and `GetAtt <LogicalId>.<Attr>` as key "Id.Attr") returns."""
        return _build(self, resource_names={**self.resource_names, **resource_names})

    def resource_property(self, logical_id: str, prop: str) -> Any:
        """A property of a resource with its intrinsics evaluated; names of resources not given render as
        `${Name}` / `${Name.Attr}` (e.g. the dashboard body's function and queue names)."""
        return Resolver(self).value(self._doc["Resources"][logical_id]["Properties"][prop], strict=False)

    def nested(self, logical_id: str) -> TemplateFacts:
        """A nested application (AWS::Serverless::Application with a local Location, e.g. observability.yaml: the
        alarms and the dashboard) read with the parameters this template passes it. What this template does not
        resolve yet (resource names not given) arrives there as `${Name}` / `${Name.Attr}`, so a property of the
        nested template renders the parent's names as resource_property does."""
        res = self._doc["Resources"].get(logical_id) or {}
        props = res.get("Properties") or {}
        location = props.get("Location")
        if res.get("Type") != "AWS::Serverless::Application" or not isinstance(location, str):
            raise TemplateError(f"{logical_id}: not a nested application with a local Location")
        resolver = Resolver(self)
        if "Condition" in res and not resolver.condition(res["Condition"]):
            raise TemplateError(f"{logical_id}: its condition {res['Condition']} is false with these parameters")
        given = resolver.value(props.get("Parameters") or {}, strict=False)
        return load_template(
            self.path.parent / location,
            {k: str(v) for k, v in given.items()},
            region=self.region,
            account_id=self.account_id,
            stack_name=f"{self.stack_name}-{logical_id}",
        )

    def queue_creation_order(self) -> list[str]:
        """Queues ordered so every dead-letter queue comes before the queues that redrive into it."""
        order: list[str] = []

        def visit(logical_id: str, seen: tuple[str, ...]) -> None:
            if logical_id in order:
                return
            if logical_id in seen:
                raise TemplateError(f"redrive cycle through {logical_id}")
            target = self.queues[logical_id].redrive_target
            if target is not None:
                visit(target, (*seen, logical_id))
            order.append(logical_id)

        for logical_id in self.queues:
            visit(logical_id, ())
        return order


def load_template(
    path: str | Path,
    parameters: Mapping[str, str | int] | None = None,
    resource_names: Mapping[str, str] | None = None,
    *,
    region: str = "us-east-1",
    account_id: str = "123456789012",  # moto's default account
    stack_name: str = "devstack",
) -> TemplateFacts:
    path = Path(path)
    doc = yaml_parse(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("Resources"), dict):
        raise TemplateError(f"{path}: not a CloudFormation template")
    values: dict[str, str] = {}
    for name, spec in (doc.get("Parameters") or {}).items():
        if "Default" in spec:
            values[name] = str(spec["Default"])
    values.update({k: str(v) for k, v in (parameters or {}).items()})
    seed = TemplateFacts(
        path=path,
        parameters=values,
        functions={},
        queues={},
        region=region,
        account_id=account_id,
        stack_name=stack_name,
        resource_names=dict(resource_names or {}),
        _doc=doc,
    )
    return _build(seed)


def _build(
    facts: TemplateFacts,
    *,
    parameters: dict[str, str] | None = None,
    resource_names: dict[str, str] | None = None,
) -> TemplateFacts:
    facts = replace(
        facts,
        parameters=facts.parameters if parameters is None else parameters,
        resource_names=facts.resource_names if resource_names is None else resource_names,
    )
    resolver = Resolver(facts)
    # A resource whose Condition is false does not exist (e.g. the routes queue and function while routes are off).
    resources: dict[str, Any] = {
        lid: res
        for lid, res in facts._doc["Resources"].items()
        if "Condition" not in res or resolver.condition(res["Condition"])
    }
    queues = {
        lid: _queue(lid, res.get("Properties") or {}, resolver)
        for lid, res in resources.items()
        if res.get("Type") == "AWS::SQS::Queue"
    }
    globals_fn: dict[str, Any] = (facts._doc.get("Globals") or {}).get("Function") or {}
    functions = {
        lid: _function(lid, res.get("Properties") or {}, globals_fn, resolver, facts.path.parent, resources)
        for lid, res in resources.items()
        if res.get("Type") == "AWS::Serverless::Function"
    }
    return replace(facts, functions=functions, queues=queues)


def _queue(logical_id: str, props: dict[str, Any], r: Resolver) -> QueueFacts:
    # Not strict: a queue name may wait for ClusterName (create_queues fills it in).
    fifo = _bool(r.value(props.get("FifoQueue", False), strict=False))
    name = r.value(props["QueueName"], strict=False) if "QueueName" in props else f"{r.facts.stack_name}-{logical_id}"
    if fifo and not str(name).endswith(".fifo"):
        name = f"{name}.fifo"  # what CloudFormation generates for an unnamed FIFO queue
    attributes: dict[str, str] = {}
    for key, raw in props.items():
        if key in ("QueueName", "RedrivePolicy", "Tags", "RedriveAllowPolicy"):
            continue
        val = r.value(raw, strict=False)
        if val is NO_VALUE:
            continue
        attributes[key] = ("true" if val else "false") if isinstance(val, bool) else str(val)
    redrive = props.get("RedrivePolicy") or {}
    target = _arn_target(redrive.get("deadLetterTargetArn"))
    return QueueFacts(
        logical_id=logical_id,
        name=str(name),
        fifo=fifo,
        # 30 s is the SQS default when the template does not set it.
        visibility_timeout=int(attributes.get("VisibilityTimeout", "30")),
        redrive_target=target,
        max_receive_count=int(r.value(redrive["maxReceiveCount"])) if target else None,
        attributes=attributes,
    )


def _arn_target(arn: Any) -> str | None:
    if arn is None:
        return None
    # Only same-template queues can be stood up locally, so only !GetAtt <Queue>.Arn is accepted.
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        ref = arn["Fn::GetAtt"]
        parts = ref.split(".", 1) if isinstance(ref, str) else ref
        if parts[1] == "Arn":
            return str(parts[0])
    raise TemplateError(f"queue ARN must be !GetAtt <Queue>.Arn, got {arn!r}")


def _function(
    logical_id: str,
    props: dict[str, Any],
    globals_fn: dict[str, Any],
    r: Resolver,
    base: Path,
    resources: dict[str, Any],
) -> FunctionFacts:
    def setting(name: str, default: Any = None) -> Any:
        return r.value(props[name]) if name in props else r.value(globals_fn.get(name, default))

    handler = str(setting("Handler"))
    module, _, func = handler.rpartition(".")
    if not module:
        raise TemplateError(f"{logical_id}: Handler {handler!r} is not <module>.<function>")
    env_raw: dict[str, Any] = {
        **((globals_fn.get("Environment") or {}).get("Variables") or {}),
        **((props.get("Environment") or {}).get("Variables") or {}),
    }
    env: dict[str, str] = {}
    unresolved: list[str] = []
    for key, raw in env_raw.items():
        try:
            val = r.value(raw, strict=True)
        except Unresolved as missing:
            env[key], unresolved = "${" + missing.name + "}", [*unresolved, key]
            continue
        if val is not NO_VALUE:
            env[key] = str(val)
    # SAM replaces (does not merge) list-valued globals such as Layers when the function sets its own.
    layers = props["Layers"] if "Layers" in props else globals_fn.get("Layers") or []
    layer_dirs = []
    for layer in layers:
        ref = layer.get("Ref") if isinstance(layer, dict) else None
        res = resources.get(ref or "")
        if res and res.get("Type") == "AWS::Serverless::LayerVersion":
            layer_dirs.append((base / str(res["Properties"]["ContentUri"])).resolve())
    # SAM merges a function's LoggingConfig map into the Globals' one.
    logging_config = {**(globals_fn.get("LoggingConfig") or {}), **(props.get("LoggingConfig") or {})}
    log_format = str(r.value(logging_config.get("LogFormat", "Text")))
    log_level = str(r.value(logging_config.get("ApplicationLogLevel", "INFO"))) if log_format == "JSON" else ""
    events = tuple(
        _sqs_event(name, ev.get("Properties") or {}, r)
        for name, ev in (props.get("Events") or {}).items()
        if ev.get("Type") == "SQS"
    )
    return FunctionFacts(
        logical_id=logical_id,
        code_dir=(base / str(setting("CodeUri", "."))).resolve(),
        handler=handler,
        handler_module=module,
        handler_function=func,
        runtime=str(setting("Runtime", "")),
        timeout=int(setting("Timeout", 3)),  # SAM's default Timeout
        memory_size=int(setting("MemorySize", 128)),
        environment=env,
        layer_dirs=tuple(layer_dirs),
        sqs_events=events,
        unresolved=tuple(unresolved),
        log_format=log_format,
        application_log_level=log_level,
    )


def _sqs_event(name: str, props: dict[str, Any], r: Resolver) -> SqsEventSource:
    queue = _arn_target(props.get("Queue"))
    if queue is None:
        raise TemplateError(f"SQS event {name}: Queue must be !GetAtt <Queue>.Arn")
    scaling = props.get("ScalingConfig") or {}
    concurrency = scaling.get("MaximumConcurrency")
    return SqsEventSource(
        name=name,
        queue_logical_id=queue,
        batch_size=int(r.value(props.get("BatchSize", 10))),
        function_response_types=tuple(str(r.value(t)) for t in props.get("FunctionResponseTypes") or []),
        maximum_concurrency=None if concurrency is None else int(r.value(concurrency)),
    )


def _bool(val: Any) -> bool:
    return val is True or str(val).lower() == "true"
