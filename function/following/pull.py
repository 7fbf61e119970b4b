"""A ClusterPlugin pulls its rollout: it asks for the rollouts and decides alone if it is admitted.

Nothing pushes and nothing writes another XR's spec. With ``input.fleet.rollouts`` the
ClusterPlugin asks Crossplane for every ClusterPluginRollout (requirement ``rollouts``), takes
the first by name whose selector its labels match (the others are named as conflicts) and whose
status has caught up with its target (``status.revision``), and finds its wave from the
rollout's status, its own labels and its own uid's bucket (``spec.wave_of``): no list of the
fleet. What it reports in ``status.rollout`` (``target.RolloutTarget.report``) is what the
rollout reads back, and what it remembers: ``applied``, what a rollout made it run.

- **Admitted** (in an open wave, the rollout Progressing, Paused or Complete): the target's
  chart versions and values replace the Composition's for the add-ons it names. A workload
  cluster out of reach once admitted stays admitted: its wave waits for it.
- **Halted**: a cluster that was applying the target keeps it; no new one starts.
- **RolledBack**: no admitted cluster applies it: each Release goes back through day two to
  the target the rollout completed, else to what the Composition and the XR ask for.
- **Skipped** (paused in Cluster API, being deleted, unreachable before it was admitted, or a
  target add-on pinned by the XR): it starts nothing; one already applying the target keeps it.
- **Not admitted yet**: it keeps what a rollout gave it last (``applied``), else the target
  the rollout completed: a new target never moves a cluster back.
- **Held**: the rollout that selects it is refused (a spec the API server took and the
  function does not): it keeps what it runs until the spec is fixed. No rollout selects it any
  more (deleted, selector narrowed, labels changed): it keeps what a rollout gave it, add-on by
  add-on, until a rollout admits it or the Composition names that version (or the XR pins
  one). Outside a rollout's open waves, nothing that happens to a rollout moves a chart.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import structs
from function.accept import Accepted
from function.cluster import ClusterFacts, Requirements, Selector, required_objects
from function.flavour import XR_GROUP, XR_VERSION
from function.following.target import APPLYING, HELD, SKIPPED, RolloutTarget
from function.rollout.accept import TARGETABLE, parse
from function.rollout.spec import (
    KIND,
    REQ_ROLLOUTS,
    OpenWave,
    Phase,
    RolloutSpec,
    Target,
    TargetPlugin,
    bucket,
    revision,
    wave_of,
)
from function.spec import ClusterPluginSpec
from function.spec_base import InvalidInputError
from function.step_input import Charts

ROLLOUTS = Selector(f"{XR_GROUP}/{XR_VERSION}", KIND)
# A rollout in these phases may still open waves (or start again once resumed).
UNDER_WAY = frozenset({Phase.PROGRESSING, Phase.PAUSED})
# What provider-helm says when it cannot reach the workload cluster's API server.
_UNREACHABLE = re.compile(
    r"connection refused|no such host|i/o timeout|dial tcp|no route to host|"
    r"context deadline exceeded|TLS handshake timeout",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Record:
    """What this XR's own last ``status.rollout`` says (the function's memory of its rollout)."""

    name: str
    revision: str
    phase: str
    applying: bool  # it ran (or was moving to) that revision's target
    applied: tuple[TargetPlugin, ...]  # what a rollout made it run, add-on by add-on


def _record(xr: struct_pb2.Struct) -> _Record | None:
    last = structs.struct_at(xr, "status", "rollout")
    if last is None:
        return None
    phase = structs.str_at(last, "phase") or ""
    applied: tuple[TargetPlugin, ...] = ()
    found = structs.value_at(last, "applied")
    if found is not None:
        try:
            applied = tuple(TargetPlugin.model_validate(p) for p in structs.to_python(found))
        except (ValidationError, TypeError):
            applied = ()  # unreadable: nothing to keep (the settled target, if any, applies)
    return _Record(
        structs.str_at(last, "name") or "",
        structs.str_at(last, "revision") or "",
        phase,
        phase in APPLYING or (phase in (SKIPPED, HELD) and bool(structs.bool_at(last, "applying"))),
        applied,
    )


@dataclass(frozen=True)
class _Selecting:
    """A rollout whose selector matches this XR's labels."""

    name: str
    obj: struct_pb2.Struct
    spec: RolloutSpec | None  # None: the rollout is refused
    refused: str = ""  # its FATAL, one line


def _raw_selects(obj: struct_pb2.Struct, labels: dict[str, str]) -> bool:
    """Whether a refused rollout's ``spec.selector.matchLabels`` match, read as they are."""
    found = structs.struct_at(obj, "spec", "selector", "matchLabels")
    if found is None or not found.fields:
        return False
    return all(
        v.WhichOneof("kind") == "string_value" and labels.get(k) == v.string_value
        for k, v in found.fields.items()
    )


def _selecting(
    req: fnv1.RunFunctionRequest, labels: dict[str, str], record: _Record | None
) -> list[_Selecting] | None:
    """Every rollout that selects ``labels``, by name; None while the rollouts are not read.

    A refused rollout counts as selecting the clusters its selector's labels match, and the
    one this XR followed last: it freezes them rather than letting them go.
    """
    objs = required_objects(req, REQ_ROLLOUTS, None)
    if objs is None:
        return None
    found = []
    for obj in objs:
        name = structs.str_at(obj, "metadata", "name") or ""
        try:
            spec = parse(structs.struct_at(obj, "spec") or struct_pb2.Struct())
        except InvalidInputError as err:
            if _raw_selects(obj, labels) or (record is not None and record.name == name):
                found.append(_Selecting(name, obj, None, str(err)))
            continue
        if spec.selector.matches(labels):
            found.append(_Selecting(name, obj, spec))
    return sorted(found, key=lambda f: f.name)


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
) -> tuple[str, bool]:
    """Why this cluster sits the rollout out ("" if it does not), and if for being unreachable.

    Its workload cluster's API being out of reach does not unadmit a cluster already admitted.
    """
    if facts.deleting:
        return "being deleted", False
    if facts.paused:
        return "paused in Cluster API", False
    wanted = [TARGETABLE[p.name] for p in spec.target.plugins if TARGETABLE[p.name].spec(cp)]
    if not wanted:
        return "none of the target's add-ons is asked for", False
    for addon in wanted:
        pin = addon.spec(cp).version
        if pin:
            return f"pinned: {addon.spec_path}.version is {pin}", False
    for addon in wanted:
        for release in addon.releases:
            obj = observed.get(release.node)
            problem = structs.failing_message(obj.resource) if obj is not None else ""
            if problem and _UNREACHABLE.search(problem):
                return f"unreachable: {release.node}: {problem}", True
    return "", False


def pull(
    req: fnv1.RunFunctionRequest,
    xr: struct_pb2.Struct,
    cp: ClusterPluginSpec,
    facts: ClusterFacts,
    charts: Charts,
) -> RolloutTarget | None:
    """The rollout that selects this ClusterPlugin and what it means in this call, or None.

    None only when no rollout selects it and it keeps nothing a rollout gave it.
    """
    labels = structs.labels_of(xr)
    record = _record(xr)
    selecting = _selecting(req, labels, record)
    if selecting is None:
        return _hold(record, cp, charts, "the rollouts are not read yet")
    if not selecting:
        name = record.name if record is not None else ""
        return _hold(
            record,
            cp,
            charts,
            f"rollout {name} no longer selects this ClusterPlugin (deleted, or its selector "
            "or these labels changed)",
        )
    chosen, others = selecting[0], tuple(s.name for s in selecting[1:])
    mine = record if record is not None and record.name == chosen.name else None
    if chosen.spec is None:
        return _frozen(chosen, record, mine, others)
    spec = chosen.spec
    target = spec.target.model_dump(by_alias=True, mode="json")
    rev = revision(target)
    status = structs.struct_at(chosen.obj, "status")
    base = RolloutTarget(
        chosen.name,
        rev,
        plugins={p.name: p.version for p in spec.target.plugins},
        conflicts=others,
    )
    settled = _settled(status)
    kept = _kept(record, settled)
    if status is None or structs.str_at(status, "revision") != rev:
        return _made(
            spec, base, kept, settled, why_not="the rollout has not started this target yet"
        )
    base = dataclasses.replace(base, under_way=structs.str_at(status, "phase") in UNDER_WAY)
    uid = structs.str_at(xr, "metadata", "uid") or ""
    wave = wave_of(spec.strategy, _opened(status), labels, bucket(uid)) if uid else None
    ours = mine is not None and mine.revision == rev
    skipped, unreachable = _skipped(spec, cp, facts, req.observed.resources)
    # Out of reach is a reason to sit out only for a cluster not admitted yet (or that sat
    # out already when its wave opened): one admitted holds its wave open until it is back
    # or the deadline counts it as failed.
    admitted_unreachable = (
        unreachable
        and wave is not None
        and not (ours and mine is not None and mine.phase == SKIPPED and not mine.applying)
    )
    return _made(
        spec,
        base,
        kept,
        settled,
        **_standing(
            structs.str_at(status, "phase") or "",
            wave,
            applying=ours and mine is not None and mine.applying,
            skipped="" if admitted_unreachable else skipped,
            note=skipped if admitted_unreachable else "",
        ),
    )


def _kept(record: _Record | None, settled: Target | None) -> tuple[TargetPlugin, ...]:
    """What a cluster not applying the current target runs.

    What a rollout gave it last (so a new target, a narrowed wave or another rollout never
    moves it back), else the target the rollout completed (a cluster that never reported
    one, e.g. one just created).
    """
    if record is not None and record.applied:
        return record.applied
    return tuple(settled.plugins) if settled is not None else ()


def _released(plugin: TargetPlugin, cp: ClusterPluginSpec, charts: Charts) -> bool:
    """Whether a kept add-on may go back to what the XR and Composition ask.

    It is no longer asked for, or pinned by the XR, or the Composition names the version it
    runs (and the rollout gave it no values of its own).
    """
    addon = TARGETABLE.get(plugin.name)
    if addon is None or addon.release is None or not addon.spec(cp):
        return True
    if addon.spec(cp).version:
        return True
    return addon.release.chart(charts).version == plugin.version and not plugin.values


def _hold(
    record: _Record | None, cp: ClusterPluginSpec, charts: Charts, why: str
) -> RolloutTarget | None:
    """No rollout moves this cluster: it keeps what a rollout gave it, until released."""
    if record is None:
        return None
    kept = tuple(p for p in record.applied if not _released(p, cp, charts))
    if not kept:
        return None
    what = ", ".join(
        f"{p.name} {p.version}" + (" and its values" if p.values else "") for p in kept
    )
    held = (
        f"{why}: it keeps {what}, as the rollout left it, until a rollout admits it or the "
        "Composition names that version"
        + (" (and the ClusterPlugin carries those values)" if any(p.values for p in kept) else "")
    )
    return _applying(RolloutTarget(record.name, record.revision, held=held), kept)


def _frozen(
    chosen: _Selecting, record: _Record | None, mine: _Record | None, others: tuple[str, ...]
) -> RolloutTarget:
    """A refused rollout selects this cluster: nothing moves until its spec is fixed."""
    held = (
        f"rollout {chosen.name} is refused ({chosen.refused}): nothing moves until its spec "
        "is fixed"
    )
    kept = record.applied if record is not None else ()
    return _applying(
        RolloutTarget(
            chosen.name,
            mine.revision if mine is not None else "",
            held=held,
            conflicts=others,
            under_way=True,  # called back soon, to follow the fix
            applies=mine is not None and mine.applying,
        ),
        kept,
    )


def _applying(base: RolloutTarget, plugins: tuple[TargetPlugin, ...]) -> RolloutTarget:
    """``base`` with the chart versions and values of ``plugins`` applied."""
    versions: dict[str, str] = {}
    values: dict[str, dict[str, Any]] = {}
    for plugin in plugins:
        addon = TARGETABLE.get(plugin.name)
        if addon is None:
            continue
        for release in addon.releases:
            versions[release.node] = plugin.version
        if addon.release is not None and plugin.values:
            values[addon.release.node] = plugin.values
    return dataclasses.replace(base, versions=versions, values=values, applied=plugins)


def _standing(
    phase: str, wave: str | None, *, applying: bool, skipped: str, note: str
) -> dict[str, Any]:
    """Where the cluster stands: the keywords of ``_made``."""
    if phase == Phase.ROLLED_BACK:
        if wave is None and not applying:
            return {"why_not": "the rollout rolled back before it was admitted"}
        return {"wave": wave or "", "rolled_back": True}
    if skipped:
        return {"wave": wave or "", "skipped": skipped, "applies": applying}
    if wave is None:
        return {"why_not": "its wave has not opened"}
    if phase == Phase.HALTED and not applying:
        return {"why_not": "the rollout halted before it was admitted"}
    return {"wave": wave, "applies": True, "note": note}


def _made(
    spec: RolloutSpec,
    base: RolloutTarget,
    kept: tuple[TargetPlugin, ...],
    settled: Target | None,
    *,
    wave: str = "",
    applies: bool = False,
    skipped: str = "",
    rolled_back: bool = False,
    why_not: str = "",
    note: str = "",
) -> RolloutTarget:
    if applies:
        plugins = tuple(spec.target.plugins)
    elif rolled_back:
        # The rollout's own way back: to the target it completed, else the Composition's.
        plugins = tuple(settled.plugins) if settled is not None else ()
    else:
        plugins = kept
    return _applying(
        dataclasses.replace(
            base,
            wave=wave,
            skipped=skipped,
            rolled_back=rolled_back,
            why_not=why_not,
            applies=applies,
            note=note,
        ),
        plugins,
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
    return asked.adding({REQ_ROLLOUTS: ROLLOUTS}), pull(
        req, xr, accepted.spec, facts, accepted.step.charts
    )
