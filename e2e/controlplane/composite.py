"""One ClusterPlugin (a namespaced XR, or a legacy claim and its XR) on the real control plane."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import yaml
from crossplane.function import resource

from e2e.controlplane import model
from e2e.controlplane.driver import ClusterAPI, Providers, composed_kinds
from e2e.controlplane.harness import ROOT, ControlPlane
from function.observed import upgraded_release
from function_tools import issuer

COMPOSITE_LABEL = "crossplane.io/composite"
RESOURCE_NAME = "crossplane.io/composition-resource-name"


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """type -> condition."""
    return {c["type"]: c for c in (obj or {}).get("status", {}).get("conditions", [])}


def condition_status(obj: dict[str, Any] | None, typ: str) -> str:
    return str(conditions(obj).get(typ, {}).get("status", ""))


def _replayed(ready: dict[str, Any] | None, ready_at: str) -> bool:
    """Whether a Ready condition that is not True dates from no later than ``ready_at`` (RFC 3339
    UTC times in Kubernetes' one format compare as strings)."""
    return ready is not None and ready.get("status") != "True" and str(ready.get("lastTransitionTime", "")) <= ready_at


def composed_ready(obj: dict[str, Any]) -> bool:
    """Ready as the function counts it: Ready=True, a Release provider-helm has upgraded
    but not polled since (it says Ready=False until then), or a kind without Ready."""
    if obj["kind"] in {"ProviderConfig", "Usage"} or condition_status(obj, "Ready") == "True":
        return True
    return obj["kind"] == "Release" and upgraded_release(resource.dict_to_struct(obj))


@dataclass
class Composite:
    """An example's XR (or claim) and its cluster, created on the control plane."""

    cp: ControlPlane
    providers: Providers
    example: str
    composition: dict[str, Any]
    namespace: str
    document: str = "xr.yaml"  # claim.yaml for a legacy claim
    workload_kubeconfig: bytes | None = None  # the driver's default: a cluster nobody reaches
    capi: ClusterAPI = field(init=False)
    manifest: dict[str, Any] = field(init=False)
    control_plane_revisions: dict[str, int] = field(default_factory=dict)
    # The XR's Ready lastTransitionTime when wait_ready last found it True.
    ready_at: str | None = None

    def __post_init__(self) -> None:
        example_dir = ROOT / "examples" / self.example
        self.capi = ClusterAPI(self.cp.kube, example_dir / "required", self.namespace, self.workload_kubeconfig)
        self.manifest = yaml.safe_load((example_dir / self.document).read_text())
        self.manifest["metadata"]["namespace"] = self.namespace
        self._issue_as_the_xr_says()

    def _issue_as_the_xr_says(self) -> None:
        """The control plane signs with the issuer ``function-cluster-plugin issuer`` prints for
        this XR or claim, as a user sets it: the example's KubeadmControlPlane names its own namespace's
        (the issuer's bucket name holds the namespace), and IssuerReady is True only on a match."""
        kcp = self.capi.examples.get("KubeadmControlPlane")
        config = (kcp or {}).get("spec", {}).get("kubeadmConfigSpec", {}).get("clusterConfiguration", {})
        args = config.get("apiServer", {}).get("extraArgs")
        # v1beta2: a list of {name, value}; v1beta1 (a legacy example's): a map.
        if isinstance(args, dict):
            sets_issuer = "service-account-issuer" in args
        else:
            sets_issuer = isinstance(args, list) and any(a.get("name") == "service-account-issuer" for a in args)
        if not sets_issuer:
            return
        required = []
        for obj in self.capi.examples.values():
            moved = copy.deepcopy(obj)
            moved["metadata"]["namespace"] = self.namespace
            required.append(moved)
        try:
            url = issuer.compute(self.manifest, step_input=model.step_input(self.composition), required=required).url
        except issuer.IssuerError:
            return
        if isinstance(args, dict):
            args["service-account-issuer"] = url
            return
        for arg in args:
            if arg.get("name") == "service-account-issuer":
                arg["value"] = url

    @property
    def kube(self):
        return self.cp.kube

    @property
    def is_claim(self) -> bool:
        return self.document == "claim.yaml"

    @property
    def namespaced(self) -> bool:
        return not self.is_claim

    # --- reading ---------------------------------------------------------------------------

    def resource(self) -> dict[str, Any] | None:
        """The XR or claim as created."""
        m = self.manifest
        return self.kube.get(m["apiVersion"], m["kind"], m["metadata"]["name"], self.namespace)

    def xr(self) -> dict[str, Any] | None:
        """The composite resource (for a claim, the XR it is bound to)."""
        got = self.resource()
        if got is None or not self.is_claim:
            return got
        ref = got.get("spec", {}).get("resourceRef")
        if not ref:
            return None
        return self.kube.get(ref["apiVersion"], ref["kind"], ref["name"])

    def composed(self) -> dict[str, dict[str, Any]]:
        """composition-resource-name -> composed object, of every kind the function composes."""
        xr = self.xr()
        if xr is None:
            return {}
        name = xr["metadata"]["name"]
        out: dict[str, dict[str, Any]] = {}
        for api_version, kind in composed_kinds(namespaced=self.namespaced):
            for obj in self.kube.list(api_version, kind, labels={COMPOSITE_LABEL: name}):
                if self.namespaced and obj["metadata"].get("namespace") != self.namespace:
                    continue
                out[obj["metadata"]["annotations"][RESOURCE_NAME]] = obj
        return out

    # --- acting ----------------------------------------------------------------------------

    def create(self, *, staged: bool = True) -> None:
        """The cluster (control plane not yet up when ``staged``) and the XR or claim."""
        self.capi.create()
        if not staged:
            self.control_plane_revisions["initialized"] = self.capi.set_control_plane(initialized=True, available=False)
            self.control_plane_revisions["available"] = self.capi.set_control_plane(initialized=True, available=True)
        self.kube.create(copy.deepcopy(self.manifest))

    def wait_stalled(self, quiet_s: float = 3.0, timeout_s: float = 120) -> None:
        """Until nothing new is composed for ``quiet_s`` while everything composed is Ready:
        what is left waits for something outside Crossplane (the control plane)."""
        deadline = time.monotonic() + timeout_s
        last: tuple[str, ...] = ()
        since = time.monotonic()
        while time.monotonic() < deadline:
            composed = self.composed()
            names = tuple(sorted(composed))
            all_ready = all(composed_ready(o) for o in composed.values())
            if names != last or not all_ready:
                last, since = names, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.5)
        msg = f"{self.example}: still composing after {timeout_s:.0f}s: {sorted(last)}"
        raise TimeoutError(msg)

    def converge(self, timeout_s: float = 180) -> dict[str, Any]:
        """Create, bring the control plane up in two steps once the XR waits for it, and wait
        for the XR (and claim) Ready; the XR."""
        self.create(staged=True)
        self.wait_stalled()
        self.control_plane_revisions["initialized"] = self.capi.set_control_plane(initialized=True, available=False)
        self.wait_stalled()
        self.control_plane_revisions["available"] = self.capi.set_control_plane(initialized=True, available=True)
        return self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 180, *, every_condition: bool = False) -> dict[str, Any]:
        """Until the XR (and claim) is Ready; the XR.

        ``every_condition``: until every condition of the XR is True as well, what "converged"
        means after a fault. Ready comes before ChartsHealthy where a move soaks: the VPC CNI's
        restart for IRSA is an upgrade, healthy only ``upgradePolicy.soakSeconds`` after it runs.
        """

        def ready() -> dict[str, Any] | None:
            xr = self.xr()
            if condition_status(xr, "Ready") != "True":
                return None
            if self.is_claim and condition_status(self.resource(), "Ready") != "True":
                return None
            if every_condition and any(c["status"] != "True" for c in conditions(xr).values()):
                return None
            return xr

        what = f"{self.example} Ready" + (" with every condition True" if every_condition else "")
        xr = self.kube.wait_for(ready, what, timeout_s=timeout_s, interval_s=0.5)
        self.ready_at = conditions(xr)["Ready"]["lastTransitionTime"]
        return xr

    def settled_xr(self, timeout_s: float = 60) -> dict[str, Any] | None:
        """The XR, read again while its Ready condition is one Crossplane replays from before
        the XR was Ready (after ``wait_ready``; otherwise the XR as it is).

        Crossplane v2.4 applies the XR's status in the middle of a reconcile with the conditions
        of the XR as that reconcile read it from its cache (composition_functions.go, Compose:
        ``xr.SetConditions(cs...)`` before the status apply), and writes its own verdict only at
        the end (reconciler.go: ``MarkConditions(synced, ready)``, then the status update). A
        reconcile that read the XR one write behind, e.g. the status apply of the reconcile
        before, so writes the Ready condition of before for a moment: lastTransitionTime and
        all. Every status write of the XR enqueues the XR again, so under load this can repeat
        for a while. A Ready condition no newer than the Ready=True ``wait_ready`` saw is such a
        replay, and the next write of the XR ends it; one written since (a newer
        lastTransitionTime) is the XR's own verdict, and is returned as it is.
        """
        xr = self.xr()
        while xr is not None and self.ready_at is not None and _replayed(conditions(xr).get("Ready"), self.ready_at):
            xr = self.kube.wait_for(
                partial(self._written_after, xr["metadata"]["resourceVersion"]),
                f"{self.example}: a write ending Crossplane's replay of {conditions(xr)['Ready']}",
                timeout_s=timeout_s,
                interval_s=0.1,
            )
        return xr

    def _written_after(self, resource_version: str) -> dict[str, Any] | None:
        """The XR, once written since ``resource_version``."""
        got = self.xr()
        return got if got is not None and got["metadata"]["resourceVersion"] != resource_version else None

    def required(self) -> list[dict[str, Any]]:
        """The cluster's objects as the API server holds them (what the function reads)."""
        return self.capi.read()

