"""The composition function runner: request in, response out (docs/architecture.md).

``accept`` judges, ``cluster`` reads the cluster, ``plan`` decides; a ClusterPluginRollout
goes to ``rollout.answer``. ``run`` is pure; ``FunctionRunner`` is what ``serve`` registers.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Protocol

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function import accept, cluster, structs
from function.following import pull
from function.observed import Observed
from function.plan import Plan, build_plan
from function.respond import DesiredSlots, write
from function.rollout import answer as rollout
from function.rollout.spec import KIND as ROLLOUT_KIND
from function.spec_base import InvalidInputError


class Answer(NamedTuple):
    """One call's response, with what decided it (for metrics and logs, never sent)."""

    response: fnv1.RunFunctionResponse
    # None when the input was refused (FATAL) before planning.
    plan: Plan | None = None
    # The field a FATAL result names (InvalidInputError.field), else None.
    invalid_field: str | None = None
    rolled_out: rollout.RolloutStatus | None = None  # a ClusterPluginRollout's decision


def run(
    req: fnv1.RunFunctionRequest, log: Any = None, now: float | None = None
) -> fnv1.RunFunctionResponse:
    """Answer one RunFunctionRequest (``now``: the call's clock, default the wall clock)."""
    return answer(req, log, now).response


def answer(req: fnv1.RunFunctionRequest, log: Any = None, now: float | None = None) -> Answer:
    """Answer one RunFunctionRequest, keeping the plan behind the response."""
    rsp = response.to(req)
    xr = req.observed.composite.resource
    # Conditions and results also reach the claim of a legacy XR.
    target = (
        fnv1.TARGET_COMPOSITE_AND_CLAIM
        if structs.struct_at(xr, "spec", "claimRef")
        else fnv1.TARGET_COMPOSITE
    )
    now = time.time() if now is None else now
    try:
        if structs.str_at(xr, "kind") == ROLLOUT_KIND:
            return Answer(rsp, rolled_out=rollout.answer(req, rsp, now))
        accepted = accept.accept_xr(xr, req.input)
    except InvalidInputError as err:
        return _refused(rsp, err, target, log)
    asked = cluster.requirements(req, accepted.lookup)
    facts = cluster.read_facts(req, accepted.lookup, asked)
    asked, followed = pull.follow(req, xr, accepted, facts, asked)
    try:
        accept.refuse_for_cluster(
            accepted, facts, accept.recorded_issuer(xr), req.observed.resources
        )
    except InvalidInputError as err:
        asked.write(rsp.requirements)  # the cluster's objects stay watched while refused
        return _refused(rsp, err, target, log)
    # A legacy XR's Usages are cluster-scoped; a namespaced XR's are in its namespace.
    usages_namespace = accepted.namespace if accepted.namespaced else None
    observed = Observed(
        req.observed.resources,
        cluster.usages_in_api(req, usages_namespace),
        cluster.found_by_name(req, usages_namespace),
    )
    slots = DesiredSlots(rsp)
    plan = build_plan(accepted.context(facts, observed, now, followed, slots.struct_for), xr)
    write(rsp, plan, accepted.step, target, slots)
    asked.adding(plan.requirements).write(rsp.requirements)
    if log is not None and plan.results:
        # Only on transitions, like the results themselves.
        for res in plan.results:
            log.info(res.message, reason=res.reason)
    return Answer(rsp, plan)


def _refused(
    rsp: fnv1.RunFunctionResponse, err: InvalidInputError, target: Any, log: Any
) -> Answer:
    if log is not None:
        log.info("invalid input", field=err.field, problem=str(err))
    rsp.results.append(
        fnv1.Result(
            severity=fnv1.SEVERITY_FATAL, message=str(err), reason="InvalidInput", target=target
        )
    )
    return Answer(rsp, invalid_field=err.field)


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
