"""What Crossplane observed of the composed resources, read for one call.

``Observed`` is a read-only, memoized view of the request's observed resources: a node's
readiness under its rule, its ARN, its reference, a Release's chart versions. The rules of a
Release's readiness (``release_ready``: fresh for its generation, the chart it was given) are
here too; ``function/upgrade.py`` reads a Release's day-two memory beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import structs
from function.graph import Readiness

_UNSET: Any = object()
_NO_FIELDS: Mapping[str, struct_pb2.Value] = {}


def fields_at(fields: Mapping[str, struct_pb2.Value], key: str) -> Mapping[str, struct_pb2.Value]:
    """The fields of the Struct under ``key`` (none when absent: ``in`` first, indexing inserts)."""
    return fields[key].struct_value.fields if key in fields else _NO_FIELDS


class Observed:
    """Read-only view of observed composed resources, straight from the protobuf.

    Lookups are memoized for the call: a node's readiness, ARN and reference are
    read by gates, builders, Usages and the status alike, several times per call.
    """

    def __init__(
        self,
        resources: Mapping[str, fnv1.Resource],
        used_in_api: frozenset[tuple[str, str, str]] | None = None,
        found_by_name: Mapping[str, bool] | None = None,
    ) -> None:
        self._resources = resources
        # (apiVersion, kind, name) of what the Usages that exist in the API server use,
        # Crossplane's forgotten ones included; None when the function did not ask for them.
        self.used_in_api = used_in_api
        # Requirement name -> whether the API server still has what the planner asked for by
        # name (cluster.REQ_USER_OF, REQ_FINALIZING): deleted, Crossplane no longer observes it.
        self.found_by_name: Mapping[str, bool] = found_by_name or {}
        self._objs: dict[str, struct_pb2.Struct | None] = {}
        self._ready: dict[str, bool] = {}
        self._upgraded: dict[str, bool] = {}
        self._arns: dict[str, str | None] = {}
        self._charts: dict[str, str | None] = {}
        self._deployed: dict[str, str | None] = {}
        self._refs: dict[str, tuple[str, str, str] | None] = {}

    def get(self, name: str) -> struct_pb2.Struct | None:
        """The observed object under composition-resource-name ``name``."""
        obj = self._objs.get(name, _UNSET)
        if obj is _UNSET:
            resources = self._resources
            obj = resources[name].resource if name in resources else None
            self._objs[name] = obj
        return obj

    def exists(self, name: str) -> bool:
        """Whether ``name`` is observed."""
        return self.get(name) is not None

    def names(self) -> list[str]:
        """Every observed composition-resource-name."""
        return list(self._resources)  # the map's own iteration, in C (keys() is Python's)

    @property
    def resources(self) -> Mapping[str, fnv1.Resource]:
        """The observed composed resources, as the request holds them."""
        return self._resources

    def ready(self, name: str, readiness: Readiness = Readiness.CONDITION) -> bool:
        """Whether ``name`` is observed and ready under ``readiness``."""
        if readiness is Readiness.CONDITION:  # the common rule, first
            verdict = self._ready.get(name)
            if verdict is None:
                obj = self.get(name)
                verdict = obj is not None and fresh(obj)
                self._ready[name] = verdict
            return verdict
        if readiness is Readiness.ALWAYS:
            return True
        if readiness is Readiness.EXISTS:
            return self.get(name) is not None
        if readiness is Readiness.RELEASE:
            verdict = self._upgraded.get(name)
            if verdict is None:
                obj = self.get(name)
                verdict = obj is not None and release_ready(obj, *self._versions(name))
                self._upgraded[name] = verdict
            return verdict
        assert_never(readiness)

    def arn(self, name: str) -> str | None:
        """``status.atProvider.arn`` of an observed AWS resource."""
        arn = self._arns.get(name, _UNSET)
        if arn is _UNSET:
            obj = self.get(name)
            arn = None if obj is None else structs.str_at(obj, "status", "atProvider", "arn")
            self._arns[name] = arn
        return arn

    def chart_version(self, name: str) -> str | None:
        """``spec.forProvider.chart.version`` of an observed Release: the chart it asks for.

        Read by the chart's default and by day two for every Release of every call.
        """
        version = self._charts.get(name, _UNSET)
        if version is _UNSET:
            version = self._read_versions(name)[0]
        return version

    def deployed_version(self, name: str) -> str | None:
        """``status.atProvider.version`` of an observed Release: the chart helm deployed.

        Read by its readiness and by day two for every Release of every call.
        """
        version = self._deployed.get(name, _UNSET)
        if version is _UNSET:
            version = self._read_versions(name)[1]
        return version

    def _versions(self, name: str) -> tuple[str | None, str | None]:
        """(chart_version, deployed_version) of ``name``."""
        asked = self._charts.get(name, _UNSET)
        if asked is _UNSET:
            return self._read_versions(name)
        return asked, self._deployed[name]

    def _read_versions(self, name: str) -> tuple[str | None, str | None]:
        """Both versions of a Release, read and kept at once (each is wanted for every Release).

        Two walks of ``structs.str_at`` as one (``fields_at``: a Value of another kind reads as
        an empty Struct, its ``string_value`` as "").
        """
        obj = self.get(name)
        asked = deployed = None
        if obj is not None:
            fields = obj.fields
            chart = fields_at(fields_at(fields_at(fields, "spec"), "forProvider"), "chart")
            asked = (chart["version"].string_value or None) if "version" in chart else None
            at = fields_at(fields_at(fields, "status"), "atProvider")
            deployed = (at["version"].string_value or None) if "version" in at else None
        self._charts[name] = asked
        self._deployed[name] = deployed
        return asked, deployed

    def ref(self, name: str) -> tuple[str, str, str] | None:
        """(apiVersion, kind, metadata.name) of an observed resource."""
        ref = self._refs.get(name, _UNSET)
        if ref is _UNSET:
            ref = self._ref(name)
            self._refs[name] = ref
        return ref

    def _ref(self, name: str) -> tuple[str, str, str] | None:
        obj = self.get(name)
        if obj is None:
            return None
        fields = obj.fields
        # string_value reads "" unless the Value holds a string: as structs.str_at,
        # unrolled (read for every Usage end).
        api = fields["apiVersion"].string_value if "apiVersion" in fields else ""
        kind = fields["kind"].string_value if "kind" in fields else ""
        meta = fields["metadata"].struct_value.fields if "metadata" in fields else None
        meta_name = meta["name"].string_value if meta is not None and "name" in meta else ""
        if not (api and kind and meta_name):
            return None
        return api, kind, meta_name


def _condition_facts(
    status: Mapping[str, struct_pb2.Value],
) -> tuple[bool, bool | None, float | None]:
    """What readiness reads of a composed resource's ``status`` fields, in one pass.

    (Ready=True, Synced=True or None without a Synced condition, Synced's observedGeneration
    when the provider wrote one). Unrolled and a plain tuple (read for every node of every
    call): every map is checked with ``in`` first (indexing would insert); a Value of another
    kind reads as an empty Struct or list. A type appears once (crossplane-runtime sets
    conditions by type): the reading stops once both are found (upjet adds
    LastAsyncOperation after them).
    """
    ready: bool | None = None
    synced: bool | None = None
    synced_generation = None
    if "conditions" not in status:
        return False, synced, synced_generation
    for item in status["conditions"].list_value.values:
        cond = item.struct_value.fields
        if "type" not in cond:
            continue
        kind = cond["type"].string_value
        if kind == "Ready":
            ready = "status" in cond and cond["status"].string_value == "True"
            if synced is not None:
                break
        elif kind == "Synced":
            synced = "status" in cond and cond["status"].string_value == "True"
            if "observedGeneration" in cond:
                synced_generation = cond["observedGeneration"].number_value
            if ready is not None:
                break
    return bool(ready), synced, synced_generation


def _generation(fields: Mapping[str, struct_pb2.Value]) -> float | None:
    """``metadata.generation`` of an object's top-level ``fields``."""
    if "metadata" not in fields:
        return None
    meta = fields["metadata"].struct_value.fields
    return meta["generation"].number_value if "generation" in meta else None


def _current(
    fields: Mapping[str, struct_pb2.Value],
    synced: bool | None,  # noqa: FBT001  # one of _condition_facts' three
    synced_generation: float | None,
) -> bool:
    """Whether the provider's conditions speak of the spec the object holds now.

    crossplane-runtime stamps the Synced condition with the ``metadata.generation`` it
    reconciled; until the provider has acted on a new spec, its Ready=True is the old
    spec's. Where nothing can be compared (no generation: not an API server's object; no
    Synced condition or no observedGeneration: a provider built before crossplane-runtime
    stamped it), the conditions are taken as they are.
    """
    if synced is None:
        return True  # checked first: the generation is not read for nothing
    # metadata.generation, unrolled (as _generation; read for every node of every call)
    if "metadata" not in fields:
        return True
    meta = fields["metadata"].struct_value.fields
    if "generation" not in meta:
        return True
    generation = meta["generation"].number_value
    if not synced:
        return False  # the provider failed to apply the current spec
    return synced_generation is None or synced_generation == generation


def upgraded_release(obj: struct_pb2.Struct) -> bool:
    """Whether provider-helm has upgraded this Release to its current spec, deployed.

    After a successful upgrade provider-helm writes Synced=True (ReconcileSuccess, at
    the generation it acted on) and the deployed release into ``status.atProvider``,
    but leaves Ready=False (the Unavailable of its Observe before the upgrade) until
    its next poll: crossplane-runtime requeues a successful update only after the
    poll interval, 10 minutes by default. That poll would find exactly this (deployed,
    up to date) and say Ready=True; with ``wait: true`` the upgrade itself already
    waited for the workloads. A Synced condition of an older generation (the spec
    changed since), a failed or pending release, or a failed upgrade (Synced=False)
    is not this.
    """
    fields = obj.fields
    generation = _generation(fields)
    if generation is None or generation <= 0:
        return False
    if structs.str_at(obj, "status", "atProvider", "state") != "deployed":
        return False
    _, synced, synced_generation = _condition_facts(fields["status"].struct_value.fields)
    return bool(synced) and synced_generation == generation


def fresh(obj: struct_pb2.Struct) -> bool:
    """Ready=True, reported for the spec the object holds now (see ``_current``)."""
    fields = obj.fields
    if "status" not in fields:
        return False
    ready, synced, synced_generation = _condition_facts(fields["status"].struct_value.fields)
    return ready and _current(fields, synced, synced_generation)


def release_ready(obj: struct_pb2.Struct, asked: str | None, deployed: str | None) -> bool:
    """Whether a provider-helm Release runs the spec the function wrote.

    Ready=True for its current generation, or upgraded to it (``upgraded_release``), and
    the chart version ``deployed`` (its ``status.atProvider.version``) the one its spec
    ``asked`` for (``spec.forProvider.chart.version``): a stale Ready=True of the revision
    before an upgrade never counts. (The two versions are given: ``Observed`` reads each once.)
    """
    fields = obj.fields
    if "status" not in fields:
        return False
    status = fields["status"].struct_value.fields
    ready, synced, synced_generation = _condition_facts(status)
    if ready:
        if not _current(fields, synced, synced_generation):
            return False
    elif not upgraded_release(obj):
        return False
    return deployed is None or asked is None or deployed == asked
