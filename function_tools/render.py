"""``render``: what Crossplane would apply for one reconcile of an XR, as `crossplane render` shows.

In process, without Docker or the crossplane CLI: the XR, its observed composed
resources and the required (Cluster API) objects go into a :class:`InMemoryCrossplane`, whose
``call()`` runs the function through Crossplane's required-resources loop. The
answer is printed in the shape ``crossplane render`` prints
(``cmd/crank/render/render.go``):

1. the XR: apiVersion, kind, metadata.name (and namespace) and the desired
   status, with the ``Ready`` condition Crossplane derives from composed
   readiness and the function's own conditions;
2. every desired composed resource, sorted by composition-resource-name, with
   the metadata Crossplane adds (composition-resource-name annotation,
   ``crossplane.io/composite`` label, claim labels, controller reference, and
   ``generateName: <xr>-`` or the observed name);
3. the function's results as ``render.crossplane.io/v1beta1`` ``Result`` objects.

Keys are sorted at every level, as Go's JSON encoder sorts them in
``crossplane render``'s output. Timestamps are the fixed time
``crossplane render`` uses, so the output is deterministic.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import upgrade
from function_tools.in_memory_crossplane import (
    COMPOSITION_RESOURCE_NAME,
    Composed,
    InMemoryCrossplane,
)
from function_tools.input_files import DEFAULT_STEP, InputFileError

RESULT_API_VERSION = "render.crossplane.io/v1beta1"
# crossplane render's conditionTime(): a fixed time, so output does not churn.
CONDITION_TIME = "2024-01-01T00:00:00Z"
COMPOSITE_LABEL = "crossplane.io/composite"
CLAIM_NAME_LABEL = "crossplane.io/claim-name"
CLAIM_NAMESPACE_LABEL = "crossplane.io/claim-namespace"
# Conditions Crossplane owns; a function cannot set them (xpv1.IsSystemConditionType).
SYSTEM_CONDITIONS = frozenset({"Ready", "Synced", "Healthy"})
FIRST_N = 3  # crossplane-runtime resource.DefaultFirstN

_STATUS = {
    fnv1.STATUS_CONDITION_TRUE: "True",
    fnv1.STATUS_CONDITION_FALSE: "False",
}


class RenderError(InputFileError):
    """Observed resources that do not fit (no composition-resource-name, two alike)."""


def condition_status(obj: dict[str, Any], typ: str) -> str | None:
    """status.conditions[type=typ].status of a plain object."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == typ:
            return str(c.get("status"))
    return None


def observed_composed(docs: Iterable[dict[str, Any]]) -> dict[str, Composed]:
    """Observed composed resources by composition-resource-name, ready per their Ready condition."""
    out: dict[str, Composed] = {}
    for doc in docs:
        name = ((doc.get("metadata") or {}).get("annotations") or {}).get(COMPOSITION_RESOURCE_NAME)
        if not name:
            ident = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
            msg = f"observed resource {ident} has no {COMPOSITION_RESOURCE_NAME} annotation"
            raise RenderError(msg)
        if name in out:
            msg = f"two observed resources share {COMPOSITION_RESOURCE_NAME}: {name}"
            raise RenderError(msg)
        out[name] = Composed(
            name, copy.deepcopy(doc), created_at=0, ready=condition_status(doc, "Ready") == "True"
        )
    return out


# --- rendering -----------------------------------------------------------------


class _ObservedWorld(InMemoryCrossplane):
    """A InMemoryCrossplane whose observed composed resources are exactly what the files say.

    InMemoryCrossplane's own ``_observed_object`` rewrites conditions and ARNs as its fake
    providers would; for ``render`` the user's observed state is the truth.
    """

    def _observed_object(self, c: Composed) -> dict[str, Any]:
        return copy.deepcopy(c.obj)


@dataclass
class Rendered:
    """One render: the output documents, or the FATAL message."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    fatal: str | None = None
    response: fnv1.RunFunctionResponse | None = None
    iterations: int = 0
    # Observed composed resources missing from desired state: Crossplane would delete them.
    deleted: list[str] = field(default_factory=list)


def _first_n_and_some_more(names: list[str], n: int = FIRST_N) -> str:
    names = sorted(names)
    if len(names) > n:
        return f"{', '.join(names[:n])}, and {len(names) - n} more"
    if len(names) == n:
        return f"{', '.join(names[: n - 1])}, and {names[n - 1]}"
    return ", ".join(names)


def _condition(typ: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    c = {"type": typ, "status": status, "reason": reason, "lastTransitionTime": CONDITION_TIME}
    if message:
        c["message"] = message
    return c


def ready_condition(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    """The XR's Ready condition as Crossplane derives it from the desired state."""
    unready = [n for n, r in rsp.desired.resources.items() if r.ready != fnv1.READY_TRUE]
    ready = rsp.desired.composite.ready
    if ready == fnv1.READY_FALSE:
        return _condition("Ready", "False", "Creating")
    if ready == fnv1.READY_UNSPECIFIED and unready:
        return _condition(
            "Ready", "False", "Creating", f"Unready resources: {_first_n_and_some_more(unready)}"
        )
    return _condition("Ready", "True", "Available")


def _set_condition(conditions: list[dict[str, Any]], c: dict[str, Any]) -> None:
    for i, old in enumerate(conditions):
        if old.get("type") == c["type"]:
            conditions[i] = c
            return
    conditions.append(c)


def go_numbers(value: Any) -> Any:
    """Whole floats as ints, as Go prints a protobuf Struct's float64s (3, not 3.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [go_numbers(v) for v in value]
    return value


def render_xr(xr: dict[str, Any], rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    """The XR as crossplane render prints it: identity plus desired status and conditions."""
    out = go_numbers(resource.struct_to_dict(rsp.desired.composite.resource))
    meta = xr.get("metadata") or {}
    out["apiVersion"] = xr.get("apiVersion")
    out["kind"] = xr.get("kind")
    out["metadata"] = {"name": meta.get("name", "")}
    if meta.get("namespace"):
        out["metadata"]["namespace"] = meta["namespace"]
    status = out.setdefault("status", {})
    conditions: list[dict[str, Any]] = [ready_condition(rsp)]
    for c in rsp.conditions:
        if c.type in SYSTEM_CONDITIONS:
            continue
        _set_condition(
            conditions, _condition(c.type, _STATUS.get(c.status, "Unknown"), c.reason, c.message)
        )
    status["conditions"] = conditions
    # A legacy (cluster-scoped) XR records which conditions its claim copies
    # (composite.Unstructured.SetClaimConditionTypes): kept, then extended in order.
    if not meta.get("namespace"):
        claim_types = list((xr.get("status") or {}).get("claimConditionTypes") or [])
        for c in rsp.conditions:
            if c.type in SYSTEM_CONDITIONS or c.target != fnv1.TARGET_COMPOSITE_AND_CLAIM:
                continue
            if c.type not in claim_types:
                claim_types.append(c.type)
        if claim_types:
            status["claimConditionTypes"] = claim_types
    return out


def composed_metadata(
    obj: dict[str, Any],
    xr: dict[str, Any],
    name: str,
    observed: dict[str, Any] | None,
    *,
    crossplane_v1: bool = False,
) -> None:
    """Add the metadata Crossplane sets on a composed resource (RenderComposedResourceMetadata)."""
    meta = obj.setdefault("metadata", {})
    xr_meta = xr.get("metadata") or {}
    xr_labels = xr_meta.get("labels") or {}
    if observed is not None:
        o_meta = observed.get("metadata") or {}
        for key in ("namespace", "name", "generateName"):
            if o_meta.get(key):
                meta[key] = o_meta[key]
            else:
                meta.pop(key, None)
    prefix = xr_labels.get(COMPOSITE_LABEL) or xr_meta.get("name", "")
    # Crossplane 1.x sets generateName on every composed resource, named or not;
    # v2 only on those without a name.
    if crossplane_v1 or (not meta.get("name") and not meta.get("generateName")):
        meta["generateName"] = f"{prefix}-"
    if xr_meta.get("namespace"):
        meta["namespace"] = xr_meta["namespace"]
    meta.setdefault("annotations", {})[COMPOSITION_RESOURCE_NAME] = name
    labels = meta.setdefault("labels", {})
    labels[COMPOSITE_LABEL] = prefix
    claim_ref = (xr.get("spec") or {}).get("claimRef") or {}
    if xr_labels.get(CLAIM_NAME_LABEL) and xr_labels.get(CLAIM_NAMESPACE_LABEL):
        labels[CLAIM_NAMESPACE_LABEL] = xr_labels[CLAIM_NAMESPACE_LABEL]
        labels[CLAIM_NAME_LABEL] = xr_labels[CLAIM_NAME_LABEL]
    elif claim_ref:
        labels[CLAIM_NAMESPACE_LABEL] = claim_ref.get("namespace", "")
        labels[CLAIM_NAME_LABEL] = claim_ref.get("name", "")
    ref = {
        "apiVersion": xr.get("apiVersion"),
        "kind": xr.get("kind"),
        "name": xr_meta.get("name", ""),
        "uid": xr_meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs = [
        r
        for r in meta.get("ownerReferences") or []
        if r.get("uid") != ref["uid"] or r.get("name") != ref["name"]
    ]
    meta["ownerReferences"] = [*refs, ref]


def result_documents(rsp: fnv1.RunFunctionResponse, step: str) -> list[dict[str, Any]]:
    """The non-fatal results as crossplane render's Result objects."""
    return [
        {
            "apiVersion": RESULT_API_VERSION,
            "kind": "Result",
            "step": step,
            "severity": fnv1.Severity.Name(r.severity),
            "message": r.message,
        }
        for r in rsp.results
        if r.severity != fnv1.SEVERITY_FATAL
    ]


def latest_time(obj: dict[str, Any]) -> float:
    """The latest time ``obj`` names: its conditions' transitions, its day-two record."""
    conditions = obj.get("status", {}).get("conditions", [])
    texts = [str(c.get("lastTransitionTime", "")) for c in conditions]
    record = obj.get("metadata", {}).get("annotations", {}).get(upgrade.RECORD_ANNOTATION)
    parsed = upgrade.parse_record(record) if record else None
    if parsed is not None:
        texts += [parsed.since, parsed.running_since]
    seconds = [
        dt.datetime.fromisoformat(t).timestamp() for t in texts if t and t[:1].isdigit()
    ]
    return max(seconds, default=0.0)


def render(
    xr: dict[str, Any],
    *,
    required: Iterable[dict[str, Any]] = (),
    observed: Iterable[dict[str, Any]] = (),
    step_input: dict[str, Any] | None = None,
    step: str = DEFAULT_STEP,
    crossplane_v1: bool = False,
    now: int | None = None,
) -> Rendered:
    """Run one reconcile's function call and build crossplane render's output documents.

    ``now``: the call's clock (seconds since the epoch); by default just after what it observes.
    """
    world = _ObservedWorld(
        xr,
        required,
        step_input=step_input,
        crossplane_v1=crossplane_v1,
        capabilities=not crossplane_v1,
    )
    world.composed = observed_composed(observed)
    # Unless given, the call comes just after what it observes: its clock is the latest time
    # the observed state names (conditions, a Release's day-two record), or the world's start.
    if now is None:
        now = int(max([world.start, *(latest_time(c.obj) for c in world.composed.values())]))
    world.start = now
    rsp, iterations = world.call()
    fatal = next((r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL), None)
    if fatal is not None:
        return Rendered(fatal=fatal.message, response=rsp, iterations=iterations)
    docs = [render_xr(world.xr, rsp)]
    for name in sorted(rsp.desired.resources):
        obj = go_numbers(resource.struct_to_dict(rsp.desired.resources[name].resource))
        seen = world.composed.get(name)
        composed_metadata(
            obj,
            world.xr,
            name,
            seen.obj if seen is not None else None,
            crossplane_v1=crossplane_v1,
        )
        docs.append(obj)
    docs += result_documents(rsp, step)
    deleted = sorted(set(world.composed) - set(rsp.desired.resources))
    return Rendered(documents=docs, response=rsp, iterations=iterations, deleted=deleted)


# --- output --------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (policy documents, JWKS), like kubectl prints them."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str)


def to_yaml(docs: Sequence[dict[str, Any]]) -> str:
    """A YAML stream, each document opened with ``---``, keys sorted as in crossplane render."""
    return yaml.dump_all(
        docs,
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=True,
        default_flow_style=False,
        width=1 << 30,
    )


def to_json(docs: Sequence[dict[str, Any]]) -> str:
    """The documents as one JSON array."""
    return json.dumps(list(docs), indent=2, sort_keys=True) + "\n"
