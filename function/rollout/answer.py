"""The ClusterPluginRollout's own answer: it reads the fleet's health and opens the next wave.

It composes nothing and writes only its own status. Each call it asks Crossplane for the
ClusterPlugins its selector's labels match (across namespaces), reads what each reports in
``status.rollout`` (``function/rollout/target.py``) and, for the current target's revision:

- finds each cluster's wave as the cluster itself does (``spec.wave_of``: labels, the bucket of
  its uid, the waves already open), so a cluster that has not reported yet is waited for, never
  taken as done: a wave passes on what its clusters say of this revision, not on stale health;
- opens the next wave once every cluster of the open waves is healthy at the target for
  ``soakSeconds`` (or skipped, or failed within ``maxFailures``), fixing its bucket threshold
  so that the wave admits its share of the fleet as it is now; thresholds only grow, so a
  cluster added later lands by its own bucket, and nobody admitted is reshuffled;
- past ``maxFailures``, or past ``progressDeadlineSeconds`` since the open wave opened (or the
  rollout resumed), fails: Halted or RolledBack, for this revision, until the target changes.

Crossplane v2.4 does not watch required resources: the answer's TTL is the requeue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import structs
from function.accept import accept_step_input_struct as accept_step_input
from function.cluster import Requirements, Selector, supports_required_resources
from function.flavour import XR_GROUP, XR_VERSION
from function.rollout.accept import parse
from function.rollout.pull import labels_of
from function.rollout.spec import (
    BUCKET_STEP,
    CANARY,
    FAILED_PHASES,
    REQ_PLUGINS,
    ClusterCount,
    ClusterNote,
    OnFailure,
    OpenWave,
    Phase,
    RolloutSpec,
    RolloutStatus,
    Settled,
    bucket,
    revision,
    wave_name,
    wave_of,
)
from function.rollout.target import FAILED, HEALTHY, SKIPPED
from function.step_input import StepInput
from function.upgrade import rfc3339, seconds_of

# At most this many failed and skipped clusters are named in the status (the counts say all).
LISTED = 20


@dataclass(frozen=True)
class Member:
    """One selected ClusterPlugin as the rollout reads it."""

    name: str  # <namespace>/<name>
    labels: dict[str, str]
    place: float  # its bucket
    phase: str  # what it reports for this revision ("" if nothing)
    reason: str
    healthy_since: str


def _members(
    plugins: list[struct_pb2.Struct], spec: RolloutSpec, me: str, rev: str
) -> list[Member]:
    out = []
    for obj in plugins:
        labels = labels_of(obj)
        if not spec.selector.matches(labels):
            continue  # a Crossplane that did not filter by label
        uid = structs.str_at(obj, "metadata", "uid") or ""
        name = "/".join(
            p
            for p in (
                structs.str_at(obj, "metadata", "namespace"),
                structs.str_at(obj, "metadata", "name"),
            )
            if p
        )
        report = structs.struct_at(obj, "status", "rollout")
        ours = (
            report is not None
            and structs.str_at(report, "name") == me
            and structs.str_at(report, "revision") == rev
        )
        out.append(
            Member(
                name,
                labels,
                bucket(uid),
                (structs.str_at(report, "phase") or "") if ours and report is not None else "",
                (structs.str_at(report, "reason") or "") if ours and report is not None else "",
                (structs.str_at(report, "healthySince") or "")
                if ours and report is not None
                else "",
            )
        )
    return out


def _threshold(
    spec: RolloutSpec, index: int, opened: list[OpenWave], members: list[Member]
) -> float | None:
    """The bucket bound that makes strategy.waves[index] admit its share of the fleet now."""
    wave = spec.strategy.waves[index]
    size = wave.size(len(members))
    if size is None:
        return None
    canary = spec.strategy.canary
    eligible = sorted(
        m.place
        for m in members
        if wave_of(spec.strategy, opened, m.labels, m.place) is None
        and not (canary is not None and canary.matches(m.labels))
        and (wave.selector is None or wave.selector.matches(m.labels))
    )
    floor = max((w.threshold or 0.0 for w in opened if w.name != CANARY), default=0.0)
    if not eligible:
        return floor
    return max(floor, eligible[min(size, len(eligible)) - 1] + BUCKET_STEP)


def _open(
    spec: RolloutSpec, index: int, opened: list[OpenWave], members: list[Member], now: float
) -> OpenWave:
    return OpenWave(
        name=wave_name(index),
        threshold=_threshold(spec, index, opened, members),
        openedAt=rfc3339(now),
    )


def _note(members: list[Member]) -> list[ClusterNote]:
    return [ClusterNote(name=m.name, reason=m.reason) for m in members[:LISTED]]


def _failed(
    failed: list[Member], late: list[Member], last: RolloutStatus, deadline_s: int
) -> list[ClusterNote]:
    """``status.failed``: who failed, who was not healthy when the deadline stopped it.

    Once the rollout stopped, those it named then stay named.
    """
    notes = _note(failed) + [
        ClusterNote(
            name=m.name,
            reason=f"not healthy within the progress deadline ({deadline_s}s): "
            f"{m.phase or 'not reported'}" + (f", {m.reason}" if m.reason else ""),
        )
        for m in late
    ]
    if last.phase in FAILED_PHASES:
        # Once it rolled back, they report RolledBack, not Failed: without this the status
        # would no longer say which clusters stopped it.
        named = {n.name for n in notes}
        notes += [n for n in last.failed if n.name not in named]
    return notes[:LISTED]


def decide(
    spec: RolloutSpec, last: RolloutStatus, members: list[Member], now: float
) -> RolloutStatus:
    """The rollout's next status: the whole decision, a pure function of what it reads."""
    rev = revision(spec.target.model_dump(by_alias=True, mode="json"))
    strategy = spec.strategy
    if last.revision != rev:
        # A new target: start again with the canary (or the first wave).
        first = (
            OpenWave(name=CANARY, openedAt=rfc3339(now))
            if strategy.canary is not None
            else _open(spec, 0, [], members, now)
        )
        last = RolloutStatus(
            revision=rev,
            phase=Phase.PROGRESSING,
            waves=[first],
            progressSince=rfc3339(now),
            settled=last.settled,
        )
    opened = list(last.waves)
    in_waves = [(m, wave_of(strategy, opened, m.labels, m.place)) for m in members]
    admitted = [m for m, w in in_waves if w is not None]
    skipped = [m for m in members if m.phase == SKIPPED]
    failed = [m for m in admitted if m.phase == FAILED]
    updated = [m for m in admitted if m.phase == HEALTHY]
    soaked = [m for m in updated if now - seconds_of(m.healthy_since) >= strategy.soak_seconds]
    done = {m.name for m in (*skipped, *failed, *soaked)}
    waiting = [m for m in admitted if m.name not in done]
    counts = ClusterCount(
        selected=len(members),
        admitted=len(admitted),
        updated=len(updated),
        healthy=len(soaked),
        failed=len(failed),
        skipped=len(skipped),
    )
    phase = last.phase or Phase.PROGRESSING
    progress_since = last.progress_since
    message = last.message
    late: list[Member] = []  # not healthy when the progress deadline stopped the rollout
    if phase not in FAILED_PHASES:
        deadline = seconds_of(progress_since) + strategy.progress_deadline_seconds
        failing = ""
        if len(failed) > strategy.max_failures:
            failing = (
                f"{len(failed)} clusters failed, more than maxFailures {strategy.max_failures}"
            )
        elif waiting and not strategy.paused and now > deadline:
            failing = (
                f"{opened[-1].name} is past its progress deadline "
                f"({strategy.progress_deadline_seconds}s) with {len(waiting)} clusters not healthy"
            )
            late = waiting
        if failing:
            phase = Phase.ROLLED_BACK if strategy.on_failure is OnFailure.ROLLBACK else Phase.HALTED
            message = failing + (
                ": every admitted cluster goes back"
                if phase is Phase.ROLLED_BACK
                else ": no new cluster is admitted"
            )
        elif strategy.paused:
            phase, progress_since = Phase.PAUSED, rfc3339(now)
            message = "paused: no new wave opens"
        elif waiting:
            phase = Phase.PROGRESSING
            shown = ", ".join(f"{m.name} ({m.phase or 'not reported'})" for m in waiting[:5])
            more = f" and {len(waiting) - 5} more" if len(waiting) > 5 else ""
            message = f"{opened[-1].name}: waiting for {shown}{more}"
        else:
            opened_waves = sum(1 for w in opened if w.name != CANARY)
            if opened_waves < len(strategy.waves):
                opened.append(_open(spec, opened_waves, opened, members, now))
                phase, progress_since = Phase.PROGRESSING, rfc3339(now)
                message = f"{opened[-1].name} opened"
                # The new wave's members count from now on.
                counts = counts.model_copy(
                    update={
                        "admitted": sum(
                            1 for m in members if wave_of(strategy, opened, m.labels, m.place)
                        )
                    }
                )
            else:
                phase = Phase.COMPLETE
                message = f"every wave is healthy: {len(soaked)} clusters at the target"
                last = last.model_copy(
                    update={"settled": Settled(revision=rev, target=spec.target)}
                )
    return RolloutStatus(
        revision=rev,
        phase=phase,
        wave=opened[-1].name if opened else "",
        waves=opened,
        progressSince=progress_since,
        counts=counts,
        failed=_failed(failed, late, last, strategy.progress_deadline_seconds),
        skipped=_note(skipped),
        message=message,
        settled=last.settled,
    )


def requirements(req: fnv1.RunFunctionRequest, spec: RolloutSpec, step: StepInput) -> Requirements:
    """Every ClusterPlugin the selector's labels match, in any namespace."""
    sel = Selector(
        f"{XR_GROUP}/{XR_VERSION}",
        step.fleet.cluster_plugin_kind,
        match_labels=tuple(sorted(spec.selector.match_labels.items())),
    )
    both = not supports_required_resources(req)
    return Requirements({REQ_PLUGINS: sel}, {REQ_PLUGINS: sel} if both else {}, both)


def read_status(xr: struct_pb2.Struct) -> RolloutStatus:
    """The rollout's own status as it last wrote it (empty if unreadable)."""
    found = structs.struct_at(xr, "status")
    if found is None:
        return RolloutStatus()
    mine = {k: structs.to_python(v) for k, v in found.fields.items() if k in _STATUS_KEYS}
    try:
        return RolloutStatus.model_validate(mine)
    except ValidationError:
        return RolloutStatus()


_STATUS_KEYS = frozenset(f.alias or n for n, f in RolloutStatus.model_fields.items())


def answer(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, now: float
) -> RolloutStatus | None:
    """Fill ``rsp`` for a ClusterPluginRollout; InvalidInputError for a bad spec or input.

    None while Crossplane has not sent the ClusterPlugins yet (first call).
    """
    xr = req.observed.composite.resource
    spec = parse(structs.struct_at(xr, "spec") or struct_pb2.Struct())
    step = accept_step_input(req.input)
    requirements(req, spec, step).write(rsp.requirements)
    plugins = required_objects_any(req)
    if plugins is None:
        rsp.meta.ttl.FromSeconds(1)
        return None
    me = structs.str_at(xr, "metadata", "name") or ""
    rev = revision(spec.target.model_dump(by_alias=True, mode="json"))
    status = decide(spec, read_status(xr), _members(plugins, spec, me, rev), now)
    body: dict[str, Any] = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    structs.update(rsp.desired.composite.resource.fields["status"].struct_value, body)
    settled = status.phase in (Phase.COMPLETE, *FAILED_PHASES)
    rsp.meta.ttl.FromSeconds(step.ttl.ready if settled else step.ttl.waiting)
    return status


def required_objects_any(req: fnv1.RunFunctionRequest) -> list[struct_pb2.Struct] | None:
    """The ClusterPlugins Crossplane resolved, in every namespace; None if not resolved yet."""
    found: list[struct_pb2.Struct] | None = None
    for resolved in (req.required_resources, req.extra_resources):
        if REQ_PLUGINS in resolved:
            found = (found or []) + [r.resource for r in resolved[REQ_PLUGINS].items]
            if found:
                return found
    return found
