"""The controllers that are not there: Cluster API, CAPA and the providers, played against the API server.

``Providers`` watches every kind the function composes (``function.flavour.KINDS``, of one
flavour) and does to each composed object what its provider would, through the status
subresource: it takes the object under its finalizer, reports it Ready and Synced with its
``status.atProvider`` (the ARN of roles, policies, the OIDC provider and the bucket, as
the in-memory InMemoryCrossplane reports them; a Release's state and revision). On deletion it lets
the object go, except for a Release deleted with a helm uninstall while the workload
cluster is gone: provider-helm cannot reach that cluster, so the Release hangs in its
finalizer, as in the InMemoryCrossplane. A kind a real provider runs for (``real_kinds``: provider-helm's
Releases in ``test_helm_kwok``) is only watched. Every event is recorded with its resourceVersion (etcd's
revision, one sequence for the whole store) so the tests can order creations against
readiness across kinds.

``ClusterAPI`` creates a cluster's objects from an example's ``required/`` directory
(Cluster, control plane, AWSCluster, ``<cluster>-sa`` with a fresh key pair, and
``<cluster>-kubeconfig``), moves the control plane through initialized and available,
and deletes the cluster as CAPI does: a finalizer keeps the Cluster while it is being
deleted; once it goes, the garbage collector takes what it owns.
"""

from __future__ import annotations

import base64
import copy
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lightkube import ApiError

from e2e.controlplane.kube import Kube
from function.flavour import KINDS
from function_tools.in_memory_crossplane import (
    COMPOSITION_RESOURCE_NAME,
    _arn,
    orphaned,
    set_control_plane,
)

PROVIDER_FINALIZER = "finalizer.managedresource.crossplane.io"
CAPI_CLUSTER_FINALIZER = "cluster.cluster.x-k8s.io"
# The finalizers the providers of a cluster's control plane and infrastructure object hold
# them by while they clean up (KCP, CAPA).
DESCENDANT_FINALIZERS = {
    "KubeadmControlPlane": "kubeadm.controlplane.cluster.x-k8s.io",
    "AWSManagedControlPlane": "awsmanagedcontrolplane.controlplane.cluster.x-k8s.io",
    "AWSCluster": "awscluster.infrastructure.cluster.x-k8s.io",
    "AWSManagedCluster": "awsmanagedcluster.infrastructure.cluster.x-k8s.io",
}
NOW = "2026-01-01T00:00:00Z"


def composed_kinds(*, namespaced: bool) -> list[tuple[str, str]]:
    """(apiVersion, kind) of everything the function composes for one flavour."""
    return sorted((versions[1] if namespaced else versions[0], kind) for kind, versions in KINDS.items())


@dataclass(frozen=True)
class Event:
    """One thing that happened to a composed object, at an etcd revision."""

    what: str  # created | ready | deleting | deleted | uninstalled | orphaned | hung
    kind: str
    name: str
    namespace: str
    resource: str  # composition-resource-name
    revision: int
    at: float = field(default_factory=time.monotonic)


def _rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _reported(obj: dict[str, Any]) -> bool:
    """Whether the played provider has reported on the object's current generation."""
    synced = next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == "Synced"), None)
    return synced is not None and synced.get("observedGeneration") == obj["metadata"].get("generation")


def _ready(obj: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def _at_provider(obj: dict[str, Any], region: str) -> dict[str, Any]:
    """What the provider reports about the external resource."""
    kind = obj["kind"]
    if kind == "Release":
        chart = obj.get("spec", {}).get("forProvider", {}).get("chart", {})
        return {"state": "deployed", "revision": 1, "releaseDescription": "Install complete", "version": chart.get("version", "")}
    if kind in {"ProviderConfig", "Usage"}:
        return {}
    meta = obj["metadata"]
    at: dict[str, Any] = {"id": meta.get("annotations", {}).get("crossplane.io/external-name") or meta["name"]}
    arn = _arn(obj, region)
    if arn:
        at["arn"] = arn
    return at


class Providers:
    """provider-upjet-aws and provider-helm, as far as the function can tell."""

    def __init__(
        self, kube: Kube, *, namespaced: bool, region: str = "us-east-1", real_kinds: frozenset[str] = frozenset()
    ) -> None:
        """``real_kinds``: kinds a real provider runs for; they are only watched, their
        readiness recorded as that provider reports it."""
        self.kube = kube
        self.kinds = composed_kinds(namespaced=namespaced)
        self.real_kinds = real_kinds
        self.region = region
        self.events: list[Event] = []
        self.errors: list[str] = []
        # Namespaces whose workload cluster is gone (provider-helm can no longer reach it);
        # "" for cluster-scoped Releases (legacy flavour).
        self.unreachable: set[str] = set()
        # (chart, version) the played chart repository does not have.
        self.missing_charts: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._ready: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        for api_version, kind in self.kinds:
            # No provider reports on a ProviderConfig (it counts as it exists) nor on a
            # Usage (Crossplane's own usage controller runs): they are only watched.
            manage = kind not in {"ProviderConfig", "Usage", *self.real_kinds}
            thread = threading.Thread(target=self._watch, args=(api_version, kind, manage), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, api_version: str, kind: str, manage: bool) -> None:
        def on_error(err: Exception) -> None:
            # 429: the API server's watch cache of a new CRD is still initializing.
            if "429" not in str(err):
                with self._lock:
                    self.errors.append(f"watch {kind}: {type(err).__name__}: {err}")

        self.kube.follow(api_version, kind, lambda event, obj: self._on(event, obj, manage=manage), self._stop, on_error)

    def _record(self, what: str, obj: dict[str, Any], revision: int | None = None) -> None:
        meta = obj["metadata"]
        resource = meta.get("annotations", {}).get(COMPOSITION_RESOURCE_NAME, "")
        event = Event(what, obj["kind"], meta["name"], meta.get("namespace", ""), resource, revision or _rv(obj))
        with self._lock:
            self.events.append(event)

    # --- what a provider does ------------------------------------------------------------

    def _on(self, event_type: str, obj: dict[str, Any], *, manage: bool) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        if event_type == "DELETED":
            self._record("deleted", obj)
            return
        if uid not in self._seen:
            self._seen.add(uid)
            # The creation's revision: the object's first resourceVersion.
            self._record("created", obj)
        if not manage:
            if obj["kind"] in self.real_kinds and _ready(obj) and uid not in self._ready:
                self._ready.add(uid)
                self._record("ready", obj)
            return
        try:
            if meta.get("deletionTimestamp"):
                self._delete(obj)
            elif PROVIDER_FINALIZER not in meta.get("finalizers", []):
                self.kube.patch(
                    obj["apiVersion"],
                    obj["kind"],
                    meta["name"],
                    {"metadata": {"finalizers": [*meta.get("finalizers", []), PROVIDER_FINALIZER], "resourceVersion": meta["resourceVersion"]}},
                    namespace=meta.get("namespace"),
                )
            elif not _reported(obj) and not (obj["kind"] == "Release" and self._unreachable(obj)):
                self._report(obj)
        except ApiError as err:
            if err.status.code not in (404, 409):  # gone, or changed since: the next event retries
                with self._lock:
                    self.errors.append(f"{obj['kind']} {meta['name']}: {err}")

    def _unreachable(self, release: dict[str, Any]) -> bool:
        return release["metadata"].get("namespace", "") in self.unreachable

    def _report(self, obj: dict[str, Any]) -> None:
        """What the provider says of the object's current spec (its generation): Ready and
        Synced, stamped with that generation as crossplane-runtime stamps them; a Release of a
        chart version the repository lacks (``missing_charts``) is not installed or upgraded:
        Synced=False with provider-helm's message, what helm runs unchanged."""
        meta = obj["metadata"]
        generation = meta.get("generation")
        status: dict[str, Any] = {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": NOW, "observedGeneration": generation},
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "lastTransitionTime": NOW, "observedGeneration": generation},
            ],
            "atProvider": _at_provider(obj, self.region),
        }
        chart = obj.get("spec", {}).get("forProvider", {}).get("chart", {}) if obj["kind"] == "Release" else {}
        if (chart.get("name"), chart.get("version")) in self.missing_charts:
            message = (
                f'failed to upgrade release: failed to load chart: chart "{chart.get("name")}" version '
                f'"{chart.get("version")}" not found in {chart.get("repository")} repository'
            )
            status["conditions"] = [
                {"type": "Ready", "status": "False", "reason": "Unavailable", "lastTransitionTime": NOW, "observedGeneration": generation},
                {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message, "lastTransitionTime": NOW, "observedGeneration": generation},
            ]
            status["atProvider"] = obj.get("status", {}).get("atProvider", {})
        updated = self.kube.patch_status(
            obj["apiVersion"],
            obj["kind"],
            meta["name"],
            {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status},
            namespace=meta.get("namespace"),
        )
        if _ready(updated):
            self._record("ready", updated)

    def _delete(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if obj["kind"] == "Release" and not orphaned(obj):
            if self._unreachable(obj):
                # provider-helm cannot reach the cluster: the uninstall never ends.
                with self._lock:
                    first = not any(e.what == "hung" and e.name == meta["name"] for e in self.events)
                if first:
                    self._record("hung", obj)
                return
            self._record("uninstalled", obj)
        elif obj["kind"] == "Release":
            self._record("orphaned", obj)
        finalizers = [f for f in meta.get("finalizers", []) if f != PROVIDER_FINALIZER]
        if len(finalizers) != len(meta.get("finalizers", [])):
            self.kube.patch(
                obj["apiVersion"],
                obj["kind"],
                meta["name"],
                {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}},
                namespace=meta.get("namespace"),
            )

    # --- what happened -------------------------------------------------------------------

    def history(self, namespace: str | None = None) -> list[Event]:
        with self._lock:
            return [e for e in self.events if namespace is None or e.namespace in ("", namespace)]

    def first(self, what: str, events: Iterable[Event]) -> dict[str, int]:
        """composition-resource-name -> the revision of its first ``what`` event."""
        out: dict[str, int] = {}
        for e in events:
            if e.what == what and e.resource:
                out.setdefault(e.resource, e.revision)
        return out


def _key_pair() -> tuple[bytes, bytes]:
    """A fresh RSA key pair as CAPI makes ``<cluster>-sa``: (PEM public key, PEM private key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    return public, private


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """An example object as a client creates it: no status, uid or server-set metadata."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out["metadata"]
    for key in ("uid", "generation", "resourceVersion", "creationTimestamp", "ownerReferences"):
        meta.pop(key, None)
    return out


CLUSTER_KINDS = ("Cluster", "KubeadmControlPlane", "AWSManagedControlPlane", "AWSCluster", "AWSManagedCluster")


class ClusterAPI:
    """One CAPI cluster made from an example's required objects."""

    def __init__(
        self, kube: Kube, required_dir: Path, namespace: str | None = None, workload_kubeconfig: bytes | None = None
    ) -> None:
        """``workload_kubeconfig``: what ``<cluster>-kubeconfig`` holds (by default a
        cluster nobody reaches: provider-helm is played)."""
        self.kube = kube
        self.workload_kubeconfig = workload_kubeconfig
        docs = [yaml.safe_load(p.read_text()) for p in sorted(required_dir.glob("*.yaml"))]
        self.examples = {d["kind"]: d for d in docs}
        cluster = self.examples["Cluster"]
        self.name = cluster["metadata"]["name"]
        self.namespace = namespace or cluster["metadata"]["namespace"]
        self.uid = ""

    def _objects(self) -> list[dict[str, Any]]:
        return [o for k, o in self.examples.items() if k in CLUSTER_KINDS]

    def _descendants(self) -> list[dict[str, Any]]:
        """The control plane and infrastructure object: what the Cluster owns among its kinds."""
        return [o for o in self._objects() if o["kind"] != "Cluster"]

    def control_plane(self) -> dict[str, Any]:
        return next(o for o in self._objects() if o["kind"].endswith("ControlPlane"))

    def create(self) -> None:
        """The namespace, the Cluster (held by CAPI's finalizer), its control plane (neither
        initialized nor available), its infrastructure (as the example reports it), and the
        cluster's Secrets, owned by the Cluster so that they go with it."""
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        cluster_example = self.examples["Cluster"]
        cluster = _strip(cluster_example)
        cluster["metadata"]["namespace"] = self.namespace
        cluster["metadata"]["finalizers"] = [CAPI_CLUSTER_FINALIZER]
        created = self.kube.create(cluster)
        self.uid = created["metadata"]["uid"]
        self._status(cluster_example, self._cluster_status(cluster_example, initialized=False, available=False))
        owner = {
            "apiVersion": cluster["apiVersion"],
            "kind": "Cluster",
            "name": self.name,
            "uid": self.uid,
        }
        for example in self._descendants():
            obj = _strip(example)
            obj["metadata"]["namespace"] = self.namespace
            obj["metadata"]["ownerReferences"] = [owner]
            self.kube.create(obj)
            status = copy.deepcopy(example.get("status", {}))
            if example["kind"].endswith("ControlPlane"):
                shaped = {"apiVersion": example["apiVersion"], "kind": example["kind"], "status": status}
                set_control_plane(shaped, initialized=False, available=False)
                status = shaped["status"]
            self._status(example, status)
        public, private = _key_pair()
        labels = {"cluster.x-k8s.io/cluster-name": self.name}
        for name, data in (
            (f"{self.name}-sa", {"tls.crt": public, "tls.key": private}),
            (f"{self.name}-kubeconfig", {"value": self._workload_kubeconfig()}),
        ):
            self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": self.namespace, "labels": labels, "ownerReferences": [owner]},
                    "type": "cluster.x-k8s.io/secret",
                    "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
                }
            )
        del private  # the private half lives only in the Secret

    def _workload_kubeconfig(self) -> bytes:
        if self.workload_kubeconfig is not None:
            return self.workload_kubeconfig
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": self.name, "cluster": {"server": f"https://{self.name}.invalid:6443"}}],
                "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": self.name}}],
                "users": [{"name": self.name, "user": {}}],
                "current-context": self.name,
            }
        ).encode()

    @staticmethod
    def _cluster_status(example: dict[str, Any], *, initialized: bool, available: bool) -> dict[str, Any]:
        status = copy.deepcopy(example.get("status", {}))
        if "initialization" in status:
            status["initialization"]["controlPlaneInitialized"] = initialized
        for cond in status.get("conditions", []):
            if cond["type"] in {"ControlPlaneInitialized"}:
                cond["status"] = str(initialized)
            if cond["type"] in {"ControlPlaneAvailable", "Available"}:
                cond["status"] = str(available)
        return status

    def _status(self, example: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return self.kube.patch_status(
            example["apiVersion"], example["kind"], example["metadata"]["name"], {"status": status}, namespace=self.namespace
        )

    def set_control_plane(self, *, initialized: bool, available: bool) -> int:
        """Move the control plane (and the Cluster's summary); the etcd revision of the change."""
        cp = self.control_plane()
        shaped = {"apiVersion": cp["apiVersion"], "kind": cp["kind"], "status": copy.deepcopy(cp.get("status", {}))}
        set_control_plane(shaped, initialized=initialized, available=available)
        # Replace the conditions list whole: a merge patch replaces lists anyway.
        updated = self._status(cp, shaped["status"])
        cluster = self.examples["Cluster"]
        self._status(cluster, self._cluster_status(cluster, initialized=initialized, available=available))
        return _rv(updated)

    def read(self) -> list[dict[str, Any]]:
        """The cluster's objects and Secrets as the API server holds them now."""
        out = []
        for example in self._objects():
            got = self.kube.get(example["apiVersion"], example["kind"], example["metadata"]["name"], self.namespace)
            if got is not None:
                out.append(got)
        for suffix in ("sa", "kubeconfig"):
            got = self.kube.get("v1", "Secret", f"{self.name}-{suffix}", self.namespace)
            if got is not None:
                out.append(got)
        return out

    def delete(self) -> int:
        """Delete the Cluster: CAPI's finalizer keeps it, with a deletionTimestamp; the revision."""
        cluster = self.examples["Cluster"]
        self.kube.delete(cluster["apiVersion"], "Cluster", self.name, self.namespace)
        got = self.kube.get(cluster["apiVersion"], "Cluster", self.name, self.namespace)
        assert got is not None and got["metadata"].get("deletionTimestamp"), got
        return _rv(got)

    def delete_descendants(self) -> None:
        """What CAPI's Cluster controller does once the Cluster is deleted: it deletes the
        control plane and the infrastructure object, which their providers' finalizers hold
        while they clean up (a deletionTimestamp is all Crossplane 1.x can see of the
        deletion: it never reads the Cluster)."""
        for example in self._descendants():
            api_version, kind, name = example["apiVersion"], example["kind"], example["metadata"]["name"]
            finalizer = {"metadata": {"finalizers": [DESCENDANT_FINALIZERS[kind]]}}
            self.kube.patch(api_version, kind, name, finalizer, self.namespace)
            self.kube.delete(api_version, kind, name, self.namespace)

    def finish_deletion(self) -> None:
        """CAPI is done: its finalizer goes, the Cluster with it, and the garbage collector
        deletes what the Cluster owns (control plane, infrastructure, Secrets); a descendant
        being deleted (delete_descendants) lets go too."""
        for example in self._descendants():
            got = self.kube.get(example["apiVersion"], example["kind"], example["metadata"]["name"], self.namespace)
            if got is not None and got["metadata"].get("deletionTimestamp"):
                self.kube.patch(
                    example["apiVersion"], example["kind"], got["metadata"]["name"], {"metadata": {"finalizers": None}}, self.namespace
                )
        cluster = self.examples["Cluster"]
        self.kube.patch(cluster["apiVersion"], "Cluster", self.name, {"metadata": {"finalizers": None}}, self.namespace)

    def gone(self) -> bool:
        """The Cluster and everything it owned are no longer found."""
        return not self.read() and self.kube.get(self.examples["Cluster"]["apiVersion"], "Cluster", self.name, self.namespace) is None
