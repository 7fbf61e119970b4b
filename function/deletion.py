"""The cluster's own deletion: where a ClusterPlugin stands in it.

See docs/architecture.md, "The cluster's own deletion".

Crossplane does not call functions while an XR is deleted, and provider-helm
cannot uninstall from a cluster that is gone (its Releases never finalize). So
the function watches the CAPI cluster itself and, call by call, decides:

- ``PRESENT``: the normal plan.
- ``MISSING``: no object of the cluster was read and no deletion was recorded (a
  read that missed, a typo, a cluster not created yet). Nothing is dropped, as
  ever; the Releases take the orphan policy, which is harmless and undone as
  soon as the cluster is read again, so deleting the XR now cannot hang.
- ``DELETING``: the Cluster, its control plane or its infrastructure object
  carries a ``deletionTimestamp``. Releases take the orphan policy, nothing new
  is installed, every AWS resource stays (the load balancer controller and the
  CCM keep their roles while CAPA's external resource GC removes load
  balancers), and the XR status records the deletion of that cluster.
- ``GONE``: the cluster is no longer found (or a Cluster of another uid stands in
  its place) after a recorded deletion: as ``DELETING``, until a second call in a
  row finds it gone and every observed Release has been seen with the orphan
  policy.
- ``DELETED``: then nothing is wanted any more, and what was composed is
  withdrawn one layer at a time in Usage order, as a removed plugin is: a
  resource is still emitted while a Usage of it is in the API server, a Usage
  while its user is. Crossplane deletes what is no longer emitted in no particular order
  and stops at the first deletion its usage webhook refuses, so dropping it all
  at once would end in refused deletions and Usages deleted before their users.
  The Releases, which nothing uses, go first and are forgotten without an
  uninstall; then the AWS resources, layer by layer. What the last layer leaves
  the API server still holds while its provider deletes it (Crossplane no longer
  observes it): the record lists it (``finalizing``) and the function asks for it by
  name until it is gone; only then is the cluster's deletion over (ClusterDeleted).
  The XR stays empty until a Cluster of that name appears again once everything is
  gone (a new Cluster that appears during the withdrawal waits for its end): then it
  starts from scratch.

The record (``status.clusterDeletion``) is the function's only memory between
calls: it is read from the observed XR and written again on every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import structs
from function.cluster import ClusterFacts
from function.flavour import Flavour

STATUS_FIELD = "clusterDeletion"
DELETING, GONE, DELETED = "Deleting", "Gone", "Deleted"


class Finalizing(NamedTuple):
    """A resource the withdrawal dropped last, perhaps still in the API server.

    In the XR's namespace, or cluster-scoped for a legacy XR, as every composed resource.
    """

    api_version: str
    kind: str
    name: str

    def as_dict(self) -> dict[str, str]:
        """The status entry."""
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}


class Stage(Enum):
    """Where the cluster stands, as far as this ClusterPlugin is concerned."""

    PRESENT = "present"
    MISSING = "missing"
    DELETING = "deleting"
    GONE = "gone"
    DELETED = "deleted"


@dataclass(frozen=True)
class Record:
    """``status.clusterDeletion``: which cluster's deletion was seen, and how far it got."""

    name: str
    uid: str
    phase: str  # Deleting | Gone | Deleted
    # Deleted: what the last layer of the withdrawal left to its providers, until gone.
    finalizing: tuple[Finalizing, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The status entry."""
        out: dict[str, Any] = {"name": self.name, "uid": self.uid, "phase": self.phase}
        if self.finalizing:
            out["finalizing"] = [f.as_dict() for f in self.finalizing]
        return out


@dataclass(frozen=True)
class Assessment:
    """What the cluster's state means for this call."""

    stage: Stage
    record: Record | None = None

    @property
    def orphan_releases(self) -> bool:
        """Releases are emitted with the orphan policy (no helm uninstall on deletion)."""
        return self.stage is not Stage.PRESENT

    @property
    def hold_new(self) -> bool:
        """Nothing new is installed into a cluster that is going away."""
        return self.stage in {Stage.DELETING, Stage.GONE}

    @property
    def withdraw_all(self) -> bool:
        """Nothing is wanted: what was composed is withdrawn in Usage order."""
        return self.stage is Stage.DELETED


def read_record(xr: struct_pb2.Struct, cluster_name: str) -> Record | None:
    """The deletion recorded in the observed XR's status, for this cluster name."""
    rec = structs.struct_at(xr, "status", STATUS_FIELD)
    if rec is None or structs.str_at(rec, "name") != cluster_name:
        return None
    phase = structs.str_at(rec, "phase")
    if phase not in {DELETING, GONE, DELETED}:
        return None
    finalizing = []
    listed = rec.fields["finalizing"] if "finalizing" in rec.fields else None
    for item in listed.list_value.values if listed is not None else ():
        entry = item.struct_value
        api, kind, name = (structs.str_at(entry, k) for k in ("apiVersion", "kind", "name"))
        if api and kind and name:
            finalizing.append(Finalizing(api, kind, name))
    return Record(cluster_name, structs.str_at(rec, "uid") or "", phase, tuple(finalizing))


def all_releases_orphaned(resources: Mapping[str, fnv1.Resource], flavour: Flavour) -> bool:
    """Whether every observed helm Release has the orphan policy applied."""
    return all(
        flavour.is_orphaned(r.resource)
        for r in resources.values()
        if "kind" in r.resource.fields and r.resource.fields["kind"].string_value == "Release"
    )


def assess(  # noqa: PLR0911  # one return per stage, in the order they are decided
    facts: ClusterFacts,
    cluster_name: str,
    record: Record | None,
    resources: Mapping[str, fnv1.Resource],
    flavour: Flavour,
) -> Assessment:
    """Where the cluster stands (see the module docstring)."""
    uid = facts.cluster_uid or ""
    replaced = bool(record is not None and record.uid and uid and uid != record.uid)
    if record is not None and record.phase == DELETED:
        gone = not resources and not record.finalizing
        if facts.found and (replaced or not facts.deleting) and gone:
            # A cluster of that name again, and the old one's resources all gone.
            return Assessment(Stage.PRESENT)
        return Assessment(Stage.DELETED, record)
    if facts.deleting and not replaced:
        return Assessment(
            Stage.DELETING, Record(cluster_name, uid or _uid(record), DELETING)
        )
    if record is None:
        return Assessment(Stage.PRESENT if facts.found else Stage.MISSING)
    if facts.found and not replaced:
        # The recorded deletion is no longer seen (a deletion cannot be undone, so
        # this was a read of another state): back to normal.
        return Assessment(Stage.PRESENT)
    # Not found (or replaced by a new cluster of the same name) after a recorded
    # deletion: gone once seen so by two calls in a row, so that one read that
    # missed does not drop what a cluster still being deleted needs.
    if record.phase == GONE and all_releases_orphaned(resources, flavour):
        return Assessment(Stage.DELETED, Record(cluster_name, record.uid, DELETED))
    return Assessment(Stage.GONE, Record(cluster_name, record.uid, GONE))


def _uid(record: Record | None) -> str:
    return record.uid if record is not None else ""


def status(assessment: Assessment) -> dict[str, Any] | None:
    """``status.clusterDeletion`` to write, or None when nothing is recorded."""
    return assessment.record.as_dict() if assessment.record is not None else None
