"""A fleet in memory: many ClusterPlugins, each in its own in-memory Crossplane, and one rollout.

Every ClusterPlugin is an ``InMemoryCrossplane`` of its own (its cluster's objects, its
composed resources, its providers); the ClusterPluginRollouts are more XRs that compose
nothing. One ``reconcile`` of the fleet reconciles every cluster once (each sees the rollouts
as they are then, as Crossplane's required resources would give them), then each rollout once
(seeing every ClusterPlugin as it is then). The clocks agree: every world is at the same
reconcile, ``seconds_per_reconcile`` apart. Nothing here decides anything: the function does,
through ``fn.run``, on both kinds.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function.rollout.spec import KIND
from function_tools.in_memory_crossplane import InMemoryCrossplane
from function_tools.resolve import MAX_REQUIREMENT_ITERATIONS, resolve_into


@dataclass
class Sample:
    """The fleet after one reconcile: the rollout's status and each cluster's chart."""

    step: int
    phase: str
    wave: str
    admitted: int
    # <namespace>/<name> -> (the chart version in its Release's spec, its status.rollout).
    clusters: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)


class Fleet:
    """ClusterPlugins from one XR and its cluster's objects, one per namespace; a rollout."""

    def __init__(
        self,
        xr: dict[str, Any],
        required: Iterable[dict[str, Any]],
        *,
        step_input: dict[str, Any],
        rollout_input: dict[str, Any] | None = None,
        seconds_per_reconcile: int = 10,
        **world: Any,
    ) -> None:
        self.template = copy.deepcopy(xr)
        self.template_required = [copy.deepcopy(o) for o in required]
        self.step_input = step_input
        # The ClusterPluginRollouts applied (``apply_rollout``), by name.
        self.rollouts: dict[str, dict[str, Any]] = {}
        self._first = ""  # the first rollout applied: ``rollout``
        self.world_options = world
        self.rollout_input = rollout_input or {}
        self.seconds_per_reconcile = seconds_per_reconcile
        self.worlds: dict[str, InMemoryCrossplane] = {}
        self.step = 0
        self.history: list[Sample] = []
        self.rollout_responses: list[fnv1.RunFunctionResponse] = []
        self.other_responses: dict[str, list[fnv1.RunFunctionResponse]] = {}

    @property
    def rollout(self) -> dict[str, Any] | None:
        """The first rollout applied, while it exists."""
        return self.rollouts.get(self._first)

    # --- the fleet -----------------------------------------------------------

    def add(
        self, namespace: str, labels: dict[str, str], *, missing_charts: Iterable[str] = ()
    ) -> InMemoryCrossplane:
        """A ClusterPlugin (and its cluster) in ``namespace``, at the fleet's clock."""
        xr = copy.deepcopy(self.template)
        meta = xr.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta["labels"] = dict(labels)
        meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"clusterplugin/{namespace}"))
        required = copy.deepcopy(self.template_required)
        for obj in required:
            obj["metadata"]["namespace"] = namespace
        world = InMemoryCrossplane(
            xr,
            required,
            step_input=self.step_input,
            seconds_per_reconcile=self.seconds_per_reconcile,
            missing_charts=missing_charts,
            **self.world_options,
        )
        world.start = InMemoryCrossplane.START + self.step * self.seconds_per_reconcile
        world.step = 0
        key = f"{namespace}/{meta['name']}"
        self.worlds[key] = world
        return world

    def apply_rollout(self, rollout: dict[str, Any]) -> None:
        """A ClusterPluginRollout is applied (or its spec changed: its status stays)."""
        name = rollout["metadata"]["name"]
        self._first = self._first or name
        before = self.rollouts.get(name)
        status = before.get("status") if before is not None else None
        self.rollouts[name] = copy.deepcopy(rollout)
        if status is not None:
            self.rollouts[name]["status"] = status

    def delete_rollout(self, name: str) -> None:
        """A ClusterPluginRollout is deleted (it composes nothing: it is gone at once)."""
        del self.rollouts[name]

    def remove(self, key: str) -> None:
        """The ClusterPlugin is deleted: the rollout no longer selects it."""
        del self.worlds[key]

    @property
    def now(self) -> float:
        """The fleet's clock."""
        return float(InMemoryCrossplane.START + self.step * self.seconds_per_reconcile)

    # --- Crossplane ----------------------------------------------------------

    def _rollout_request(self, rollout: dict[str, Any]) -> fnv1.RunFunctionRequest:
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update(rollout)
        if self.rollout_input:
            req.input.update(self.rollout_input)
        return req

    def reconcile_rollout(self, name: str | None = None) -> fnv1.RunFunctionResponse:
        """One reconcile of a rollout (the first applied by default).

        The required-resources loop, then its status applied.
        """
        rollout = self.rollouts.get(name or self._first)
        if rollout is None:
            msg = f"no ClusterPluginRollout {name or self._first!r} applied"
            raise ValueError(msg)
        objects = [w.xr for w in self.worlds.values()]
        req = self._rollout_request(rollout)
        rsp = fn.run(req, now=self.now)
        for _ in range(MAX_REQUIREMENT_ITERATIONS - 1):
            before = rsp.requirements.SerializeToString(deterministic=True)
            resolve_into(req, rsp.requirements, objects)
            rsp = fn.run(req, now=self.now)
            if rsp.requirements.SerializeToString(deterministic=True) == before:
                break
        if not any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            status = resource.struct_to_dict(rsp.desired.composite.resource).get("status", {})
            rollout["status"] = status  # the function writes all of it
        self.rollout_responses.append(rsp)
        return rsp

    def reconcile(self, before: Callable[[Fleet], None] | None = None) -> Sample:
        """Every cluster once (each with the rollouts as they are), then each rollout once."""
        if before is not None:
            before(self)
        self.step += 1
        for world in self.worlds.values():
            world.required = [o for o in world.required if o.get("kind") != KIND]
            world.required += [copy.deepcopy(r) for r in self.rollouts.values()]
            world.reconcile()
        for name in sorted(self.rollouts):
            rsp = self.reconcile_rollout(name)
            if name != self._first:
                self.rollout_responses.pop()  # rollout_responses: the first rollout's
                self.other_responses.setdefault(name, []).append(rsp)
        sample = self.sample()
        self.history.append(sample)
        return sample

    def run(self, steps: int, before: Callable[[Fleet], None] | None = None) -> list[Sample]:
        """``steps`` reconciles of the fleet."""
        return [self.reconcile(before) for _ in range(steps)]

    def run_until(
        self, phase: str, steps: int, before: Callable[[Fleet], None] | None = None
    ) -> list[Sample]:
        """Reconcile until the rollout is in ``phase``, at most ``steps`` times."""
        out: list[Sample] = []
        while len(out) < steps and (not out or out[-1].phase != phase):
            out.append(self.reconcile(before))
        return out

    def sample(self, node: str = "lbc-release") -> Sample:
        """The rollout's phase and each cluster's chart in ``node``'s spec, now."""
        status = (self.rollout or {}).get("status", {})
        out = Sample(
            self.step,
            status.get("phase", ""),
            status.get("wave", ""),
            status.get("counts", {}).get("admitted", 0),
        )
        for key, world in self.worlds.items():
            composed = world.composed.get(node)
            chart = composed.obj["spec"]["forProvider"]["chart"]["version"] if composed else ""
            out.clusters[key] = (chart, world.xr.get("status", {}).get("rollout", {}))
        return out
