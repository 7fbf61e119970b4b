"""The composition function runner: request in, response out, through the planning core.

``run`` is synchronous and pure; ``FunctionRunner.RunFunction`` is the gRPC
entry point ``serve`` registers. ``render`` and ``simulate`` call ``run`` too,
so what they print is what Crossplane would get.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import grpc
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2

from function import cluster, structs
from function.flavour import EXTERNAL_NAME, Flavour
from function.graph import Ctx, Observed
from function.names import Names
from function.plan import Plan, build_plan, check_values
from function.spec import (
    CROSSPLANE_SPEC_FIELDS,
    ClusterPluginSpec,
    InvalidInputError,
    IRSAMode,
    StepInput,
    parse_input,
    parse_spec,
)

CLAIM_NAMESPACE_LABEL = "crossplane.io/claim-namespace"
OIDC_ARN = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):iam::\d{12}:oidc-provider/(.+)$")

_CONDITION_STATUS = {
    "True": fnv1.STATUS_CONDITION_TRUE,
    "False": fnv1.STATUS_CONDITION_FALSE,
    "Unknown": fnv1.STATUS_CONDITION_UNKNOWN,
}
_SEVERITY = {"Normal": fnv1.SEVERITY_NORMAL, "Warning": fnv1.SEVERITY_WARNING}


@dataclass(frozen=True)
class Parsed:
    """The validated XR spec and step input."""

    spec: ClusterPluginSpec
    step: StepInput


def _spec_key(spec: struct_pb2.Struct) -> bytes:
    """The spec without the fields Crossplane owns, serialized deterministically.

    ``parse_spec`` ignores those fields, and a Crossplane v2 XR carries every
    composed resource's reference in ``spec.crossplane.resourceRefs``: keeping
    them out of the key saves converting them on a miss (most of a miss's cost,
    issue 5) and keeps the key stable while resources come and go.
    """
    fields = spec.fields
    if not any(k in CROSSPLANE_SPEC_FIELDS for k in fields):
        return spec.SerializeToString(deterministic=True)
    ours = struct_pb2.Struct()
    for k, v in fields.items():
        if k not in CROSSPLANE_SPEC_FIELDS:
            ours.fields[k].CopyFrom(v)
    return ours.SerializeToString(deterministic=True)


def _to_dict(serialized: bytes) -> dict[str, Any]:
    s = struct_pb2.Struct()
    s.ParseFromString(serialized)
    return resource.struct_to_dict(s)


# Validating is the most expensive part of a small request, and neither changes
# often: cached by serialized bytes. The step input is the Composition's, shared
# by every XR, so it is cached apart from the per-XR spec.
@functools.lru_cache(maxsize=4096)
def _parse_spec(spec_key: bytes) -> ClusterPluginSpec:
    return parse_spec(_to_dict(spec_key))


@functools.lru_cache(maxsize=64)
def _parse_input(input_bytes: bytes) -> StepInput:
    return parse_input(_to_dict(input_bytes))


def _parse(spec: struct_pb2.Struct, step_input: struct_pb2.Struct) -> Parsed:
    """The validated spec and step input, or InvalidInputError naming the first problem."""
    try:
        parsed_spec = _parse_spec(_spec_key(spec))
    except InvalidInputError:
        # Report exactly what validating the whole spec reports (field order decides
        # which of several problems comes first).
        parse_spec(_to_dict(spec.SerializeToString(deterministic=True)))
        raise
    step = _parse_input(step_input.SerializeToString(deterministic=True))
    check_values(parsed_spec)
    _check_external(parsed_spec)
    return Parsed(parsed_spec, step)


def _clear_parse_caches() -> None:
    _parse_spec.cache_clear()
    _parse_input.cache_clear()


_parse.cache_clear = _clear_parse_caches  # type: ignore[attr-defined]


def _check_external(spec: ClusterPluginSpec) -> None:
    irsa = spec.irsa
    if irsa.mode is not IRSAMode.EXTERNAL:
        return
    url = irsa.issuer_url.rstrip("/")
    if not re.match(r"^https://[a-z0-9.-]+(/[A-Za-z0-9._~/-]*)?$", url):
        raise InvalidInputError(
            "spec.irsa.issuerURL",
            f"{irsa.issuer_url!r} must be an https:// URL without port, query or fragment",
        )
    m = OIDC_ARN.match(irsa.oidc_provider_arn)
    if not m:
        raise InvalidInputError(
            "spec.irsa.oidcProviderARN",
            f"{irsa.oidc_provider_arn!r} is not an IAM OIDC provider ARN "
            "(arn:<partition>:iam::<account>:oidc-provider/<issuer host and path>)",
        )
    # Roles trust the provider named here for tokens of the issuer named here:
    # the two must be the same issuer, or no token could ever match.
    if m.group(2) != url.removeprefix("https://"):
        raise InvalidInputError(
            "spec.irsa.oidcProviderARN",
            f"names provider {m.group(2)!r}, which is not the issuer {url!r}",
        )


def cluster_namespace(xr: struct_pb2.Struct, spec: ClusterPluginSpec) -> tuple[str, bool]:
    """(the CAPI cluster's namespace, whether the XR is namespaced); InvalidInputError if unusable.

    The one rule every tool shares (run, ``issuer``, ``aws preflight``): the XR's own
    namespace, else its claim's, else ``spec.clusterNamespace``; a claim or a namespaced XR
    may not name another namespace.
    """
    xr_ns = structs.str_at(xr, "metadata", "namespace")
    if xr_ns:
        if spec.cluster_namespace and spec.cluster_namespace != xr_ns:
            raise InvalidInputError(
                "spec.clusterNamespace",
                f"a namespaced ClusterPlugin can only use a Cluster in its own namespace {xr_ns!r}",
            )
        return xr_ns, True
    claim_ns = structs.str_at(xr, "metadata", "labels", CLAIM_NAMESPACE_LABEL)
    if claim_ns:
        # A claim must not reach a cluster (and its Secrets) in another namespace.
        if spec.cluster_namespace and spec.cluster_namespace != claim_ns:
            raise InvalidInputError(
                "spec.clusterNamespace",
                f"a claim can only use a Cluster in its own namespace {claim_ns!r}",
            )
        return claim_ns, False
    if spec.cluster_namespace:
        return spec.cluster_namespace, False
    raise InvalidInputError(
        "spec.clusterNamespace",
        "is required for a cluster-scoped XClusterPlugin without a claim (the Cluster's namespace)",
    )


def _fatal(rsp: fnv1.RunFunctionResponse, message: str, target: Any) -> fnv1.RunFunctionResponse:
    rsp.results.append(
        fnv1.Result(
            severity=fnv1.SEVERITY_FATAL, message=message, reason="InvalidInput", target=target
        )
    )
    return rsp


def _carried_struct(observed: struct_pb2.Struct) -> struct_pb2.Struct:
    """The parts of an observed resource to carry over unchanged into desired."""
    out = struct_pb2.Struct()
    for key in ("apiVersion", "kind"):
        if key in observed.fields:
            out.fields[key].CopyFrom(observed.fields[key])
    ext = structs.str_at(observed, "metadata", "annotations", EXTERNAL_NAME)
    if ext:
        out.fields["metadata"].struct_value.fields["annotations"].struct_value.fields[
            EXTERNAL_NAME
        ].string_value = ext
    if "spec" in observed.fields:
        out.fields["spec"].CopyFrom(observed.fields["spec"])
    return out


def _write(rsp: fnv1.RunFunctionResponse, plan: Plan, step: StepInput, target: Any) -> None:
    desired = rsp.desired.resources
    earlier = set(desired)  # from earlier pipeline steps
    for d in plan.resources:
        r = desired[d.name]
        if d.name in earlier:
            r.resource.Clear()  # replaced whole, as before
        body = d.body
        if isinstance(body, dict):
            structs.fill(r.resource, body)
        elif body is not None:
            body(r.resource)  # a StructWriter
        elif d.carried is not None:
            r.resource.CopyFrom(_carried_struct(d.carried))
        r.ready = fnv1.READY_TRUE if d.ready else fnv1.READY_FALSE

    composite = rsp.desired.composite
    structs.update(composite.resource.fields["status"].struct_value, plan.status)
    if plan.held_back:
        composite.ready = fnv1.READY_FALSE

    for c in plan.conditions:
        rsp.conditions.append(
            fnv1.Condition(
                type=c.type,
                status=_CONDITION_STATUS[c.status],
                reason=c.reason,
                message=c.message,
                target=target,
            )
        )
    for res in plan.results:
        rsp.results.append(
            fnv1.Result(
                severity=_SEVERITY[res.severity],
                reason=res.reason,
                message=res.message,
                target=target,
            )
        )
    ttl = step.ttl.ready if plan.all_ready else step.ttl.waiting
    rsp.meta.ttl.FromSeconds(ttl)


def _write_requirements(rsp: fnv1.RunFunctionResponse, reqs: cluster.Requirements) -> None:
    for name, sel in reqs.resources.items():
        sel.write(rsp.requirements.resources[name])
    for name, sel in reqs.extra_resources.items():
        sel.write(rsp.requirements.extra_resources[name])


class Answer(NamedTuple):
    """One call's response, with what decided it (for metrics and logs, never sent)."""

    response: fnv1.RunFunctionResponse
    # None when the input was refused (FATAL) before planning.
    plan: Plan | None = None
    # The field a FATAL result names (InvalidInputError.field), else None.
    invalid_field: str | None = None


def run(req: fnv1.RunFunctionRequest, log: Any = None) -> fnv1.RunFunctionResponse:
    """Answer one RunFunctionRequest."""
    return answer(req, log).response


def answer(req: fnv1.RunFunctionRequest, log: Any = None) -> Answer:
    """Answer one RunFunctionRequest, keeping the plan behind the response."""
    rsp = response.to(req)
    xr = req.observed.composite.resource
    # Conditions and results also reach the claim of a legacy XR.
    target = (
        fnv1.TARGET_COMPOSITE_AND_CLAIM
        if structs.struct_at(xr, "spec", "claimRef")
        else fnv1.TARGET_COMPOSITE
    )
    spec_struct = structs.struct_at(xr, "spec") or struct_pb2.Struct()
    try:
        parsed = _parse(spec_struct, req.input)
        namespace, namespaced = cluster_namespace(xr, parsed.spec)
        spec, step = parsed.spec, parsed.step
        names = Names(step.name_prefix, namespace, spec.cluster_name, spec.irsa.bucket_name)
        problem = names.bucket_override_problem()
        if problem:
            raise InvalidInputError("spec.irsa.bucketName", problem)
    except InvalidInputError as err:
        if log is not None:
            log.info("invalid input", field=err.field, problem=err.message)
        return Answer(_fatal(rsp, f"{err.field}: {err.message}", target), invalid_field=err.field)

    want_sa = spec.irsa.mode is IRSAMode.SELF_HOSTED and spec.wants_aws
    _write_requirements(
        rsp,
        cluster.requirements(
            req,
            cluster_name=spec.cluster_name,
            namespace=namespace,
            want_sa_secret=want_sa,
            step=step,
        ),
    )
    facts = cluster.read_facts(req, cluster_name=spec.cluster_name, namespace=namespace)
    try:
        cluster.refuse(spec, step, facts, namespaced=namespaced)
    except InvalidInputError as err:
        if log is not None:
            log.info("invalid input", field=err.field, problem=err.message)
        return Answer(_fatal(rsp, f"{err.field}: {err.message}", target), invalid_field=err.field)
    flavour = Flavour(
        namespaced=namespaced,
        aws_provider_config=step.aws_provider_config.name,
        aws_provider_config_kind=step.aws_provider_config.kind,
        helm_provider_config=names.helm_provider_config(namespaced=namespaced),
    )
    ctx = Ctx(spec, step, flavour, names, facts, Observed(req.observed.resources))
    plan = build_plan(ctx, xr)
    _write(rsp, plan, step, target)
    if log is not None and plan.results:
        # Only on transitions, like the results themselves.
        for res in plan.results:
            log.info(res.message, reason=res.reason)
    return Answer(rsp, plan)


class CallObserver(Protocol):
    """What ``FunctionRunner`` reports each call to (``function.metrics.Metrics``)."""

    def observe(
        self, req: fnv1.RunFunctionRequest, answer: Answer | None, seconds: float
    ) -> None:
        """Record one call; ``answer`` None is an internal error."""


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """The gRPC service ``serve`` registers."""

    def __init__(self, metrics: CallObserver | None = None) -> None:
        self.log = logging.get_logger()
        self.metrics = metrics

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        """Run the function for one request."""
        log = self.log.bind(tag=req.meta.tag) if req.meta.tag else self.log
        start = time.perf_counter()
        try:
            got = answer(req, log)
        except Exception as err:  # a bug must not take the server down
            # Only the exception type and text: never the request (it holds Secrets).
            log.error("internal error", error=f"{type(err).__name__}: {err}")
            rsp = response.to(req)
            rsp.results.append(
                fnv1.Result(
                    severity=fnv1.SEVERITY_FATAL,
                    reason="InternalError",
                    message=f"internal error in function-cluster-plugin ({type(err).__name__}); "
                    "nothing was changed, please report it",
                )
            )
            if self.metrics is not None:
                self.metrics.observe(req, None, time.perf_counter() - start)
            return rsp
        if self.metrics is not None:
            self.metrics.observe(req, got, time.perf_counter() - start)
        return got.response
