"""Day two of one cluster: a Release moves to a new spec only when it may.

Each move is proven healthy or rolled back, and its IAM moves with it (expand, then contract).

See docs/architecture.md, "Day two: upgrades". Per observed Release of a wanted plugin,
call by call:

- **What runs.** The Release's spec (``spec.forProvider``: chart and values) is what the
  function wrote last; ``status.atProvider.version`` the chart helm deployed. It runs its
  spec when it is ready for its current generation with that chart deployed
  (``observed.release_ready``): a Ready=True of the revision before is stale.
- **A move** is a change of the spec the add-on's declaration now builds (a new chart
  version, new values, a new fact such as the control plane's minor). Moves are serialized
  per XR: one starts only while no other Release is in flight (Upgrading or RollingBack,
  soak included), never while the cluster goes away, never while a failed upgrade is held,
  only once the node's gates hold (what it depends on runs its own spec) and only once its
  IAM covers the new chart version. The Releases others depend on go first
  (``registry.UPGRADE_ORDER``). Until then the Release keeps the spec it has.
- **The health gate.** A move is Healthy once the Release runs the new spec and has done so
  for ``spec.upgradePolicy.soakSeconds``; it has Failed when helm left the release failed,
  or when it does not run the new spec within ``progressDeadlineSeconds``.
- **The way back.** On a failure with ``onFailure: Rollback`` the Release gets back the last
  spec that ran healthy (chart and values), and is RolledBack once that runs again; with
  ``Hold`` it keeps the failed spec (Failed) and no other Release moves until a person acts.
  Either way the failed spec is not tried again until the spec the function builds changes
  (a new version or values), or the XR's ``clusterplugin.dev/retry-upgrade`` annotation does.
- **IAM as one unit.** An add-on whose policy depends on its chart version grants, while a
  move is wanted or under way, the union of the last healthy version's and the target's
  (``chart_versions``); the Release moves only once the policy holding that union is ready
  for its current generation; the policy narrows to the new version's once the move is
  Healthy, and, on the way back, to the old one's only once the rollback runs.

The memory of a move lives on the Release itself, in two annotations Crossplane applies with
the spec it belongs to (so a reconcile that wrote the spec wrote the record too): the record
(``clusterplugin.dev/upgrade``) and, while it differs from the spec, the last healthy spec
(``clusterplugin.dev/last-healthy``). ``status.plugins[]`` reports what they say. The clock is
the call's ``now`` (``CallContext.now``): the plan stays a pure function of the request and it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from google.protobuf import struct_pb2

from function import structs
from function.clock import rfc3339, seconds_of
from function.context import CallContext
from function.graph import ROLLBACK_LIMIT, MissingFactError, Node, Plugin, Readiness, Wait
from function.observed import fields_at

# Whether an add-on's IAM grants what some chart versions of its release need (registry.IAM_CHECKS).
IAMCheck = Callable[[CallContext, tuple[str, ...]], Wait | None]

RECORD_ANNOTATION = "clusterplugin.dev/upgrade"
LAST_HEALTHY_ANNOTATION = "clusterplugin.dev/last-healthy"
# On the XR: a new value lets a failed spec be tried again as it is.
RETRY_ANNOTATION = "clusterplugin.dev/retry-upgrade"
# On a Release whose first install failed: provider-helm's count of its tries (status.failed).
# With a rollbackLimit, provider-helm uninstalls such a release to retry, and then installs
# again only at its next poll (crossplane-runtime requeues a successful update after the poll
# interval, 10 minutes by default): an add-on cut off mid-install by a network blip stayed
# missing that long. A new value of an annotation is a change of desired state, which
# provider-helm acts on at once (its watch's DesiredStateChanged predicate).
INSTALL_TRY_ANNOTATION = "clusterplugin.dev/install-try"


class Phase(StrEnum):
    """Where a Release stands on day two (``status.plugins[].upgrade``)."""

    HEALTHY = "Healthy"
    UPGRADING = "Upgrading"
    FAILED = "Failed"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"


# A move in flight: no other Release moves meanwhile.
IN_FLIGHT = frozenset({Phase.UPGRADING, Phase.ROLLING_BACK})
# What the XR's summary says when Releases stand differently: the first that any does.
SUMMARY_ORDER = (Phase.FAILED, Phase.ROLLING_BACK, Phase.UPGRADING, Phase.ROLLED_BACK)


@dataclass(frozen=True)
class Failure:
    """A spec that failed: not tried again until the function builds another, or a retry."""

    version: str
    target: str  # digest of the failed spec.forProvider
    message: str
    retry: str = ""  # the XR's RETRY_ANNOTATION when it failed


@dataclass(frozen=True)
class Record:
    """``clusterplugin.dev/upgrade`` on a Release."""

    phase: Phase
    since: str  # RFC 3339: when the phase began (Healthy: healthy since)
    version: str = ""  # the chart version moved to (in flight), or running (steady)
    target: str = ""  # digest of the spec.forProvider moved to
    # In flight: since when the Release has run the target (the soak's start).
    running_since: str = ""
    failed: Failure | None = None

    @functools.cached_property
    def annotation(self) -> str:
        """The annotation's value: compact JSON, empty fields left out.

        Computed once per Record: the one a converged Release carries is parse_record's,
        shared by every call (a frozen dataclass keeps it in its ``__dict__``).
        """
        out: dict[str, Any] = {"phase": str(self.phase), "since": self.since}
        for key, value in (
            ("version", self.version),
            ("target", self.target),
            ("runningSince", self.running_since),
        ):
            if value:
                out[key] = value
        if self.failed is not None:
            failed = {
                "version": self.failed.version,
                "target": self.failed.target,
                "message": self.failed.message,
            }
            if self.failed.retry:
                failed["retry"] = self.failed.retry
            out["failed"] = failed
        return json.dumps(out, separators=(",", ":"), sort_keys=True)


@functools.lru_cache(maxsize=4096)
def parse_record(text: str) -> Record | None:
    """The record an annotation holds; None for anything else (someone's edit)."""
    try:
        raw = json.loads(text)
        failed = raw.get("failed")
        return Record(
            phase=Phase(raw["phase"]),
            since=str(raw["since"]),
            version=str(raw.get("version", "")),
            target=str(raw.get("target", "")),
            running_since=str(raw.get("runningSince", "")),
            failed=None
            if not failed
            else Failure(
                str(failed["version"]),
                str(failed["target"]),
                str(failed.get("message", "")),
                str(failed.get("retry", "")),
            ),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def digest(for_provider: struct_pb2.Struct) -> str:
    """A Release spec's identity: what a failed or an in-flight spec is known by."""
    data = for_provider.SerializeToString(deterministic=True)
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True)
class Policy:
    """``spec.upgradePolicy``, as the planner reads it."""

    soak_seconds: int
    progress_deadline_seconds: int
    rollback: bool  # onFailure: Rollback (else Hold)


@dataclass(kw_only=True)
class Decision:
    """What one call does with one observed Release (made by name: ``_keep``, ``_move``...)."""

    node: str
    # The Release to emit, the chosen spec.forProvider and the record in it; None: the
    # function could not build it (a fact missing) and the planner carries it over.
    body: struct_pb2.Struct | None
    record: Record | None
    running: str | None  # the chart version helm deployed (status.atProvider.version)
    target_version: str | None  # while in flight or waiting: the version moved to
    last_healthy_version: str | None
    wait: Wait | None = None  # why a wanted move waits (a gate, IAM, another Release)
    message: str = ""  # for status.plugins[].message
    # The chart versions whose permissions the add-on's IAM must grant in this call.
    versions: tuple[str, ...] = ()
    # Seconds until the soak or the deadline of a move in flight ends (when to call again).
    due_in: float | None = None
    # A new spec.forProvider is written in this call (a move starts, or a rollback).
    moved: bool = False

    @property
    def phase(self) -> Phase | None:
        """The Release's day-two phase, None before it first ran healthy."""
        return None if self.record is None else self.record.phase


@dataclass
class Upgrades:
    """Every decision of one call, and what follows for the XR."""

    decisions: dict[str, Decision] = field(default_factory=dict)

    def versions(self, node: str) -> tuple[str, ...]:
        """The chart versions ``node``'s IAM must grant now (empty: not decided)."""
        decision = self.decisions.get(node)
        return () if decision is None else decision.versions

    @property
    def summary(self) -> Phase | None:
        """The XR's day-two phase: the first of SUMMARY_ORDER any Release is in, else Healthy."""
        phases = {d.record.phase for d in self.decisions.values() if d.record is not None}
        if not phases:
            return None
        return next((p for p in SUMMARY_ORDER if p in phases), Phase.HEALTHY)

    @property
    def moving(self) -> frozenset[str]:
        """The Releases given a new spec in this call."""
        return frozenset(n for n, d in self.decisions.items() if d.moved)

    @property
    def due_in(self) -> float | None:
        """The soonest a soak or a deadline ends."""
        due = [d.due_in for d in self.decisions.values() if d.due_in is not None]
        return min(due) if due else None


class _Observed(NamedTuple):
    """What one call reads of an observed Release (a tuple: one per Release of every call)."""

    obj: struct_pb2.Struct
    for_provider: struct_pb2.Struct
    record: Record | None
    runs_spec: bool  # observed.release_ready: it runs the spec it holds
    running: str | None  # status.atProvider.version
    problem: str  # the provider's Synced=False message, if any
    install_tries: str  # what it carries in INSTALL_TRY_ANNOTATION (see _install_tries)

    @property
    def failed(self) -> bool:
        """Whether helm left the release failed (read only for a move in flight)."""
        return structs.str_at(self.obj, "status", "atProvider", "state") == "failed"


class _Release(NamedTuple):
    """One observed Release of this call: its node, the body built now, what is observed."""

    node: Node
    desired: struct_pb2.Struct
    seen: _Observed
    iam: IAMCheck | None  # whether its add-on's IAM covers chart versions (or None)
    want: struct_pb2.Struct  # desired's spec.forProvider: the spec built now


def _read(obj: struct_pb2.Struct, *, runs_spec: bool, running: str | None) -> _Observed:
    fields = obj.fields
    annotations = _annotations(fields)
    text = annotations[RECORD_ANNOTATION].string_value if RECORD_ANNOTATION in annotations else ""
    spec = fields_at(fields, "spec")
    fp = spec["forProvider"].struct_value if "forProvider" in spec else struct_pb2.Struct()
    problem = "" if runs_spec else _synced_problem(obj)
    return _Observed(
        obj,
        fp,
        parse_record(text) if text else None,
        runs_spec,
        running,
        problem,
        # A Release that ran healthy once has a record: its failed upgrades are day two's.
        _install_tries(obj, annotations, installing=not text),
    )


def _synced_problem(obj: struct_pb2.Struct) -> str:
    """The message (else the reason) of the Release's Synced=False, or ""."""
    problem = ""
    for cond in structs.structs_at(obj, "status", "conditions"):
        if structs.str_at(cond, "type") == "Synced" and structs.str_at(cond, "status") == "False":
            problem = structs.str_at(cond, "message") or structs.str_at(cond, "reason") or ""
    return problem


def _annotations(fields: Mapping[str, struct_pb2.Value]) -> Mapping[str, struct_pb2.Value]:
    """The fields of ``metadata.annotations`` of an object's ``fields`` (empty when none)."""
    return fields_at(fields_at(fields, "metadata"), "annotations")


def _for_provider(body: struct_pb2.Struct) -> struct_pb2.Struct:
    return body.fields["spec"].struct_value.fields["forProvider"].struct_value


def _holds(observed: struct_pb2.Struct, desired: struct_pb2.Struct) -> bool:
    """Whether the observed spec.forProvider holds every field the desired one sets, equal.

    Fields only the observed one has are the API server's defaults (maxHistory) or the
    provider's late initialization: not a difference.
    """
    have = observed.fields
    return all(k in have and _same(k, have[k], v) for k, v in desired.fields.items())


def _same(key: str, have: struct_pb2.Value, want: struct_pb2.Value) -> bool:
    """Whether the observed ``have`` is the desired ``want`` of forProvider's ``key``.

    ``chart`` may hold more than the function wrote (provider-helm's empty pullSecretRef, on the
    real provider): it holds ``want`` when it holds each of its fields. Anything else is equal
    or not (a value left out of ``values`` is a change).
    """
    if key == "chart" and have.HasField("struct_value") and want.HasField("struct_value"):
        chart = have.struct_value.fields
        return all(k in chart and chart[k] == v for k, v in want.struct_value.fields.items())
    return have == want


# What makes provider-helm run a helm upgrade (its isUpToDate): the chart, the values, the
# patches; the namespace makes it another release. A change of anything else (wait,
# waitTimeout, maxHistory) is applied as it comes: helm runs nothing, there is nothing to soak.
HELM_FIELDS = ("chart", "namespace", "values", "valuesFrom", "set", "patchesFrom")


def _helm_holds(observed: struct_pb2.Struct, desired: struct_pb2.Struct) -> bool:
    """Whether what helm installs is the same (``_holds`` on HELM_FIELDS alone)."""
    have, want = observed.fields, desired.fields
    return all(
        (k in have and _same(k, have[k], want[k])) if k in want else k not in have
        for k in HELM_FIELDS
    )


def _chart_version(for_provider: struct_pb2.Struct) -> str:
    return structs.str_at(for_provider, "chart", "version") or ""


def _last_healthy(obj: struct_pb2.Struct) -> struct_pb2.Struct | None:
    text = structs.str_at(obj, "metadata", "annotations", LAST_HEALTHY_ANNOTATION)
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    out = struct_pb2.Struct()
    structs.fill(out, raw)
    return out


def _as_written(for_provider: struct_pb2.Struct, desired: struct_pb2.Struct) -> struct_pb2.Struct:
    """The observed ``for_provider`` with only the fields the function writes (``_to_json``)."""
    out = struct_pb2.Struct()
    structs.fill(out, json.loads(_to_json(for_provider, _for_provider(desired))))
    return out


def _to_json(for_provider: struct_pb2.Struct, written: struct_pb2.Struct) -> str:
    """The spec that ran healthy, as the function wrote it, for the record.

    The fields it writes (``written``'s), without what the API server or provider-helm added
    (maxHistory's default, an empty chart.pullSecretRef): writing it back is what the function
    once wrote.
    """
    have = structs.to_python(struct_pb2.Value(struct_value=for_provider))
    wrote = structs.to_python(struct_pb2.Value(struct_value=written))
    assert isinstance(have, dict) and isinstance(wrote, dict)  # noqa: S101  # Structs
    kept = {k: v for k, v in have.items() if k in wrote}
    chart = kept.get("chart")
    if isinstance(chart, dict):
        ours = {"name", "repository", "version", *wrote.get("chart", {})}
        kept["chart"] = {k: v for k, v in chart.items() if k in ours}
    return json.dumps(kept, separators=(",", ":"), sort_keys=True)


def _emit(
    release: _Release,
    for_provider: struct_pb2.Struct,
    record: Record | None,
    last_healthy: str | None,
) -> struct_pb2.Struct:
    """The Release to emit: the desired one with ``for_provider`` and the memory annotations.

    ``release.desired`` is this call's own (built for it): with its own spec (``release.want``)
    it is annotated in place (the common case, on the hot path), with another spec a copy is made.
    """
    desired = release.desired
    if for_provider is release.want:
        out = desired
    else:
        out = struct_pb2.Struct()
        out.CopyFrom(desired)
        spec = out.fields["spec"].struct_value
        spec.fields["forProvider"].struct_value.Clear()
        spec.fields["forProvider"].struct_value.CopyFrom(for_provider)
    annotations = out.fields["metadata"].struct_value.fields["annotations"].struct_value
    fields = annotations.fields
    if record is not None:
        fields[RECORD_ANNOTATION].string_value = record.annotation
    elif RECORD_ANNOTATION in fields:
        del fields[RECORD_ANNOTATION]  # annotated in place before, in this call
    if last_healthy:
        fields[LAST_HEALTHY_ANNOTATION].string_value = last_healthy
    elif LAST_HEALTHY_ANNOTATION in fields:
        del fields[LAST_HEALTHY_ANNOTATION]
    return out


@dataclass
class _Call:
    """What every Release's decision in one call shares."""

    ctx: CallContext
    policy: Policy
    now: float
    retry: str  # the XR's RETRY_ANNOTATION
    may_move: Wait | None  # why no move may start in this call at all (cluster going away)
    in_flight: str = ""  # the Release in flight (at the start, or started in this call)
    held: str = ""  # a Release whose failed spec is held


def _failure(call: _Call, version: str, target: str, seen: _Observed) -> Failure:
    if seen.failed:
        why = f"helm left the release failed: {seen.problem or 'no message'}"
    else:
        why = (
            f"not running within the progress deadline of {call.policy.progress_deadline_seconds}s"
        )
        if seen.problem:
            why += f": {seen.problem}"
    return Failure(version, target, why, call.retry)


# --- the decisions, by name: what one call does with one Release ----------------------------
# Each writes the Release's body (``_emit``: a spec and the memory annotations) and says what
# the planner and the XR's status need of it. ``last_healthy`` is the annotation's JSON (None:
# none, the spec held is the last healthy one); ``versions`` what its IAM must grant now.


def _keep(
    release: _Release,
    for_provider: struct_pb2.Struct,
    record: Record | None,
    *,
    last_healthy_version: str | None,
    versions: tuple[str, ...],
    last_healthy: str | None = None,
    message: str = "",
) -> Decision:
    """It keeps ``for_provider``, settled: converged, settled now, held, or not tried again."""
    return Decision(
        node=release.node.name,
        body=_emit(release, for_provider, record, last_healthy),
        record=record,
        running=release.seen.running,
        target_version=None,
        last_healthy_version=last_healthy_version,
        message=message,
        versions=versions,
    )


def _apply(release: _Release, record: Record, version: str) -> Decision:
    """The spec built now, written at once: nothing helm installs changes (nothing to soak)."""
    return Decision(
        node=release.node.name,
        body=_emit(release, release.want, record, None),
        record=record,
        running=release.seen.running,
        target_version=None,
        last_healthy_version=version,
        message=_settled_message(record, version),
        versions=(version,),
        moved=True,
    )


def _install(release: _Release, message: str, versions: tuple[str, ...]) -> Decision:
    """Never healthy yet: the spec built now, as on day one, with no memory."""
    return Decision(
        node=release.node.name,
        body=_emit(release, release.want, None, None),
        record=None,
        running=release.seen.running,
        target_version=None,
        last_healthy_version=None,
        message=message,
        versions=versions,
    )


def _move(
    release: _Release,
    record: Record,
    *,
    last_healthy_version: str,
    last_healthy: str,
    message: str,
    versions: tuple[str, ...],
    due_in: float,
) -> Decision:
    """A move starts: the spec built now, ``record`` Upgrading to it."""
    return Decision(
        node=release.node.name,
        body=_emit(release, release.want, record, last_healthy),
        record=record,
        running=release.seen.running,
        target_version=record.version,
        last_healthy_version=last_healthy_version,
        message=message,
        versions=versions,
        due_in=due_in,
        moved=True,
    )


def _on_its_way(
    release: _Release,
    record: Record,
    *,
    target: str,
    last_healthy_version: str,
    last_healthy: str | None,
    message: str,
    versions: tuple[str, ...],
    due_in: float,
) -> Decision:
    """A move in flight goes on: the spec it holds, not running yet or soaking."""
    return Decision(
        node=release.node.name,
        body=_emit(release, release.seen.for_provider, record, last_healthy),
        record=record,
        running=release.seen.running,
        target_version=target,
        last_healthy_version=last_healthy_version,
        message=message,
        versions=versions,
        due_in=due_in,
    )


def _roll_back(
    release: _Release,
    to: struct_pb2.Struct,
    record: Record,
    *,
    last_healthy: str | None,
    message: str,
    versions: tuple[str, ...],
    due_in: float,
) -> Decision:
    """The move failed: the last healthy spec ``to`` is written back, ``record`` RollingBack."""
    return Decision(
        node=release.node.name,
        body=_emit(release, to, record, last_healthy),
        record=record,
        running=release.seen.running,
        target_version=record.version,
        last_healthy_version=record.version,
        message=message,
        versions=versions,
        due_in=due_in,
        moved=True,
    )


def _hold(
    release: _Release,
    record: Record,
    *,
    last_healthy_version: str,
    last_healthy: str | None,
    versions: tuple[str, ...],
) -> Decision:
    """The move failed and is held (onFailure: Hold, or the way back failed too)."""
    return Decision(
        node=release.node.name,
        body=_emit(release, release.seen.for_provider, record, last_healthy),
        record=record,
        running=release.seen.running,
        target_version=record.version,
        last_healthy_version=last_healthy_version,
        message=_settled_message(record, last_healthy_version),
        versions=versions,
    )


def _wait(
    release: _Release,
    record: Record,
    wait: Wait,
    *,
    version: str,
    to: str,
    last_healthy_version: str,
    last_healthy: str | None,
    versions: tuple[str, ...],
) -> Decision:
    """A move from chart ``version`` to ``to`` is wanted and waits: it keeps what it holds."""
    return Decision(
        node=release.node.name,
        body=_emit(release, release.seen.for_provider, record, last_healthy),
        record=record,
        running=release.seen.running,
        target_version=to,
        last_healthy_version=last_healthy_version,
        wait=wait,
        message=f"{release.node.name}: upgrade {_change(version, to)} waits: "
        f"{wait.message or wait.waiting_for}",
        versions=versions,
    )


# --- the machine: a Release's phase and what decides its next step -------------------------
#
# | phase (record)      | decided by      | what may happen in this call                         |
# |---------------------|-----------------|------------------------------------------------------|
# | none, not running   | _first_seen     | installed as on day one (_install)                   |
# | none, running       | _first_seen     | recorded Healthy, then as Healthy                    |
# | Healthy, RolledBack | _steady         | keep; apply (nothing helm runs); wait; move          |
# | Failed              | _steady         | keep (held), unless the spec built now is a new one  |
# | Upgrading           | _in_flight      | soak; settle Healthy; roll back or hold; go on       |
# |                     |                 | (or, asked for another spec: _steady, from its lh)   |
# | RollingBack         | _in_flight      | soak; settle RolledBack; hold; go on                 |


def _in_flight(call: _Call, release: _Release, record: Record) -> Decision:
    """A Release moving (Upgrading) or moving back (RollingBack) to the spec it holds."""
    seen = release.seen
    moving = _Moving.of(release, record)
    if seen.runs_spec:
        return _soaked_or_soaking(call, release, record, moving)
    deadline = seconds_of(record.since) + call.policy.progress_deadline_seconds
    if seen.failed or call.now >= deadline:
        return _failed(call, release, record, moving)
    detail = f": {seen.problem}" if seen.problem else ""
    waiting = Record(record.phase, record.since, record.version, record.target, "", record.failed)
    return _on_its_way(
        release,
        waiting,
        target=record.version,
        last_healthy_version=moving.lh_version,
        last_healthy=moving.last_healthy,
        message=f"{release.node.name}: {_moving(record, moving.lh_version)} not running yet"
        f"{detail} (deadline {rfc3339(deadline)})",
        versions=moving.versions,
        due_in=deadline - call.now,
    )


class _Moving(NamedTuple):
    """What a move in flight reads of its Release."""

    version: str  # the chart version of the spec it holds
    last_healthy: str | None  # the annotation
    lh: struct_pb2.Struct | None  # the last healthy spec
    lh_version: str
    versions: tuple[str, ...]  # the chart versions its IAM must grant meanwhile

    @classmethod
    def of(cls, release: _Release, record: Record) -> _Moving:
        obj = release.seen.obj
        version = _chart_version(release.seen.for_provider)
        last_healthy = structs.str_at(obj, "metadata", "annotations", LAST_HEALTHY_ANNOTATION)
        lh = _last_healthy(obj)
        lh_version = _chart_version(lh) if lh is not None else version
        failed_version = record.failed.version if record.failed is not None else ""
        versions = tuple(
            v for v in dict.fromkeys((lh_version, version, record.version, failed_version)) if v
        )
        return cls(version, last_healthy, lh, lh_version, versions)


def _soaked_or_soaking(call: _Call, release: _Release, record: Record, moving: _Moving) -> Decision:
    """It runs the spec it moved to: settled once soaked (Healthy, or RolledBack), else soaking."""
    running_since = record.running_since or rfc3339(call.now)
    soaked_at = seconds_of(running_since) + call.policy.soak_seconds
    version = moving.version
    if call.now >= soaked_at:
        if record.phase is Phase.UPGRADING:
            settled = Record(Phase.HEALTHY, rfc3339(call.now), version, record.target)
        else:
            settled = Record(
                Phase.ROLLED_BACK, rfc3339(call.now), version, record.target, failed=record.failed
            )
        # This spec is the last healthy one now; the IAM narrows to its version.
        return _keep(
            release,
            release.seen.for_provider,
            settled,
            last_healthy_version=version,
            versions=(version,),
            message=_settled_message(settled),
        )
    soaking = Record(
        record.phase, record.since, record.version, record.target, running_since, record.failed
    )
    return _on_its_way(
        release,
        soaking,
        target=version,
        last_healthy_version=moving.lh_version,
        last_healthy=moving.last_healthy,
        message=f"{release.node.name}: {_moving(record, moving.lh_version)} runs; soaking for "
        f"{call.policy.soak_seconds}s (until {rfc3339(soaked_at)})",
        versions=moving.versions,
        due_in=soaked_at - call.now,
    )


def _failed(call: _Call, release: _Release, record: Record, moving: _Moving) -> Decision:
    """Helm left it failed, or the deadline passed: roll back (Rollback), else hold."""
    node, seen = release.node, release.seen
    failure = _failure(call, record.version, record.target, seen)
    lh_version = moving.lh_version
    if record.phase is Phase.UPGRADING and call.policy.rollback and moving.lh is not None:
        back = Record(
            Phase.ROLLING_BACK, rfc3339(call.now), lh_version, digest(moving.lh), failed=failure
        )
        return _roll_back(
            release,
            moving.lh,
            back,
            last_healthy=moving.last_healthy,
            message=f"{node.name}: {moving.version} failed ({failure.message}); rolling back "
            f"to {lh_version}",
            # The chart first, then the policy: the failed version's permissions stay
            # until the rollback runs.
            versions=moving.versions,
            due_in=call.policy.progress_deadline_seconds,
        )
    if record.phase is Phase.ROLLING_BACK and record.failed is not None:
        failure = Failure(
            record.failed.version,
            record.failed.target,
            f"{record.failed.message}; the rollback to {record.version} did not run "
            f"either: {failure.message}",
            call.retry,
        )
    held = Record(Phase.FAILED, rfc3339(call.now), record.version, record.target, failed=failure)
    call.held = node.name
    return _hold(
        release,
        held,
        last_healthy_version=lh_version,
        last_healthy=moving.last_healthy,
        versions=moving.versions,
    )


def _change(from_version: str, to_version: str) -> str:
    """A move, as a person reads it: new values alone keep the version."""
    if from_version == to_version:
        return f"{to_version} with new values"
    return f"{from_version} -> {to_version}"


def _moving(record: Record, from_version: str) -> str:
    verb = "upgrade" if record.phase is Phase.UPGRADING else "rollback"
    return f"{verb} {_change(from_version, record.version)}"


def _settled_message(record: Record, last_healthy: str = "") -> str:
    failed = record.failed
    if failed is None:
        return ""
    retry = (
        "set another version or values to try again, or annotate the ClusterPlugin "
        f"{RETRY_ANNOTATION}=<anything new> to retry it as it is"
    )
    if record.phase is Phase.FAILED:
        since = f" (last healthy: {last_healthy})" if last_healthy else ""
        return (
            f"upgrade to {failed.version} failed: {failed.message}; held there "
            f"(onFailure: Hold){since}: no other chart moves until a person acts: {retry}"
        )
    if record.phase is Phase.ROLLED_BACK:
        return (
            f"upgrade to {failed.version} failed: {failed.message}; rolled back to "
            f"{record.version}: {retry}"
        )
    return ""


def _retried(call: _Call, failed: Failure | None, target: str) -> bool:
    """Whether the spec the function builds now may be tried (not the failed one, or a retry)."""
    return failed is None or failed.target != target or failed.retry != call.retry


def _gates_wait(ctx: CallContext, node: Node) -> Wait | None:
    for gate in node.gates:
        wait = gate(ctx)
        if wait is not None:
            return wait
    return None


def _steady(call: _Call, release: _Release, record: Record, *, retarget: bool = False) -> Decision:
    """A Release not in flight: keep its spec, or start moving to the one built now.

    ``retarget``: it was in flight to another spec, which is not healthy: its last healthy
    spec stays the one to come back to.
    """
    seen = release.seen
    fp = seen.for_provider
    version = call.ctx.observed.chart_version(release.node.name) or ""  # _chart_version(fp)
    want = release.want
    # The steady state: it holds the spec built now, equal (one comparison in C); emitted as
    # the spec built now, it is annotated in place, no copy.
    same = fp == want
    if same or _holds(fp, want):
        return _kept(release, want if same else fp, record, version)
    if _helm_holds(fp, want) and record.phase is not Phase.FAILED:
        # Nothing helm installs changes (e.g. waitTimeout's form): applied at once, as is.
        return _apply(release, record, version)
    target = digest(want)
    to = _chart_version(want)
    # A failed spec, or one still moved to, is not a healthy one.
    keep_lh = retarget or record.phase is Phase.FAILED
    last_healthy = (
        structs.str_at(seen.obj, "metadata", "annotations", LAST_HEALTHY_ANNOTATION)
        if keep_lh
        else None
    )
    lh_version = _lh_version(seen, version) if keep_lh else version
    if not _retried(call, record.failed, target):
        return _keep(
            release,
            fp,
            record,
            last_healthy=last_healthy,
            last_healthy_version=lh_version,
            message=_settled_message(record, lh_version),
            versions=_steady_versions(seen, record, version),
        )
    versions = tuple(dict.fromkeys((lh_version, version, to)))
    wait = _why_not_now(call, release, versions)
    if wait is not None:
        return _wait(
            release,
            record,
            wait,
            version=version,
            to=to,
            last_healthy_version=lh_version,
            last_healthy=last_healthy,
            versions=versions,
        )
    call.in_flight = release.node.name
    return _move(
        release,
        Record(Phase.UPGRADING, rfc3339(call.now), to, target),
        last_healthy_version=lh_version,
        # What ran healthy before, to come back to: the spec it holds (unless that failed).
        last_healthy=last_healthy or _to_json(fp, want),
        message=f"{release.node.name}: upgrade {_change(version, to)} started",
        versions=versions,
        due_in=call.policy.progress_deadline_seconds,
    )


def _why_not_now(call: _Call, release: _Release, versions: tuple[str, ...]) -> Wait | None:
    """Why a wanted move may not start in this call, in the order a person should read it."""
    wait = call.may_move
    if wait is None and call.held and call.held != release.node.name:
        wait = Wait(
            f"{call.held} held",
            f"the upgrade of {call.held} failed and is held (onFailure: Hold): no other "
            "chart moves until a person acts",
            reason="upgrade held",
        )
    if wait is None and release.iam is not None:
        wait = release.iam(call.ctx, versions)
    if wait is None and call.in_flight:
        wait = Wait(
            f"{call.in_flight} upgrade",
            f"charts move one at a time: waiting for {call.in_flight}",
            reason="another upgrade",
        )
    if wait is None:
        wait = _gates_wait(call.ctx, release.node)
    return wait


def _kept(
    release: _Release, for_provider: struct_pb2.Struct, record: Record, version: str
) -> Decision:
    """A Release that holds the spec built now: it keeps it (``for_provider``, at ``version``)."""
    if record.phase is Phase.ROLLED_BACK:
        # The spec asks again for what runs (a person took the failed version back out):
        # nothing failed is wanted any more.
        record = Record(Phase.HEALTHY, record.since, record.version, record.target)
    if record.failed is None and record.phase is not Phase.FAILED:
        # Converged (nearly every call): nothing failed to say, its version's permissions alone.
        return _keep(
            release, for_provider, record, last_healthy_version=version, versions=(version,)
        )
    # Only a held Release reads its last healthy spec (the converged one has none).
    seen = release.seen
    lh_version = _lh_version(seen, version) if record.phase is Phase.FAILED else version
    return _keep(
        release,
        for_provider,
        record,
        last_healthy_version=lh_version,
        message=_settled_message(record, lh_version),
        versions=_steady_versions(seen, record, version),
    )


def _lh_version(seen: _Observed, default: str) -> str:
    lh = _last_healthy(seen.obj)
    return _chart_version(lh) if lh is not None else default


def _steady_versions(seen: _Observed, record: Record, version: str) -> tuple[str, ...]:
    if record.phase is Phase.FAILED:
        # Held on the failed version: both its permissions and the last healthy one's.
        return tuple(dict.fromkeys((_lh_version(seen, version), version)))
    return (version,)


def decide(
    ctx: CallContext,
    plugins: Iterable[Plugin],
    *,
    order: dict[str, int],
    policy: Policy,
    retry: str,
    may_move: Wait | None,
    iam: dict[str, IAMCheck],
) -> Upgrades:
    """The day-two decision for every observed Release of the wanted plugins.

    ``order``: the Releases' upgrade order (lower first; ``registry.UPGRADE_ORDER``);
    ``iam``: per Release node, the check that its IAM covers a set of chart versions.
    """
    out = Upgrades()
    call = _Call(ctx, policy, ctx.now, retry, may_move)
    releases: list[_Release] = []
    for plugin in plugins:
        for node in plugin.nodes:
            if node.readiness is not Readiness.RELEASE:
                continue
            obj = ctx.observed.get(node.name)
            if obj is None:
                continue
            try:
                body = node.build(ctx)
            except MissingFactError:
                continue  # the planner carries it over as it is
            desired = ctx.struct_for(node.name)  # the response's own, when there is one
            structs.fill(desired, body)
            seen = _read(
                obj,
                runs_spec=ctx.observed.ready(node.name, node.readiness),
                running=ctx.observed.deployed_version(node.name),
            )
            releases.append(
                _Release(node, desired, seen, iam.get(node.name), _for_provider(desired))
            )
            record = seen.record
            if record is not None and record.phase in IN_FLIGHT:
                call.in_flight = call.in_flight or node.name
            elif record is not None and record.phase is Phase.FAILED:
                call.held = call.held or node.name
    # In flight first (a move settling in this call frees the way for the next one), then in
    # the upgrade order.
    last = len(order)
    releases.sort(
        key=lambda r: (
            r.seen.record is None or r.seen.record.phase not in IN_FLIGHT,
            order.get(r.node.name, last),
        )
    )
    for release in releases:
        decision = _decide_one(call, release)
        tries = release.seen.install_tries
        if tries and decision.body is not None:
            annotations = decision.body.fields["metadata"].struct_value.fields["annotations"]
            annotations.struct_value.fields[INSTALL_TRY_ANNOTATION].string_value = tries
        out.decisions[release.node.name] = decision
    return out


def _retargeted(call: _Call, release: _Release, record: Record) -> bool:
    """Whether the spec built now is neither what is moved to nor what it runs (a new ask)."""
    want = release.want
    if call.may_move is not None or _holds(release.seen.for_provider, want):
        return False
    return digest(want) != record.target


def _decide_one(call: _Call, release: _Release) -> Decision:
    """The machine's one step for one Release (see the table above ``_in_flight``)."""
    node, seen = release.node, release.seen
    record = seen.record
    if record is not None and record.phase is Phase.HEALTHY and seen.for_provider == release.want:
        # Converged (nearly every call): it holds the spec built now, equal (as ``_steady``
        # would find first, with one comparison in C).
        version = call.ctx.observed.chart_version(node.name) or ""
        return _kept(release, release.want, record, version)
    upgrading = record is not None and record.phase is Phase.UPGRADING
    if upgrading and record is not None and _retargeted(call, release, record):
        # Asked for another spec while an upgrade is under way: it goes there instead, from
        # the same last healthy spec (one move in flight, still).
        call.in_flight = call.in_flight if call.in_flight != node.name else ""
        return _steady(
            call, release, dataclasses.replace(record, phase=Phase.HEALTHY), retarget=True
        )
    if record is not None and record.phase in IN_FLIGHT:
        decision = _in_flight(call, release, record)
        if decision.phase not in IN_FLIGHT and call.in_flight == node.name:
            call.in_flight = ""  # settled: the next move may start in this call
        if decision.phase is not Phase.FAILED and call.held == node.name:
            call.held = ""
        return decision
    if record is None:
        return _first_seen(call, release)
    return _steady(call, release, record)


def _first_seen(call: _Call, release: _Release) -> Decision:
    """A Release with no record: installing (never healthy yet), or recorded Healthy now."""
    node, desired, seen = release.node, release.desired, release.seen
    fp = seen.for_provider
    if not seen.runs_spec:
        # Installing (never healthy yet): the spec the function builds, as on day one.
        detail = f"{node.name}: {seen.problem}" if seen.problem else ""
        if seen.install_tries and not detail:
            detail = _install_failed(node.name, int(seen.install_tries))
        return _install(
            release,
            detail,
            tuple(dict.fromkeys((_chart_version(fp), _chart_version(_for_provider(desired))))),
        )
    # Healthy since the provider said Ready (its condition's lastTransitionTime), so the
    # record does not depend on when it is first written.
    since = _ready_since(seen.obj) or rfc3339(call.now)
    # Known by the spec as the function wrote it, as a move's target is (not with what the
    # API server and provider-helm added to it).
    record = Record(Phase.HEALTHY, since, _chart_version(fp), digest(_as_written(fp, desired)))
    return _steady(call, release, record)


def _install_failed(name: str, tries: int) -> str:
    if tries < ROLLBACK_LIMIT:
        return f"{name}: helm's install failed ({tries}x); provider-helm installs it again"
    return (
        f"{name}: helm's install failed {tries} times, provider-helm's limit: it tries no more. "
        f"Find helm's error in provider-helm's log, then delete the Release to install it afresh"
    )


def _install_tries(
    obj: struct_pb2.Struct, annotations: Mapping[str, struct_pb2.Value], *, installing: bool
) -> str:
    """What a Release carries in INSTALL_TRY_ANNOTATION ("" for none).

    While it is being installed, provider-helm's count of failed tries when it has one; else
    what the Release carries already: the count drops to 0 once the release is deployed, and
    an annotation that vanished then would be one more write for provider-helm to act on, for
    nothing. A failed upgrade also counts in ``status.failed`` (provider-helm rolls it back),
    but day two answers that itself (a rollback written at once): the value is not moved for it.
    """
    if installing:
        failed = structs.value_at(obj, "status", "failed")
        tries = int(failed.number_value) if failed is not None else 0
        if tries > 0:
            return str(tries)
    return (
        annotations[INSTALL_TRY_ANNOTATION].string_value
        if INSTALL_TRY_ANNOTATION in annotations
        else ""
    )


def _ready_since(obj: struct_pb2.Struct) -> str | None:
    for cond in structs.structs_at(obj, "status", "conditions"):
        if structs.str_at(cond, "type") == "Ready" and structs.str_at(cond, "status") == "True":
            return structs.str_at(cond, "lastTransitionTime")
    return None
