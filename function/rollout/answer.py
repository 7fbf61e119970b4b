"""The ClusterPluginRollout's own answer: it reads the fleet's health and opens the next wave.

It composes nothing and writes only its own status. Each call it asks Crossplane for the
ClusterPlugins its selector's labels match (across namespaces), reads what each reports in
``status.rollout`` (``function/following/target.py``) and, for the current target's revision:

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

import dataclasses
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import structs
from function.accept import accept_step_input_struct as accept_step_input
from function.clock import rfc3339, seconds_of
from function.cluster import Requirements, Selector, supports_required_resources
from function.flavour import XR_GROUP, XR_VERSION
from function.following.target import FAILED, HEALTHY, SKIPPED
from function.rollout.accept import parse
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
    Strategy,
    bucket,
    revision,
    wave_name,
    wave_of,
)
from function.step_input import StepInput

# At most this many failed and skipped clusters are named in the status (the counts say all).
LISTED = 20
# How status.failed names a cluster not healthy when a progress deadline passed.
_LATE = "not healthy within the progress deadline"


@dataclass(frozen=True)
class Member:
    """One selected ClusterPlugin as the rollout reads it."""

    name: str  # <namespace>/<name>
    labels: dict[str, str]
    place: float  # its bucket
    phase: str  # what it reports for this revision ("" if nothing)
    reason: str
    healthy_since: str
    # The other rollouts that select it too, as it reports them while it follows this one.
    conflicts: tuple[str, ...] = ()


def _members(
    plugins: list[struct_pb2.Struct], spec: RolloutSpec, me: str, rev: str
) -> list[Member]:
    out = []
    for obj in plugins:
        labels = structs.labels_of(obj)
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
        followed = (structs.str_at(report, "name") or "") if report is not None else ""
        conflicts: tuple[str, ...] = ()
        if report is not None and "conflicts" in report.fields:
            conflicts = tuple(v.string_value for v in report.fields["conflicts"].list_value.values)
        if followed and followed != me and me in conflicts:
            # It follows another rollout that selects it too (the first by name): it sits
            # this one out, and says so.
            out.append(
                Member(
                    name,
                    labels,
                    bucket(uid),
                    SKIPPED,
                    f"follows rollout {followed}, which selects it too (the first by name is "
                    "followed)",
                    "",
                )
            )
            continue
        ours = report is not None and followed == me and structs.str_at(report, "revision") == rev
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
                conflicts if followed == me else (),
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
    before = {n.name: n.reason for n in last.failed}
    notes = _note(failed) + [
        ClusterNote(
            name=m.name,
            reason=before[m.name]
            if before.get(m.name, "").startswith(_LATE)
            else f"{_LATE} ({deadline_s}s): {m.phase or 'not reported'}"
            + (f", {m.reason}" if m.reason else ""),
        )
        for m in late
    ]
    if last.phase in FAILED_PHASES:
        # Once it rolled back, they report RolledBack, not Failed: without this the status
        # would no longer say which clusters stopped it.
        named = {n.name for n in notes}
        notes += [n for n in last.failed if n.name not in named]
    return notes[:LISTED]


@dataclass(frozen=True)
class _Standing:
    """Where the members stand for this revision, as they report it."""

    admitted: list[Member]  # in an open wave
    skipped: list[Member]
    failed: list[Member]  # admitted, their own upgrade failed
    updated: list[Member]  # admitted, healthy at the target
    soaked: list[Member]  # of them, for soakSeconds
    late: list[Member]  # admitted, not healthy when a progress deadline passed
    waiting: list[Member]  # admitted, none of the above


def _stand(
    strategy: Strategy,
    opened: list[OpenWave],
    last: RolloutStatus,
    members: list[Member],
    now: float,
) -> _Standing:
    admitted = [m for m in members if wave_of(strategy, opened, m.labels, m.place) is not None]
    skipped = [m for m in members if m.phase == SKIPPED]
    failed = [m for m in admitted if m.phase == FAILED]
    updated = [m for m in admitted if m.phase == HEALTHY]
    soaked = [m for m in updated if now - seconds_of(m.healthy_since) >= strategy.soak_seconds]
    settled = {m.name for m in (*skipped, *failed, *updated)}
    # Not healthy when a progress deadline passed: past the open wave's deadline now (the
    # clock stops while paused), or named so in status.failed since (until healthy).
    past = (
        not strategy.paused
        and now > seconds_of(last.progress_since) + strategy.progress_deadline_seconds
    )
    named_late = {n.name for n in last.failed if n.reason.startswith(_LATE)}
    late = [m for m in admitted if m.name not in settled and (past or m.name in named_late)]
    done = {m.name for m in (*skipped, *failed, *soaked, *late)}
    waiting = [m for m in admitted if m.name not in done]
    return _Standing(admitted, skipped, failed, updated, soaked, late, waiting)


@dataclass(frozen=True)
class _Step:
    """What the rollout does in this call."""

    phase: Phase
    message: str
    progress_since: str
    opened: list[OpenWave]
    settled: Settled | None


def decide(
    spec: RolloutSpec, last: RolloutStatus, members: list[Member], now: float
) -> RolloutStatus:
    """The rollout's next status: the whole decision, a pure function of what it reads.

    A cluster admitted to an open wave is done when it has soaked healthy at the target, or
    failed (its own upgrade, or not healthy when the progress deadline passed: then it counts
    against ``maxFailures`` like a failure, and stays counted until it is healthy). Complete
    needs every admitted cluster healthy at the target; once said for a target it stays.
    """
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
    standing = _stand(strategy, list(last.waves), last, members, now)
    step = _step(spec, last, standing, members, now=now, rev=rev)
    return RolloutStatus(
        revision=rev,
        phase=step.phase,
        wave=step.opened[-1].name if step.opened else "",
        waves=step.opened,
        progressSince=step.progress_since,
        counts=ClusterCount(
            selected=len(members),
            # A wave opened in this call counts its members from now on.
            admitted=sum(1 for m in members if wave_of(strategy, step.opened, m.labels, m.place)),
            updated=len(standing.updated),
            healthy=len(standing.soaked),
            failed=len(standing.failed) + len(standing.late),
            skipped=len(standing.skipped),
        ),
        failed=_failed(standing.failed, standing.late, last, strategy.progress_deadline_seconds),
        skipped=_note(standing.skipped),
        conflicts=[
            ClusterNote(
                name=m.name,
                reason="also selected by "
                + ", ".join(f"rollout {c}" for c in m.conflicts)
                + ", which skip it (the first by name is followed)",
            )
            for m in members
            if m.conflicts
        ][:LISTED],
        message=step.message,
        settled=step.settled,
    )


def _step(
    spec: RolloutSpec,
    last: RolloutStatus,
    standing: _Standing,
    members: list[Member],
    *,
    now: float,
    rev: str,
) -> _Step:
    strategy = spec.strategy
    opened = list(last.waves)
    phase = last.phase or Phase.PROGRESSING
    kept = _Step(phase, last.message, last.progress_since, opened, last.settled)
    if phase is Phase.COMPLETE or phase in FAILED_PHASES:
        # Said for this target once, it stays said: a cluster that fails later is counted,
        # and a failed rollout starts again only with a new target.
        return kept
    failing = _failing(strategy, standing, opened[-1].name)
    if failing:
        phase = Phase.ROLLED_BACK if strategy.on_failure is OnFailure.ROLLBACK else Phase.HALTED
        back = phase is Phase.ROLLED_BACK
        why = ": every admitted cluster goes back" if back else ": no new cluster is admitted"
        return dataclasses.replace(kept, phase=phase, message=failing + why)
    if strategy.paused:
        return dataclasses.replace(
            kept,
            phase=Phase.PAUSED,
            progress_since=rfc3339(now),
            message="paused: no new wave opens",
        )
    if standing.waiting:
        return dataclasses.replace(
            kept,
            phase=Phase.PROGRESSING,
            message=f"{opened[-1].name}: waiting for {_listed(standing.waiting)}",
        )
    opened_waves = sum(1 for w in opened if w.name != CANARY)
    if opened_waves < len(strategy.waves):
        opened.append(_open(spec, opened_waves, opened, members, now))
        return _Step(
            Phase.PROGRESSING, f"{opened[-1].name} opened", rfc3339(now), opened, last.settled
        )
    return _last_wave_done(spec, kept, standing, rev)


def _last_wave_done(spec: RolloutSpec, kept: _Step, standing: _Standing, rev: str) -> _Step:
    """Every wave opened and none waits: Complete, if every admitted cluster is healthy."""
    at_target = {m.name for m in (*standing.skipped, *standing.soaked)}
    unhealthy = [m for m in standing.admitted if m.name not in at_target]
    if unhealthy:
        # Every wave passed within maxFailures, but not every admitted cluster runs the
        # target healthy: not Complete (a person retries them, or changes the target).
        return dataclasses.replace(
            kept,
            phase=Phase.PROGRESSING,
            message=f"every wave opened, within maxFailures {spec.strategy.max_failures}; not "
            f"complete while these are not healthy at the target: {_listed(unhealthy)}",
        )
    also = f" ({len(standing.skipped)} skipped)" if standing.skipped else ""
    return dataclasses.replace(
        kept,
        phase=Phase.COMPLETE,
        message=f"every wave is healthy: {len(standing.soaked)} clusters at the target{also}",
        settled=Settled(revision=rev, target=spec.target),
    )


def _failing(strategy: Strategy, standing: _Standing, wave: str) -> str:
    """Why the rollout fails now ("" if it does not): more failures than it tolerates."""
    failed, late = standing.failed, standing.late
    if len(failed) + len(late) <= strategy.max_failures:
        return ""
    parts = [f"{len(failed)} clusters failed"] if failed else []
    if late:
        parts.append(
            f"{len(late)} not healthy within the progress deadline "
            f"({strategy.progress_deadline_seconds}s) of {wave}"
        )
    return " and ".join(parts) + f", more than maxFailures {strategy.max_failures}"


def _listed(members: list[Member]) -> str:
    shown = ", ".join(_shown(m) for m in members[:5])
    return shown + (f" and {len(members) - 5} more" if len(members) > 5 else "")


def _shown(m: Member) -> str:
    return f"{m.name} ({m.phase or 'not reported'}" + (f": {m.reason}" if m.reason else "") + ")"


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
