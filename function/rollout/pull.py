"""A ClusterPlugin pulls its rollout: it asks for the rollouts and decides alone if it is admitted.

Nothing pushes and nothing writes another XR's spec. With ``input.fleet.rollouts`` the
ClusterPlugin asks Crossplane for every ClusterPluginRollout (requirement ``rollouts``), takes
the first by name whose selector its labels match and whose status has caught up with its
target (``status.revision``), and finds its wave from the rollout's status, its own labels
and its own uid's bucket (``spec.wave_of``): no list of the fleet. What it reports in
``status.rollout`` (``target.RolloutTarget.report``) is what the rollout reads back.

- **Admitted** (in an open wave, the rollout Progressing, Paused or Complete): the target's
  chart versions and values replace the Composition's for the add-ons it names.
- **Halted**: a cluster that was applying the target keeps it; no new one starts.
- **RolledBack**: nobody applies it: each Release goes back through day two to what the
  Composition and the XR ask for (chart first, then its IAM).
- **Skipped** (paused in Cluster API, being deleted, unreachable, or a target add-on pinned
  by the XR): it starts nothing; one already applying the target keeps it (nothing moves back).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import structs
from function.accept import Accepted
from function.cluster import ClusterFacts, Requirements, Selector, required_objects
from function.flavour import XR_GROUP, XR_VERSION
from function.rollout.accept import TARGETABLE, parse
from function.rollout.spec import (
    KIND,
    REQ_ROLLOUTS,
    OpenWave,
    Phase,
    RolloutSpec,
    Target,
    bucket,
    revision,
    wave_of,
)
from function.rollout.target import APPLYING, SKIPPED, RolloutTarget
from function.spec import ClusterPluginSpec
from function.spec_base import InvalidInputError

ROLLOUTS = Selector(f"{XR_GROUP}/{XR_VERSION}", KIND)
# A rollout in these phases may still open waves (or start again once resumed).
UNDER_WAY = frozenset({Phase.PROGRESSING, Phase.PAUSED})
# What provider-helm says when it cannot reach the workload cluster's API server.
_UNREACHABLE = re.compile(
    r"connection refused|no such host|i/o timeout|dial tcp|no route to host|"
    r"context deadline exceeded|TLS handshake timeout",
    re.IGNORECASE,
)


def labels_of(obj: struct_pb2.Struct) -> dict[str, str]:
    """metadata.labels as a dict."""
    found = structs.struct_at(obj, "metadata", "labels")
    if found is None:
        return {}
    return {k: v.string_value for k, v in found.fields.items()}


def _rollout_for(
    req: fnv1.RunFunctionRequest, labels: dict[str, str]
) -> tuple[str, RolloutSpec, struct_pb2.Struct] | None:
    """The first rollout by name, acceptable, whose selector matches ``labels``."""
    found = []
    for obj in required_objects(req, REQ_ROLLOUTS, None) or ():
        try:
            spec = parse(structs.struct_at(obj, "spec") or struct_pb2.Struct())
        except InvalidInputError:
            continue  # the rollout refuses itself (FATAL): nobody follows it
        if spec.selector.matches(labels):
            found.append((structs.str_at(obj, "metadata", "name") or "", spec, obj))
    return min(found, key=lambda f: f[0]) if found else None


def _opened(status: struct_pb2.Struct) -> list[OpenWave]:
    """The rollout's status.waves (none if unreadable: nobody is admitted by a bad status)."""
    try:
        return [OpenWave.model_validate(w) for w in structs.to_python(status.fields["waves"])]
    except (ValidationError, KeyError, TypeError):
        return []


def _settled(status: struct_pb2.Struct | None) -> Target | None:
    """The last target the rollout completed (its ``status.settled``), if any and readable."""
    found = structs.value_at(status, "settled", "target") if status is not None else None
    if found is None:
        return None
    try:
        return Target.model_validate(structs.to_python(found))
    except ValidationError:
        return None


def _skipped(
    spec: RolloutSpec, cp: ClusterPluginSpec, facts: ClusterFacts, observed: Mapping[str, Any]
) -> str:
    """Why this cluster sits the rollout out ("" if it does not)."""
    if facts.deleting:
        return "being deleted"
    if facts.paused:
        return "paused in Cluster API"
    wanted = [TARGETABLE[p.name] for p in spec.target.plugins if TARGETABLE[p.name].spec(cp)]
    if not wanted:
        return "none of the target's add-ons is asked for"
    for addon in wanted:
        pin = addon.spec(cp).version
        if pin:
            return f"pinned: {addon.spec_path}.version is {pin}"
    for addon in wanted:
        for release in addon.releases:
            obj = observed.get(release.node)
            problem = structs.failing_message(obj.resource) if obj is not None else ""
            if problem and _UNREACHABLE.search(problem):
                return f"unreachable: {release.node}: {problem}"
    return ""


def _was_applying(xr: struct_pb2.Struct, name: str, rev: str) -> bool:
    """Whether this XR's own last report says it was applying this rollout's revision."""
    last = structs.struct_at(xr, "status", "rollout")
    if last is None or (structs.str_at(last, "name"), structs.str_at(last, "revision")) != (
        name,
        rev,
    ):
        return False
    phase = structs.str_at(last, "phase")
    return phase in APPLYING or (phase == SKIPPED and bool(structs.bool_at(last, "applying")))


def pull(
    req: fnv1.RunFunctionRequest, xr: struct_pb2.Struct, cp: ClusterPluginSpec, facts: ClusterFacts
) -> RolloutTarget | None:
    """The rollout that selects this ClusterPlugin and what it means in this call, or None."""
    labels = labels_of(xr)
    chosen = _rollout_for(req, labels)
    if chosen is None:
        return None
    name, spec, obj = chosen
    target = spec.target.model_dump(by_alias=True, mode="json")
    rev = revision(target)
    status = structs.struct_at(obj, "status")
    base = RolloutTarget(name, rev, plugins={p.name: p.version for p in spec.target.plugins})
    settled = _settled(status)
    if status is None or structs.str_at(status, "revision") != rev:
        return _made(spec, base, settled, why_not="the rollout has not started this target yet")
    base = dataclasses.replace(base, under_way=structs.str_at(status, "phase") in UNDER_WAY)
    uid = structs.str_at(xr, "metadata", "uid") or ""
    wave = wave_of(spec.strategy, _opened(status), labels, bucket(uid)) if uid else None
    return _made(
        spec,
        base,
        settled,
        **_standing(
            structs.str_at(status, "phase") or "",
            wave,
            applying=_was_applying(xr, name, rev),
            skipped=_skipped(spec, cp, facts, req.observed.resources),
        ),
    )


def _standing(phase: str, wave: str | None, *, applying: bool, skipped: str) -> dict[str, Any]:
    """Where the cluster stands: the keywords of ``_made``."""
    if phase == Phase.ROLLED_BACK:
        return {"wave": wave or "", "rolled_back": True}
    if skipped:
        return {"wave": wave or "", "skipped": skipped, "applies": applying}
    if wave is None:
        return {"why_not": "its wave has not opened"}
    if phase == Phase.HALTED and not applying:
        return {"why_not": "the rollout halted before it was admitted"}
    return {"wave": wave, "applies": True}


def _made(
    spec: RolloutSpec,
    base: RolloutTarget,
    settled: Target | None,
    *,
    wave: str = "",
    applies: bool = False,
    skipped: str = "",
    rolled_back: bool = False,
    why_not: str = "",
) -> RolloutTarget:
    versions: dict[str, str] = {}
    values: dict[str, dict[str, Any]] = {}
    target = spec.target if applies else settled
    if target is not None:
        for plugin in target.plugins:
            addon = TARGETABLE[plugin.name]
            for release in addon.releases:
                versions[release.node] = plugin.version
            if addon.release is not None and plugin.values:
                values[addon.release.node] = plugin.values
    return RolloutTarget(
        base.name,
        base.revision,
        wave,
        versions,
        values,
        base.plugins,
        skipped,
        rolled_back,
        why_not,
        base.under_way,
        applies,
    )


def follow(
    req: fnv1.RunFunctionRequest,
    xr: struct_pb2.Struct,
    accepted: Accepted,
    facts: ClusterFacts,
    asked: Requirements,
) -> tuple[Requirements, RolloutTarget | None]:
    """With ``input.fleet.rollouts``: the rollouts asked for too, and what they mean now."""
    if not accepted.step.fleet.rollouts:
        return asked, None
    return asked.adding({REQ_ROLLOUTS: ROLLOUTS}), pull(req, xr, accepted.spec, facts)
