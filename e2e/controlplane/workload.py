"""A workload cluster faked by kwok, a loopback chart repository and provider-helm, for real helm installs.

``WorkloadCluster`` is a second etcd and kube-apiserver (the ``ControlPlane`` steps) with
the controllers that turn charts into pods: kube-controller-manager (Deployments,
ReplicaSets, DaemonSets, Jobs, the garbage collector), kube-scheduler, and ``kwok``
managing a few fake Nodes (the ``fast`` stages of its module: nodes Ready, pods Running and
Ready at once, a Job's pods Succeeded). Helm's waits are then met by real Deployment,
DaemonSet and Job status, computed by the real controllers.

kwok's pods run nothing and no Service reaches them, so an admission webhook a chart
registers (cert-manager's, the load balancer controller's, the pod identity webhook's)
could only fail or time out every request it matches. ``HelmHistory`` removes each webhook
configuration as it appears (and records it), and records every helm release Secret
event at the workload store's revision.

``ChartServer`` serves the vendored chart packages and an ``index.yaml`` (what
``helm repo index`` writes) over HTTP on loopback; ``provider_helm`` runs provider-helm out
of cluster against the Crossplane control plane.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.harness import FIXTURE_CRDS, ROOT, ControlPlane
from e2e.controlplane.kube import Kube
from e2e.controlplane.processes import Process, start, wait_until

CHARTS = ROOT / "tests" / "fixtures" / "charts"
# The older chart versions (upgrades start from them; per-minor defaults pick some).
OLDER_CHARTS = ROOT / "tests" / "fixtures" / "older-charts"


def chart_packages() -> list[Path]:
    """Every vendored chart package: the Composition's defaults and the older versions."""
    return sorted([*CHARTS.glob("*.tgz"), *OLDER_CHARTS.glob("*.tgz")])

FIXTURE_HELM_CRDS = FIXTURE_CRDS / "provider-helm"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODES = ("kwok-control-plane", "kwok-worker-1", "kwok-worker-2")
# kwok's own stage set "fast" (kustomize/stage/{node,pod}/fast), as kwokctl uses by default.
KWOK_STAGES = ("node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")
POD_CIDR = "10.244.0.0/16"
HELM_OWNER = {"owner": "helm"}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class WorkloadCluster(ControlPlane):
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with fake Nodes."""

    controllers = (
        "garbage-collector-controller",
        "namespace-controller",
        "serviceaccount-controller",
        "deployment-controller",
        "replicaset-controller",
        "daemonset-controller",
        "job-controller",
        "pod-garbage-collector-controller",
        # Takes off the not-ready taint the API server puts on a new Node once kwok
        # reports it Ready (and watches kwok's node leases from then on).
        "node-lifecycle-controller",
    )

    # As kubeadm runs it: CNI and CSI node plugins are privileged DaemonSets.
    apiserver_args = ("--allow-privileged=true",)

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            *self.kubernetes_steps(),
            ("kube-scheduler", self._scheduler),
            ("kwok", self._kwok),
        ]

    def _scheduler(self) -> None:
        process = self._start(
            "kube-scheduler",
            [
                str(self.tool("kube-scheduler")),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )
        # Scheduling starts once its informers have synced; Nodes come after, so a pod
        # created before that waits in the queue (not an error).
        wait_until(process, lambda: "Starting Kubernetes Scheduler" in process.log_path.read_text(errors="replace"), "started")

    def _kwok(self) -> None:
        stages = self.tool_source("kwok") / "kustomize" / "stage"
        config = self.root / "kwok.yaml"
        config.write_text("\n---\n".join((stages / p).read_text() for p in KWOK_STAGES))
        process = self._start(
            "kwok",
            [
                str(self.tool("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                "--node-lease-duration-seconds=40",
            ],
        )
        for name in NODES:
            self.kube.create(fake_node(name, control_plane=name.endswith("control-plane")))

        def nodes_ready() -> bool:
            return all(
                any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
                and not n["spec"].get("taints")
                for n in self.kube.list("v1", "Node")
            )

        wait_until(process, nodes_ready, "every fake Node Ready and untainted", timeout_s=60)

    def inline_kubeconfig(self, name: str, server: str | None = None) -> bytes:
        """A kubeconfig with its certificates inline, as CAPI writes ``<cluster>-kubeconfig``
        (``server``: another way to the API server, e.g. the fault suite's cuttable path)."""
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": server or self.server, "certificate-authority-data": b64(self.ca.path)}}],
                "users": [
                    {
                        "name": f"{name}-admin",
                        "user": {"client-certificate-data": b64(self.admin.cert), "client-key-data": b64(self.admin.key)},
                    }
                ],
                "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
                "current-context": name,
            }
        ).encode()

    def workloads(self, namespaces: set[str]) -> list[dict[str, Any]]:
        """Deployments and DaemonSets in ``namespaces``."""
        return [
            obj
            for kind in ("Deployment", "DaemonSet")
            for obj in self.kube.list("apps/v1", kind)
            if obj["metadata"]["namespace"] in namespaces
        ]


def fake_node(name: str, *, control_plane: bool) -> dict[str, Any]:
    """A Node kwok manages: Linux on amd64, room for every pod, untainted."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    room = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {FAKE_NODE_ANNOTATION: "fake"}},
        "status": {"allocatable": room, "capacity": room},
    }


def workload_available(obj: dict[str, Any]) -> bool:
    """A Deployment with every replica available and updated, or a DaemonSet with an
    updated, ready pod on every node it wants: every node, unless it asks for Windows
    nodes (the fake nodes are Linux)."""
    status = obj.get("status", {})
    if obj["kind"] == "Deployment":
        replicas = obj["spec"].get("replicas", 1)
        return status.get("availableReplicas", 0) == replicas and status.get("updatedReplicas", 0) == replicas
    desired = status.get("desiredNumberScheduled", 0)
    windows = obj["spec"]["template"]["spec"].get("nodeSelector", {}).get("kubernetes.io/os") == "windows"
    wanted = desired == 0 if windows else desired > 0
    return wanted and status.get("numberReady", 0) == desired and status.get("updatedNumberScheduled", 0) == desired


# --- helm releases and webhooks in the workload cluster --------------------------------------


@dataclass(frozen=True)
class ReleaseEvent:
    """A helm release Secret (``sh.helm.release.v1.<release>.v<n>``) at a workload-store revision."""

    event: str  # ADDED | MODIFIED | DELETED
    release: str
    namespace: str
    version: int
    status: str  # pending-install, deployed, uninstalling, ...
    revision: int
    at: float = field(default_factory=time.monotonic)


@dataclass
class HelmHistory:
    """Watches the workload cluster: helm's release Secrets recorded, webhook configurations removed."""

    kube: Kube
    events: list[ReleaseEvent] = field(default_factory=list)
    removed_webhooks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        watches: list[tuple[str, str, Callable[[str, dict[str, Any]], None]]] = [
            ("v1", "Secret", self._on_secret),
            *(("admissionregistration.k8s.io/v1", kind, self._on_webhook) for kind in WEBHOOK_KINDS),
        ]
        for api_version, kind, on in watches:
            threading.Thread(target=self._watch, args=(api_version, kind, on), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, api_version: str, kind: str, on: Callable[[str, dict[str, Any]], None]) -> None:
        def on_error(err: Exception) -> None:
            with self._lock:
                self.errors.append(f"watch {kind}: {type(err).__name__}: {err}")

        self.kube.follow(api_version, kind, on, self._stop, on_error)

    def _on_secret(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        if labels.get("owner") != "helm":
            return
        event = ReleaseEvent(
            event_type, labels["name"], meta["namespace"], int(labels["version"]), labels.get("status", ""), int(meta["resourceVersion"])
        )
        with self._lock:
            self.events.append(event)

    def _on_webhook(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type != "ADDED":
            return
        name = obj["metadata"]["name"]
        try:
            self.kube.delete(obj["apiVersion"], obj["kind"], name)
        except Exception as err:
            with self._lock:
                self.errors.append(f"delete {obj['kind']} {name}: {err}")
            return
        with self._lock:
            self.removed_webhooks.append(f"{obj['kind']}/{name}")

    def timeline(self) -> list[str]:
        """Each release Secret event, seconds after the first one: what helm did when."""
        with self._lock:
            events = list(self.events)
        start_at = events[0].at if events else 0.0
        return [f"{e.at - start_at:6.1f}s  {e.release} v{e.version} {e.event} {e.status} (revision {e.revision})" for e in events]

    def first(self, release: str, *, status: str | None = None, event: str | None = None) -> int | None:
        """The revision of ``release``'s first Secret event with that status (or event type)."""
        with self._lock:
            for e in self.events:
                if e.release == release and (status is None or e.status == status) and (event is None or e.event == event):
                    return e.revision
        return None


def decode_release(secret: dict[str, Any]) -> dict[str, Any]:
    """The helm release a Secret stores (base64 of gzipped JSON, inside the Secret's base64)."""
    return dict(json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"])))))


# --- chart repository --------------------------------------------------------------------------


def chart_index(directory: Path, base_url: str) -> dict[str, Any]:
    """An index.yaml for the chart packages in ``directory``: each package's Chart.yaml, its
    digest and URL (the fields ``helm repo index`` writes)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for package in sorted(directory.glob("*.tgz")):
        with tarfile.open(package) as tar:
            member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml"))
            extracted = tar.extractfile(member)
            assert extracted is not None
            chart = yaml.safe_load(extracted.read())
        entry = {
            **chart,
            "urls": [f"{base_url}/{package.name}"],
            "digest": hashlib.sha256(package.read_bytes()).hexdigest(),
            "created": "2026-01-01T00:00:00Z",
        }
        entries.setdefault(chart["name"], []).append(entry)
    return {"apiVersion": "v1", "entries": entries, "generated": "2026-01-01T00:00:00Z"}


class ChartServer:
    """The vendored chart packages and their index.yaml over HTTP on 127.0.0.1; the paths asked for are recorded."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        root.mkdir(parents=True, exist_ok=True)
        for package in chart_packages():
            (root / package.name).write_bytes(package.read_bytes())
        requests = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                requests.append(self.path)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        (root / "index.yaml").write_text(yaml.safe_dump(chart_index(root, self.url)))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- provider-helm ------------------------------------------------------------------------------

# provider-helm v1.x pulls every chart into this fixed directory (pkg/clients/helm/client.go,
# chartCache) and reuses a file of the same name from an earlier run.
PROVIDER_HELM_CHART_CACHE = Path("/tmp/charts")  # noqa: S108 - provider-helm's own choice


def provider_helm(cp: ControlPlane, home: Path, args: Sequence[str] = ()) -> Process:
    """provider-helm out of cluster against ``cp``: its reconcilers of both API groups
    (``args``: more of its flags).

    Charts cached by an earlier run are removed first, so this run pulls each one from the
    chart server. Helm's own directories are kept under ``home``.
    """
    for package in chart_packages():
        (PROVIDER_HELM_CHART_CACHE / package.name).unlink(missing_ok=True)
    # The harness applied the vendored (v1.4.0) CRDs of what the function composes; the
    # provider also tracks its ProviderConfigs' users, whose CRDs only its module ships.
    crds = [p for p in sorted((cp.tool_source("provider-helm") / "package" / "crds").glob("*.yaml")) if not (FIXTURE_HELM_CRDS / p.name).exists()]
    cp.kube.wait_established([cp.kube.apply_crd(yaml.safe_load(p.read_text())) for p in crds])
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "KUBECONFIG": str(cp.kubeconfig),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    # Its default poll, 10 minutes, as users run it: a Release it upgrades (the function
    # restarts the CNI for IRSA by a values change) says Ready False until that poll, and
    # the XR must not wait for it (function/graph.py, upgraded_release).
    argv = [str(cp.tool("provider-helm")), "--debug", *args]
    process = start("provider-helm", argv, cp.logs, env=env)
    cp.processes["provider-helm"] = process
    # Its Release controllers start once their CRD is seen (crossplane-runtime's CRD gate).
    ready = '"gvk": "helm.m.crossplane.io/v1beta1, Kind=Release"'
    wait_until(process, lambda: ready in process.log_path.read_text(errors="replace"), "its namespaced Release kind seen")
    return process
