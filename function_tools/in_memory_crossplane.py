"""An in-memory Crossplane, Kubernetes and providers, to play a ClusterPlugin's lifecycle.

It does what Crossplane does with the function's answers, nothing more:
- builds the RunFunctionRequest (observed XR and composed resources, step
  input) and runs the required-resources loop (at most 5 iterations), filling
  ``required_resources`` (Crossplane 2.x) or only ``extra_resources`` selected
  by label across namespaces (Crossplane 1.x); it holds each object in the one
  version it was given and converts nothing, so, as ``crossplane render`` (and an
  API server that serves only that version), it hands an object over only when
  asked for in exactly that apiVersion;
- on a FATAL result applies nothing and deletes nothing;
- otherwise applies every desired composed resource, deletes every observed
  one missing from desired state (recording it, and whether something using it
  was still in the API server: a Usage of it, which Crossplane's usage webhook
  refuses such a deletion for, or a user a Usage of it named, whose order the
  Usage stood for), and writes the XR status and conditions (Ready from composed
  readiness, overridden by the desired composite's ``ready``); what it deletes is
  no longer observed, but finalizers keep it in the API server (where the webhook
  and the function's required resources still find it): a Usage through the next
  reconcile, anything else (a Release while helm uninstalls it, an AWS resource
  while the provider deletes it) through the next ``deletion_delay``;
and what the providers do: a composed resource turns Ready a few reconciles
after it is created (or never, while a fault holds it down) and reports an ARN;
a helm Release deleted without the orphan policy is uninstalled while the
workload cluster exists, and hangs forever once it is gone (provider-helm
cannot reach it: the Release never finalizes).

And what Cluster API does when a cluster is deleted (``delete_cluster``): the
Cluster, then its control plane and infrastructure object, carry a
``deletionTimestamp``; ``remove_cluster`` takes them and their Secrets away;
``recreate_cluster`` brings a new cluster of the same name (new uids).
Used by the tests, by ``render`` (one reconcile) and by ``simulate``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function_tools.resolve import MAX_REQUIREMENT_ITERATIONS, resolve_into

ACCOUNT = "123456789012"
COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"


@dataclass
class Composed:
    """A composed resource in the world."""

    name: str  # composition-resource-name
    obj: dict[str, Any]
    created_at: int
    ready: bool = False
    uninstalling: bool = False  # a Release stuck in its helm uninstall
    generation: int = 1  # metadata.generation: one more for each change of spec
    # The generation the provider last acted on (its Synced condition's observedGeneration),
    # and the reconcile the spec changed since: the provider acts on a new spec only
    # ``provider_delay`` reconciles later, its old Ready=True standing until then.
    acted_generation: int = 1
    changed_at: int = 0
    # The reconcile whose change of spec.forProvider provider-helm upgraded this
    # (ready) Release for; None if never.
    upgraded_at: int | None = None
    # A Release: the spec.forProvider helm runs (None until installed), its revision, and the
    # provider's error (Synced=False) when it could not install or upgrade it.
    deployed: dict[str, Any] | None = None
    revision: int = 0
    error: str = ""
    # The reconcile it last turned Ready at (its Ready condition's lastTransitionTime).
    ready_at: int = 0
    # A Release whose install was cut off: helm left it failed (until provider-helm's next
    # look uninstalls it to retry), provider-helm's count of tries (status.failed), and the
    # reconcile it uninstalled at with the desired state it had then (see _act).
    install_failed: bool = False
    failed_tries: int = 0
    retry_from: int | None = None
    desired_at_retry: str = ""


@dataclass
class Reconcile:
    """What one reconcile did."""

    step: int
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Deleted while something using it was in the API server (InMemoryCrossplane.deleted_in_use).
    deleted_in_use: list[str] = field(default_factory=list)
    desired: list[str] = field(default_factory=list)
    fatal: str | None = None
    xr_ready: bool = False
    ttl: float = 0
    response: fnv1.RunFunctionResponse | None = None
    iterations: int = 0


CLUSTER_KINDS = frozenset(
    {
        "Cluster",
        "KubeadmControlPlane",
        "AWSManagedControlPlane",
        "AWSCluster",
        "AWSManagedCluster",
    }
)
DELETION_TIMESTAMP = "2026-01-02T00:00:00Z"


def _assign_uid(obj: dict[str, Any], generation: int) -> None:
    """A uid as the API server gives one (deterministic here), and CAPI's owner references."""
    meta = obj.setdefault("metadata", {})
    if obj.get("kind") == "Cluster" and "uid" not in meta:
        seed = f"{meta.get('namespace')}/{meta.get('name')}/{generation}"
        digest = hashlib.sha256(seed.encode()).hexdigest()
        meta["uid"] = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _ref(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj.get("apiVersion", ""), obj.get("kind", ""), obj.get("metadata", {}).get("name", "")


def _end(ref: dict[str, Any]) -> tuple[str, str, str]:
    """(apiVersion, kind, name) of a Usage's ``of`` or ``by``."""
    name = ref.get("resourceRef", {}).get("name", "")
    return ref.get("apiVersion", ""), ref.get("kind", ""), name


def _usage_ends(usage: dict[str, Any]) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    """(by, of) of a Usage, each as ``_end`` gives it."""
    spec = usage.get("spec", {})
    return _end(spec.get("by", {})), _end(spec.get("of", {}))


def orphaned(release: dict[str, Any]) -> bool:
    """Whether deleting this Release forgets it instead of uninstalling it."""
    spec = release.get("spec", {})
    policies = spec.get("managementPolicies", ["*"])
    return spec.get("deletionPolicy") == "Orphan" or not {"Delete", "*"} & set(policies)


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws-us-gov" if region.startswith("us-gov-") else "aws"


def _arn(obj: dict[str, Any], default_region: str = "us-east-1") -> str | None:
    kind = obj.get("kind")
    fp = obj.get("spec", {}).get("forProvider", {})
    ext = obj.get("metadata", {}).get("annotations", {}).get("crossplane.io/external-name", "")
    # IAM is global: its objects carry no region, so they take the cluster's partition.
    part = _partition(fp.get("region", default_region))
    if kind == "Role":
        # A role lives in the account of the OIDC provider it trusts (External IRSA
        # names another account than the simulated one).
        trusted = re.search(
            r"arn:[\w-]+:iam::(\d{12}):oidc-provider/", fp.get("assumeRolePolicy", "")
        )
        account = trusted.group(1) if trusted else ACCOUNT
        return f"arn:{part}:iam::{account}:role{fp.get('path', '/')}{ext}"
    if kind == "Policy":
        return f"arn:{part}:iam::{ACCOUNT}:policy{fp.get('path', '/')}{ext}"
    if kind == "OpenIDConnectProvider":
        url = fp.get("url", "")
        return f"arn:{part}:iam::{ACCOUNT}:oidc-provider/{url.removeprefix('https://')}"
    if kind == "Bucket":
        return f"arn:{part}:s3:::{ext}"
    if kind == "Distribution":
        return f"arn:{part}:cloudfront::{ACCOUNT}:distribution/{_cloudfront_id(obj)}"
    return None


def _cloudfront_id(obj: dict[str, Any]) -> str:
    """An id as CloudFront assigns one (E and 13 more), deterministic here."""
    seed = str(obj.get("metadata", {}).get("name", "")) + str(obj.get("kind"))
    return "E" + hashlib.sha256(seed.encode()).hexdigest()[:13].upper()


def _reported(obj: dict[str, Any], default_region: str) -> dict[str, str]:
    """What the provider reports in ``status.atProvider`` once the resource exists."""
    out: dict[str, str] = {}
    arn = _arn(obj, default_region)
    if arn:
        out["arn"] = arn
    kind = obj.get("kind")
    if kind in {"Distribution", "OriginAccessControl"}:
        out["id"] = _cloudfront_id(obj)
    if kind == "Distribution":
        out["domainName"] = f"{_cloudfront_id(obj).lower()}.cloudfront.net"
        out["hostedZoneId"] = "Z2FDTNDATAQYW2"
    if kind == "Release":
        out["state"] = "deployed"  # provider-helm: the helm release's status
    return out


def set_control_plane(obj: dict[str, Any], *, initialized: bool, available: bool) -> None:
    """Rewrite a control plane's status, in the shape of its own API version."""
    status = obj.setdefault("status", {})
    if (
        obj.get("apiVersion", "").endswith("/v1beta1")
        or obj.get("kind") == "AWSManagedControlPlane"
    ):
        status["initialized"] = initialized
        status["ready"] = available
        status["conditions"] = [
            {
                "type": "Ready",
                "status": str(available),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
            {
                "type": "Available",
                "status": str(available),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
        ]
        if obj.get("kind") == "AWSManagedControlPlane":
            _eks_addons_status(obj, initialized=initialized, available=available)
        return
    status.setdefault("initialization", {})["controlPlaneInitialized"] = initialized
    # v1beta2 conditions are metav1.Conditions: the real CRD requires reason and message.
    status["conditions"] = [
        {
            "type": "Initialized",
            "status": str(initialized),
            "reason": "Initialized" if initialized else "NotInitialized",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Available",
            "status": str(available),
            "reason": "Available" if available else "NotAvailable",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ]


def _eks_addons_status(obj: dict[str, Any], *, initialized: bool, available: bool) -> None:
    """CAPA's report of the EKS add-ons its spec.addons lists, as the control plane comes up.

    None before the EKS cluster exists; CAPA creates them once it does (CREATING), and EKS
    reports them ACTIVE a while later (here: once the control plane is available).
    """
    status = obj.setdefault("status", {})
    if not initialized:
        status.pop("addons", None)
        return
    reported = {a.get("name"): a for a in status.get("addons") or ()}
    addons = []
    for wanted in obj.get("spec", {}).get("addons") or ():
        entry = {**reported.get(wanted["name"], {}), "name": wanted["name"]}
        entry.setdefault("version", wanted.get("version", ""))
        entry["status"] = "ACTIVE" if available else "CREATING"
        addons.append(entry)
    status["addons"] = addons


# What provider-helm says of a Release whose workload cluster's API it cannot reach.
API_CUT_ERROR = (
    "cannot create new Helm client: Kubernetes cluster unreachable: Get "
    '"https://workload:6443/version": dial tcp 10.0.0.1:6443: connect: connection refused'
)


class InMemoryCrossplane:
    """An XR, the objects around it, and Crossplane's reconcile loop."""

    def __init__(
        self,
        xr: dict[str, Any],
        required: Iterable[dict[str, Any]] = (),
        *,
        step_input: dict[str, Any] | None = None,
        crossplane_v1: bool = False,
        capabilities: bool = False,
        ready_delay: int = 1,
        slow: Mapping[str, int] | None = None,
        helm_poll: int = 10,
        deletion_delay: int = 3,
        provider_delay: int = 1,
        seconds_per_reconcile: int = 10,
        missing_charts: Iterable[str] = (),
        interrupted_installs: Iterable[str] = (),
        runner: Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse] | None = None,
    ) -> None:
        self.xr = copy.deepcopy(xr)
        self.required = [copy.deepcopy(o) for o in required]
        self.step_input = step_input or {}
        self.crossplane_v1 = crossplane_v1
        self.capabilities = capabilities
        self.ready_delay = ready_delay
        # Kinds that take longer to turn Ready: kind -> reconciles after creation.
        self.slow = dict(slow or {})
        # provider-helm's poll, in reconciles: how long an upgraded Release still says
        # Ready=False (see _observed_object).
        self.helm_poll = helm_poll
        # Reconciles a deleted composed resource (not a Usage) stays in the API server.
        self.deletion_delay = deletion_delay
        # Reconciles before a provider acts on a changed spec (its old Ready=True stands).
        self.provider_delay = provider_delay
        # The world's clock: each reconcile is this many seconds after the one before, and
        # the function is called with it (fn.run's ``now``) unless another runner is given.
        self.seconds_per_reconcile = seconds_per_reconcile
        self.start = self.START  # the clock at reconcile 0
        # "<chart>@<version>" the chart repository does not have: provider-helm fails.
        self.missing_charts = set(missing_charts)
        # Releases (composition resource names) whose first helm install the workload cluster's
        # API is lost in the middle of, once: helm leaves the release failed.
        self.interrupted_installs = set(interrupted_installs)
        self.runner = runner if runner is not None else self._run
        self.composed: dict[str, Composed] = {}
        self.step = 0
        self.held_down: set[str] = set()  # names a fault keeps not-ready
        # The workload cluster's API out of reach: provider-helm reports every Release
        # failing to connect (Synced=False) and acts on none until it is back.
        self.api_cut = False
        self.hidden: set[str] = set()  # required objects temporarily unreadable (kind/name)
        self.history: list[Reconcile] = []
        infra = next((o for o in self.required if o.get("kind") == "AWSCluster"), {})
        self.region: str = (
            self.xr.get("spec", {}).get("region")
            or infra.get("spec", {}).get("region")
            or "us-east-1"
        )
        self.deletions: list[tuple[int, str]] = []
        # Deleted while something using it was in the API server: (reconcile, name). A
        # Usage of it (Crossplane's usage webhook refuses such a deletion; deleting the
        # Usage in the same go strips its protection first), or a user some Usage of it
        # named (the Usage is gone, the order it stood for broken all the same).
        self.deleted_in_use: list[tuple[int, str]] = []
        # Deleted but held by finalizers: (the last reconcile it is still there, object).
        self.lingering: list[tuple[int, dict[str, Any]]] = []
        # Deleted and gone from the API server: (the first reconcile it is no longer there, name).
        self.gone: list[tuple[int, str]] = []
        # (apiVersion, kind, name) of a used resource -> of its users, from every Usage applied.
        self.users_of: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
        # Releases deleted with a helm uninstall, and those stuck uninstalling from a
        # cluster that is gone: (reconcile, name).
        self.uninstalls: list[tuple[int, str]] = []
        self.hung: list[tuple[int, str]] = []
        self.cluster_gone = False
        self._removed: list[dict[str, Any]] = []
        self._generation = 0
        for obj in self.required:
            _assign_uid(obj, self._generation)

    # --- the world outside the function -----------------------------------

    START = 1767225600  # 2026-01-01T00:00:00Z

    @property
    def now(self) -> float:
        """The world's clock, seconds since the epoch."""
        return float(self.start + self.step * self.seconds_per_reconcile)

    def time_at(self, step: int) -> str:
        """The world's clock at reconcile ``step``, as Kubernetes writes times."""
        return time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.start + step * self.seconds_per_reconcile)
        )

    def _run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        return fn.run(req, now=self.now)

    def control_plane(self) -> dict[str, Any] | None:
        """The first control-plane object among the required objects."""
        return next(
            (
                o
                for o in self.required
                if o.get("kind") in {"KubeadmControlPlane", "AWSManagedControlPlane"}
            ),
            None,
        )

    def set_control_plane(self, *, initialized: bool, available: bool) -> None:
        """Move the workload control plane to a state."""
        cp = self.control_plane()
        if cp is not None:
            set_control_plane(cp, initialized=initialized, available=available)

    def set_kubernetes_version(self, version: str, *, running: bool) -> None:
        """Ask the control plane for Kubernetes ``version`` (its spec).

        With ``running`` it runs it too (its status: CAPI rolled every control-plane machine).
        """
        cp = self.control_plane()
        if cp is None:
            return
        cp.setdefault("spec", {})["version"] = version
        if running:
            cp.setdefault("status", {})["version"] = version

    # --- Cluster API deleting and recreating the cluster -------------------

    def _cluster_objects(self) -> list[dict[str, Any]]:
        return [o for o in self.required if o.get("kind") in CLUSTER_KINDS]

    def delete_cluster(self, *, cascade: bool = True) -> None:
        """Delete the Cluster: it carries a deletionTimestamp.

        With ``cascade`` its control plane and infrastructure object too (CAPI
        deletes them after the machines, a little later).
        """
        for obj in self._cluster_objects():
            if cascade or obj.get("kind") == "Cluster":
                obj["metadata"].setdefault("deletionTimestamp", DELETION_TIMESTAMP)

    @property
    def cluster_deleting(self) -> bool:
        """Whether an object of the cluster carries a deletionTimestamp."""
        return any("deletionTimestamp" in o["metadata"] for o in self._cluster_objects())

    def remove_cluster(self) -> None:
        """The cluster is gone: its objects and Secrets are no longer found."""
        self._removed = [copy.deepcopy(o) for o in self.required]
        self.required = []
        self.cluster_gone = True

    def recreate_cluster(self) -> None:
        """A new cluster of the same name: the same objects, new uids, not deleting."""
        self._generation += 1
        self.required = self._removed or self.required
        self._removed = []
        for obj in self.required:
            obj["metadata"].pop("deletionTimestamp", None)
            obj["metadata"].pop("uid", None)
            for ref in obj["metadata"].get("ownerReferences", []):
                ref.pop("uid", None)
            _assign_uid(obj, self._generation)
        uid = next(
            (o["metadata"]["uid"] for o in self.required if o.get("kind") == "Cluster"), None
        )
        for obj in self.required:
            for ref in obj["metadata"].get("ownerReferences", []):
                if ref.get("kind") == "Cluster" and uid is not None:
                    ref["uid"] = uid
        self.cluster_gone = False

    def _visible_required(self) -> list[dict[str, Any]]:
        return [
            o
            for o in self.required
            if f"{o.get('kind')}/{o['metadata']['name']}" not in self.hidden
        ]

    # --- Crossplane ---------------------------------------------------------

    def _observed_object(self, c: Composed) -> dict[str, Any]:
        obj = copy.deepcopy(c.obj)
        obj["metadata"]["generation"] = c.generation
        status = obj.setdefault("status", {})
        synced: dict[str, Any] = {
            "type": "Synced",
            "status": "True",
            "reason": "ReconcileSuccess",
            "observedGeneration": c.acted_generation,
        }
        if c.error:
            synced.update(status="False", reason="ReconcileError", message=c.error)
        if c.obj.get("kind") == "Release" and c.deployed is not None:
            status["atProvider"] = {
                "state": "deployed",
                "revision": c.revision,
                "version": c.deployed.get("chart", {}).get("version", ""),
            }
        if (
            c.obj.get("kind") == "Release"
            and c.deployed is None
            and (c.install_failed or c.failed_tries)
        ):
            # What helm left (a failed first revision), as provider-helm last observed it.
            status["atProvider"] = {"state": "failed", "revision": 1}
        if c.failed_tries and c.deployed is None:
            status["failed"] = c.failed_tries  # reset once deployed
        if c.obj.get("kind") == "Release" and c.retry_from is not None:
            # Uninstalled to retry: a successful update, Synced, the release not deployed.
            status["conditions"] = [
                {"type": "Ready", "status": "False", "reason": "Unavailable"},
                synced,
            ]
        elif c.error and c.obj.get("kind") == "Release":
            # provider-helm's Observe found the release not up to date: Unavailable.
            status["conditions"] = [
                {"type": "Ready", "status": "False", "reason": "Unavailable"},
                synced,
            ]
        elif c.ready and self.upgrading(c):
            # What provider-helm writes after a successful upgrade: Synced at this
            # generation and the deployed release, but still the Unavailable its Observe
            # found before upgrading, until its next poll (crossplane-runtime requeues a
            # successful update only after the poll interval).
            status["conditions"] = [
                {"type": "Ready", "status": "False", "reason": "Unavailable"},
                synced,
            ]
        elif c.ready:
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Available",
                    "lastTransitionTime": self.time_at(c.ready_at),
                },
                synced,
            ]
        else:
            status["conditions"] = [{"type": "Ready", "status": "False", "reason": "Creating"}]
        reported = _reported(obj, self.region) if c.ready else {}
        reported.pop("state", None)  # a Release's comes from what helm runs (above)
        if reported:
            status.setdefault("atProvider", {}).update(reported)
        return obj

    def request(self) -> fnv1.RunFunctionRequest:
        """The request Crossplane would send before resolving requirements."""
        req = fnv1.RunFunctionRequest()
        req.meta.tag = f"step-{self.step}"
        if self.capabilities:
            req.meta.capabilities.extend(
                [
                    fnv1.CAPABILITY_CAPABILITIES,
                    fnv1.CAPABILITY_REQUIRED_RESOURCES,
                    fnv1.CAPABILITY_CONDITIONS,
                ]
            )
        req.observed.composite.resource.update(self.xr)
        for name in sorted(self.composed):
            req.observed.resources[name].resource.update(self._observed_object(self.composed[name]))
        if self.step_input:
            req.input.update(self.step_input)
        return req

    def _fill(self, req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> None:
        in_api = self._visible_required() + self._in_api()
        resolve_into(req, rsp.requirements, in_api, crossplane_v1=self.crossplane_v1)

    def call(self) -> tuple[fnv1.RunFunctionResponse, int]:
        """Run the function through the required-resources loop; (final response, iterations)."""
        req = self.request()
        rsp = self.runner(req)
        iterations = 1
        while iterations < MAX_REQUIREMENT_ITERATIONS:
            before = rsp.requirements.SerializeToString(deterministic=True)
            self._fill(req, rsp)
            rsp = self.runner(req)
            iterations += 1
            if rsp.requirements.SerializeToString(deterministic=True) == before:
                break
        return rsp, iterations

    def reconcile(self) -> Reconcile:
        """One Crossplane reconcile of the XR, then one tick of the providers."""
        self.step += 1
        rsp, iterations = self.call()
        rec = Reconcile(
            self.step, response=rsp, iterations=iterations, ttl=rsp.meta.ttl.ToSeconds()
        )
        fatal = next((r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL), None)
        if fatal is not None:
            rec.fatal = fatal.message
            self.history.append(rec)
            return rec
        desired = dict(rsp.desired.resources.items())
        rec.desired = sorted(desired)
        self._delete_undesired(rec, set(desired))
        all_ready = True
        for name, r in desired.items():
            body = resource.struct_to_dict(r.resource)
            if name in self.composed:
                c = self.composed[name]
                spec = body.get("spec", {})
                if spec != c.obj.get("spec", {}):
                    c.generation += 1
                    c.changed_at = self.step
                c.obj["spec"] = spec
                meta = body.get("metadata", {})
                # Server-side apply: an annotation the function no longer sets is removed too
                # (Crossplane's own stays).
                c.obj["metadata"]["annotations"] = {
                    COMPOSITION_RESOURCE_NAME: name,
                    **meta.get("annotations", {}),
                }
                # Server-side apply: a label the function no longer sets is removed (the
                # InMemoryCrossplane's objects carry no labels but the function's).
                c.obj["metadata"].pop("labels", None)
                if "labels" in meta:
                    c.obj["metadata"]["labels"] = dict(meta["labels"])
            else:
                c = self._create(name, body)
                rec.created.append(name)
            if c.obj.get("kind") == "Usage":
                by, of = _usage_ends(c.obj)
                self.users_of.setdefault(of, set()).add(by)
            all_ready = all_ready and r.ready == fnv1.READY_TRUE
        self._write_xr(rsp, all_ready=all_ready)
        rec.xr_ready = self.xr_ready
        self.history.append(rec)
        self._tick()
        return rec

    def _delete_undesired(self, rec: Reconcile, desired: set[str]) -> None:
        in_api = {_ref(o) for o in self._in_api()}
        in_use = self._used() | {
            of for of, users in self.users_of.items() if users & in_api
        }
        staying = {_ref(c.obj) for n, c in self.composed.items() if n in desired}
        for name in sorted(set(self.composed) - desired):
            c = self.composed[name]
            if c.obj.get("kind") == "Usage":
                by, of = _usage_ends(c.obj)
                if by in staying:
                    # Withdrawn while its user stays: what it used may go before that user.
                    self.users_of.get(of, set()).discard(by)
            if _ref(c.obj) in in_use:
                rec.deleted_in_use.append(name)
                self.deleted_in_use.append((self.step, name))
            if c.obj.get("kind") == "Release" and not orphaned(c.obj):
                if self.cluster_gone:
                    # provider-helm cannot reach the cluster: the Release never finalizes.
                    if not c.uninstalling:
                        c.uninstalling = True
                        self.hung.append((self.step, name))
                    continue
                self.uninstalls.append((self.step, name))
            del self.composed[name]
            rec.deleted.append(name)
            self.deletions.append((self.step, name))
            # The usage controller lets a deleted Usage go once it has seen it deleted.
            delay = 1 if c.obj.get("kind") == "Usage" else self.deletion_delay
            if delay:
                self.lingering.append((self.step + delay, c.obj))
            else:
                self.gone.append((self.step + 1, name))

    def _in_api(self) -> list[dict[str, Any]]:
        """The composed resources in the API server: observed ones and those being deleted."""
        return [c.obj for c in self.composed.values()] + [obj for _, obj in self.lingering]

    def _usages(self) -> list[dict[str, Any]]:
        """The Usages in the API server: composed ones and those still being deleted."""
        return [o for o in self._in_api() if o.get("kind") == "Usage"]

    def _used(self) -> set[tuple[str, str, str]]:
        """(apiVersion, kind, name) of every resource a Usage in the API server uses."""
        return {_usage_ends(usage)[1] for usage in self._usages()}

    def _act(self, c: Composed) -> None:
        """The provider acts on ``c``'s current spec (a Release: helm installs or upgrades)."""
        if c.obj.get("kind") != "Release":
            c.acted_generation = c.generation
            return
        if c.install_failed:
            # provider-helm v1.3.0 (rollbackLimit set) finds the release failed: it uninstalls
            # it to retry (status.failed + 1) and, the update done, installs again only at its
            # next poll or on a change of the Release's desired state (its watch's predicate).
            c.install_failed, c.error = False, ""
            c.failed_tries += 1
            c.retry_from, c.desired_at_retry = self.step, self._desired_state(c)
            return
        if c.retry_from is not None:
            if (
                self.step - c.retry_from < self.helm_poll
                and self._desired_state(c) == c.desired_at_retry
            ):
                return
            c.retry_from = None
        for_provider = c.obj.get("spec", {}).get("forProvider", {})
        chart = for_provider.get("chart", {})
        if c.deployed is None and c.name in self.interrupted_installs:
            self.interrupted_installs.discard(c.name)
            c.install_failed = True
            c.error = (
                "failed to install release: 1 error occurred:\n\t* Post "
                '"https://workload:6443/apis/apps/v1/namespaces/kube-system/daemonsets'
                '?fieldManager=provider-helm": unexpected EOF'
            )
            c.acted_generation = c.generation
            return
        if f"{chart.get('name')}@{chart.get('version')}" in self.missing_charts:
            # What provider-helm v1.3.0 reports when helm cannot pull the chart.
            verb = "upgrade" if c.deployed is not None else "install"
            c.error = (
                f"failed to {verb} release: failed to load chart: chart "
                f'"{chart.get("name")}" version "{chart.get("version")}" not found in '
                f"{chart.get('repository')} repository"
            )
            c.acted_generation = c.generation
            return
        c.error = ""
        c.acted_generation = c.generation
        if for_provider == c.deployed:
            return  # up to date: Observe says so, helm runs nothing
        if c.deployed is not None and c.ready:
            # An upgrade: Ready=False (its Observe before upgrading) until the next poll.
            c.upgraded_at = self.step
        c.deployed = copy.deepcopy(for_provider)
        c.revision += 1
        c.failed_tries = 0  # provider-helm resets it once the release is deployed

    @staticmethod
    def _desired_state(c: Composed) -> str:
        """What provider-helm's watch reacts to: the spec, the labels and the annotations."""
        meta = c.obj.get("metadata", {})
        return json.dumps(
            [c.obj.get("spec"), meta.get("labels"), meta.get("annotations")], sort_keys=True
        )

    def _create(self, name: str, body: dict[str, Any]) -> Composed:
        meta = body.setdefault("metadata", {})
        xr_meta = self.xr.get("metadata", {})
        if "name" not in meta:
            digest = hashlib.sha256(f"{xr_meta.get('name')}/{name}".encode()).hexdigest()[:5]
            meta["name"] = f"{xr_meta.get('name', 'xr')}-{digest}"
        namespace = xr_meta.get("namespace")
        if namespace and not body.get("kind", "").startswith("Cluster"):
            meta["namespace"] = namespace
        meta.setdefault("annotations", {})[COMPOSITION_RESOURCE_NAME] = name
        c = Composed(name, body, created_at=self.step, changed_at=self.step)
        self.composed[name] = c
        return c

    def upgrading(self, c: Composed) -> bool:
        """Whether provider-helm has upgraded ``c`` and not polled it since."""
        return c.upgraded_at is not None and self.step <= c.upgraded_at + self.helm_poll

    @property
    def xr_ready(self) -> bool:
        """The XR's Ready condition."""
        for c in self.xr.get("status", {}).get("conditions", []):
            if c.get("type") == "Ready":
                return bool(c.get("status") == "True")
        return False

    def _write_xr(self, rsp: fnv1.RunFunctionResponse, *, all_ready: bool) -> None:
        desired = resource.struct_to_dict(rsp.desired.composite.resource)
        status = self.xr.setdefault("status", {})
        # What the function wrote last time and no longer writes goes (server-side apply).
        written = ("issuerURL", "oidcProviderARN", "roleARNs", "plugins", "clusterDeletion")
        for key in (*written, "rollout"):
            status.pop(key, None)
        status.update(desired.get("status", {}))
        ready = all_ready and rsp.desired.composite.ready != fnv1.READY_FALSE
        names = {fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}
        conditions = [
            {"type": "Ready", "status": str(ready), "reason": "Available" if ready else "Creating"}
        ]
        conditions += [
            {
                "type": c.type,
                "status": names.get(c.status, "Unknown"),
                "reason": c.reason,
                "message": c.message,
            }
            for c in rsp.conditions
        ]
        status["conditions"] = conditions

    def _tick(self) -> None:
        for until, obj in self.lingering:
            if until == self.step:
                name = obj["metadata"]["annotations"][COMPOSITION_RESOURCE_NAME]
                self.gone.append((self.step + 1, name))
        self.lingering = [(until, obj) for until, obj in self.lingering if until > self.step]
        for c in self.composed.values():
            release = c.obj.get("kind") == "Release"
            created = self.step - c.created_at + 1 >= self.slow.get(
                c.obj.get("kind", ""), self.ready_delay
            )
            cut = release and self.api_cut
            if cut:
                c.error = API_CUT_ERROR
            elif c.error == API_CUT_ERROR:
                c.error = ""  # its next Observe reaches the cluster again
            # provider-helm cannot reach a cluster that is gone, or cut off.
            reachable = not (self.cluster_gone and release) and not cut
            if reachable and created and (
                (c.deployed is None and release) or c.generation > c.acted_generation
            ):
                if (c.deployed is None and release) or self.step - c.changed_at + 1 > (
                    self.provider_delay
                ):
                    self._act(c)
            ready = (
                c.name not in self.held_down
                and created
                and reachable
                and not (release and (c.error or c.deployed is None))
            )
            if ready and not c.ready:
                c.ready_at = self.step
            c.ready = ready

    def run(
        self, steps: int, *, before: Callable[[InMemoryCrossplane], None] | None = None
    ) -> list[Reconcile]:
        """Reconcile ``steps`` times, calling ``before(world)`` ahead of each."""
        out = []
        for _ in range(steps):
            if before is not None:
                before(self)
            out.append(self.reconcile())
        return out
