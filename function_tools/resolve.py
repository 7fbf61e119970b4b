"""What Crossplane resolves for the function's requirements, among objects a person gives.

The tools' stand-in for Crossplane's side of the required-resources loop: ``render``,
``simulate`` (through ``world``), ``issuer`` and ``aws preflight`` turn the objects of
files into the request Crossplane would send, then read it as the function does
(``cluster.read_facts``) and judge it with the function's rules (``accept.refuse_for_cluster``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import accept, cluster
from function.accept import Accepted
from function.cluster import ClusterFacts, Lookup, requirements

MAX_REQUIREMENT_ITERATIONS = 5  # Crossplane's cap (xfn/required_resources.go)


def selects(  # a selector's parts, as both its forms carry them
    obj: Mapping[str, Any],
    *,
    api_version: str,
    kind: str,
    match_name: str | None,
    match_labels: Mapping[str, str],
    namespace: str | None,
    use_namespace: bool,
) -> bool:
    """Whether Crossplane's selector picks ``obj`` (``use_namespace``: v2; 1.x ignores it).

    The exact apiVersion must match: an API server answers in the version asked for
    (converting the object), and ``crossplane render`` answers from objects as they
    are, so an object in another version is one that version's server would not have.
    """
    if obj.get("apiVersion") != api_version or obj.get("kind") != kind:
        return False
    meta = obj.get("metadata") or {}
    if use_namespace and namespace is not None and meta.get("namespace") != namespace:
        return False
    if match_name is not None:
        return bool(meta.get("name") == match_name)
    labels = meta.get("labels") or {}
    return all(labels.get(k) == v for k, v in match_labels.items())



def _as_served(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server serves it: a Secret's stringData is in data, base64."""
    out = dict(obj)
    if out.get("kind") == "Secret" and isinstance(out.get("stringData"), dict):
        data = dict(out.get("data") or {})
        for key, value in out.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        out["data"] = data
    return out


def resolve_into(
    req: fnv1.RunFunctionRequest,
    requirements: fnv1.Requirements,
    objs: Iterable[Mapping[str, Any]],
    *,
    crossplane_v1: bool = False,
) -> None:
    """Put into ``req`` what Crossplane resolves for ``requirements`` among ``objs``.

    Crossplane 1.x reads only the deprecated field, and its selectors carry no
    namespace: every namespace matches.
    """
    objs = list(objs)
    req.ClearField("required_resources")
    req.ClearField("extra_resources")
    fields = [(requirements.extra_resources, req.extra_resources, False)]
    if not crossplane_v1:
        fields.insert(0, (requirements.resources, req.required_resources, True))
    for selectors, out, use_namespace in fields:
        for name, sel in selectors.items():
            items = out[name]
            for o in objs:
                if selects(
                    o,
                    api_version=sel.api_version,
                    kind=sel.kind,
                    match_name=sel.match_name if sel.WhichOneof("match") == "match_name" else None,
                    match_labels=sel.match_labels.labels,
                    namespace=sel.namespace if sel.HasField("namespace") else None,
                    use_namespace=use_namespace,
                ):
                    items.items.add().resource.update(o)


def request_from_objects(
    objs: Iterable[Mapping[str, Any]],
    lookup: Lookup,
) -> fnv1.RunFunctionRequest:
    """The request Crossplane would send once it resolved what the function asks for.

    Both requirement fields are asked and resolved (as a Crossplane that does not
    say what it supports would), so the objects are found by reference from the
    Cluster or by the cluster-name label, as the function finds them.
    """
    served = [_as_served(o) for o in objs]
    req = fnv1.RunFunctionRequest()
    asked = fnv1.Requirements()
    for _ in range(MAX_REQUIREMENT_ITERATIONS):
        reqs = requirements(req, lookup)
        now = fnv1.Requirements()
        reqs.write(now)
        if now == asked:
            break
        asked = now
        resolve_into(req, asked, served)
    return req


def accept_with_objects(
    xr: Mapping[str, Any],
    step_input: Mapping[str, Any] | None,
    objs: Iterable[Mapping[str, Any]],
) -> tuple[Accepted, ClusterFacts]:
    """For the commands: the accepted XR, and the facts of the cluster objects a user gives.

    The objects are read as the function reads them from Crossplane (found by
    reference from the Cluster, or by label), and judged as the function judges them.
    """
    xr_struct = resource.dict_to_struct(dict(xr))  # once: accepted and its recorded issuer
    accepted = accept.accept_xr(xr_struct, resource.dict_to_struct(dict(step_input or {})))
    facts = cluster.read_facts(request_from_objects(objs, accepted.lookup), accepted.lookup)
    accept.refuse_for_cluster(accepted, facts, accept.recorded_issuer(xr_struct))
    return accepted, facts


def given_object_problem(
    accepted: Accepted, objs: Sequence[Mapping[str, Any]]
) -> tuple[int, str] | None:
    """``accept.given_object_problem`` with what the function asks for among ``objs``."""
    asked = requirements(request_from_objects(objs, accepted.lookup), accepted.lookup)
    return accept.given_object_problem(accepted, objs, asked)
