"""A real control plane on loopback: etcd, kube-apiserver, kube-controller-manager, Crossplane core.

Started by the tests from the tools of ``e2e/tools.json`` (built from the Go module proxy by
``scripts/tools.py``), with certificates the test makes (``pki``):

- etcd on a free port, plain HTTP on 127.0.0.1, ``--unsafe-no-fsync`` (a throw-away store);
- kube-apiserver serving TLS on 127.0.0.1 with client-certificate authentication and RBAC;
  every client (the controller manager, Crossplane, the tests) is ``admin`` in
  ``system:masters`` through one kubeconfig file (``e2e/controlplane/rbac.py`` runs Crossplane
  with its Helm chart's RBAC instead);
- kube-controller-manager with the controllers the tests need: the garbage collector (a
  deleted XR's composed resources go through it, as in a real cluster) and the namespace
  controller;
- Crossplane's own CRDs from the core module (``cluster/crds``), its namespace and Lock;
  the real CRDs of every kind the function composes or reads (``tests/fixtures/crds``);
- ``function-cluster-plugin serve`` with mTLS, installed as a Crossplane Function from a
  package in Crossplane's package cache (see ``install_function``);
- Crossplane core, out of cluster (``KUBECONFIG``), ``--package-runtime=External``, its
  webhook server on a free port with a ValidatingWebhookConfiguration that reaches it by
  URL (Usages are enforced only with webhooks on).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError

from e2e.conftest import tool_source
from e2e.controlplane import pki
from e2e.controlplane.kube import Kube
from e2e.controlplane.processes import Process, StartError, free_port, start, wait_until

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_CRDS = ROOT / "tests" / "fixtures" / "crds"
PACKAGE_DIR = ROOT / "package"
CROSSPLANE_NAMESPACE = "crossplane-system"
# The name the Compositions call the function by: the one Crossplane gives it as the
# Configuration's dependency (xpkg.crossplane.io/function-cluster-plugin/function-cluster-plugin).
FUNCTION_NAME = "function-cluster-plugin-function-cluster-plugin"
FUNCTION_SOURCE = "xpkg.crossplane.io/function-cluster-plugin/function-cluster-plugin"
PARENT_PACKAGE_LABEL = "pkg.crossplane.io/package"
CIRCUIT_BREAKER_BURST = 1000
APISERVER_STOP_GRACE_S = 2.0
# The garbage collector (a deleted XR's composed resources go through it, as in a real
# cluster) and the namespace controller.
CONTROLLERS = ("garbagecollector", "namespace")


@dataclass
class Timings:
    """Seconds each start-up step took."""

    steps: dict[str, float] = field(default_factory=dict)

    def record(self, name: str, since: float) -> None:
        self.steps[name] = round(time.monotonic() - since, 2)

    @property
    def total(self) -> float:
        return round(sum(self.steps.values()), 2)


@dataclass(frozen=True)
class _Kinds:
    """What an XRD of ``apis/<flavour>`` defines: its kinds (claim first), their API version,
    and the CRDs Crossplane makes of them (the XR's last)."""

    xrd_api_version: str
    xrd_name: str
    version: str
    kinds: tuple[str, ...]
    crds: tuple[str, ...]

    @classmethod
    def of(cls, xrd: dict[str, Any]) -> _Kinds:
        spec = xrd["spec"]
        group, names, claim = spec["group"], spec["names"], spec.get("claimNames")
        return cls(
            xrd["apiVersion"],
            xrd["metadata"]["name"],
            f"{group}/{spec['versions'][0]['name']}",
            ((claim["kind"],) if claim else ()) + (names["kind"],),
            ((f"{claim['plural']}.{group}",) if claim else ()) + (f"{names['plural']}.{group}",),
        )


def _deleting(obj: dict[str, Any]) -> dict[str, Any]:
    """What says why an object is not gone yet (for a timeout's message)."""
    meta = obj["metadata"]
    return {
        "name": "/".join(filter(None, (meta.get("namespace"), meta["name"]))),
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "finalizers": meta.get("finalizers"),
        "conditions": [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message", "")[:200])
            for c in obj.get("status", {}).get("conditions", [])
        ],
    }


def kubeconfig_file(path: Path, server: str, ca: Path, client: pki.Leaf) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [
            {
                "name": "admin",
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def package_stream() -> bytes:
    """The function package's package.yaml stream, as ``crossplane xpkg build`` puts it in the image.

    Its meta (package/crossplane.yaml) and the step Input's CRD (package/input), YAML
    documents joined by ``---``.
    """
    docs = [PACKAGE_DIR / "crossplane.yaml", *sorted((PACKAGE_DIR / "input").glob("*.yaml"))]
    return "\n---\n".join(p.read_text() for p in docs).encode()


def friendly_id(name: str, hash_: str) -> str:
    """xpkg.FriendlyID (crossplane-runtime pkg/xpkg/name.go): the package cache's file key."""
    joined = f"{name[:50]}-{hash_[:12]}"
    out = []
    for i, ch in enumerate(joined):
        if ch.isascii() and (ch.islower() or ch.isdigit()):
            out.append(ch)
        if ch in "./:-" and i not in (0, 62, len(joined) - 1):
            out.append("-")
        if i == 62:
            break
    return "".join(out).strip("-")


class ControlPlane:
    """The processes, their certificates and logs under ``root``; ``kube`` talks to the API server."""

    controllers: tuple[str, ...] = CONTROLLERS
    apiserver_args: tuple[str, ...] = ()
    circuit_breaker_burst: float = CIRCUIT_BREAKER_BURST
    # The tool of e2e/tools.json that is Crossplane core (its binary, CRDs and webhooks).
    core_tool = "crossplane-core"

    def __init__(
        self,
        root: Path,
        tool: Callable[[str], Path],
        *,
        crossplane_args: Sequence[str] = (),
        function_package: bool = True,
        function_args: Sequence[str] = (),
    ) -> None:
        """``crossplane_args`` go to ``crossplane core start`` as well, ``function_args`` to
        ``function-cluster-plugin serve``; without ``function_package`` no Function is
        installed at start (a Configuration brings it)."""
        self.root = root
        self.tool = tool
        self.crossplane_args = tuple(crossplane_args)
        self.function_args = tuple(function_args)
        self.function_package = function_package
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, Process] = {}
        self.timings = Timings()
        self.kube: Kube
        self.kubeconfig: Path
        self.webhook_port = 0
        self.function_address = ""
        self.ca: pki.CA

    # --- lifecycle ---------------------------------------------------------------------------

    def kubernetes_steps(self) -> list[tuple[str, Callable[[], None]]]:
        """The API server and its controllers."""
        return [
            ("certificates", self._certificates),
            ("etcd", self._etcd),
            ("kube-apiserver", self._apiserver),
            ("kube-controller-manager", self._controller_manager),
        ]

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        """What ``start`` runs, in order."""
        return [
            *self.kubernetes_steps(),
            ("CRDs", self._crds),
            ("function", self._function),
            ("crossplane", self._crossplane),
            *([("Function package", self.install_function)] if self.function_package else []),
        ]

    def start(self) -> None:
        """Everything up, in order; raises StartError naming the step and the log that failed."""
        for name, step in self.steps():
            since = time.monotonic()
            step()
            self.timings.record(name, since)

    def stop(self) -> None:
        """Stop every process, newest first (each by its own pid)."""
        for process in reversed(list(self.processes.values())):
            # An open watch (the driver's) holds kube-apiserver's graceful shutdown until
            # it is killed; it keeps nothing that etcd does not, and etcd is thrown away.
            process.stop(grace_s=APISERVER_STOP_GRACE_S if process.name.startswith("kube-apiserver") else 10.0)

    def dead(self) -> list[str]:
        """Processes that exited on their own, with the end of their logs."""
        return [
            f"{p.name} exited with {p.proc.returncode}:\n{p.log_tail()}"
            for p in self.processes.values()
            if not p.alive()
        ]

    def log_report(self, lines: int = 40) -> str:
        """The end of every log, for a failing test."""
        return "\n\n".join(
            f"===== {p.name} ({p.log_path}) =====\n{p.log_tail(lines)}"
            for p in self.processes.values()
        )

    def log_lines(self, process: str, needle: str) -> list[str]:
        """Lines of a process's log that contain ``needle``."""
        path = self.processes[process].log_path
        return [line for line in path.read_text(errors="replace").splitlines() if needle in line]

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = start(name, argv, self.logs, env=env)
        self.processes[name] = process
        return process

    # --- steps -------------------------------------------------------------------------------

    def _certificates(self) -> None:
        certs = self.root / "certs"
        self.ca = pki.CA(certs)
        self.apiserver_cert = self.ca.leaf(
            "kube-apiserver",
            server=True,
            sans=(*pki.LOOPBACK_SANS, "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        )
        self.admin = self.ca.leaf("admin", client=True, organization="system:masters")
        self.sa_key = pki.signing_key(certs / "service-account.key")
        self.webhook_cert = self.ca.leaf("crossplane-webhook", server=True)
        self.function_cert = self.ca.leaf("function-cluster-plugin", server=True)
        self.provider_cert = self.ca.leaf("providers", server=True)
        self.crossplane_client = self.ca.leaf("crossplane", client=True)

    def _etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        process = self._start(
            "etcd",
            [
                str(self.tool("etcd")),
                "--name=e2e",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as rsp:  # noqa: S310
                return json.load(rsp).get("health") == "true"

        wait_until(process, healthy, "healthy /health")

    def _apiserver(self) -> None:
        self.server, self.kube = self.start_apiserver()
        self.kubeconfig = kubeconfig_file(self.root / "kubeconfig", self.server, self.ca.path, self.admin)

    def start_apiserver(self, name: str = "kube-apiserver", etcd_prefix: str | None = None) -> tuple[str, Kube]:
        """A kube-apiserver on this etcd (under ``etcd_prefix``: another cluster's store); its
        URL and a client, once it is ready."""
        port = free_port()
        server = f"https://127.0.0.1:{port}"
        process = self._start(
            name,
            [
                str(self.tool("kube-apiserver")),
                f"--etcd-servers={self.etcd_url}",
                *([f"--etcd-prefix={etcd_prefix}"] if etcd_prefix else []),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.root / ('apiserver' if name == 'kube-apiserver' else name)}",
                f"--tls-cert-file={self.apiserver_cert.cert}",
                f"--tls-private-key-file={self.apiserver_cert.key}",
                f"--client-ca-file={self.ca.path}",
                f"--service-account-key-file={self.sa_key}",
                f"--service-account-signing-key-file={self.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                # No Service endpoints for a loopback address; no API priority queues to keep.
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=1",
                *self.apiserver_args,
            ],
        )
        kube = Kube(server, self.ca.path, self.admin.cert, self.admin.key)
        wait_until(process, kube.ready, "/readyz", timeout_s=90)
        return server, kube

    def _controller_manager(self) -> None:
        process = self._start(
            "kube-controller-manager",
            [
                str(self.tool("kube-controller-manager")),
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--root-ca-file={self.ca.path}",
                f"--service-account-private-key-file={self.sa_key}",
                "--v=1",
            ],
        )
        # The garbage collector works once its monitors have synced; a deletion before that waits.
        wait_until(
            process,
            lambda: "all resource monitors have synced" in process.log_path.read_text(errors="replace"),
            "garbage collector synced",
            timeout_s=90,
        )

    def crossplane_kubeconfig(self) -> Path:
        """Who Crossplane core is to the API server: here ``admin``."""
        return self.kubeconfig

    def crossplane_crd_dir(self) -> Path:
        return self.tool_source(self.core_tool) / "cluster" / "crds"

    def tool_source(self, name: str) -> Path:
        return tool_source(name)

    def crds(self) -> list[dict[str, Any]]:
        """The CRDs the control plane starts with: Crossplane's and the vendored ones."""
        files = sorted(self.crossplane_crd_dir().glob("*.yaml"))
        files += sorted(FIXTURE_CRDS.glob("*/*.yaml"))
        return [yaml.safe_load(p.read_text()) for p in files]

    def _crds(self) -> None:
        names = [self.kube.apply_crd(crd) for crd in self.crds()]
        self.kube.wait_established(names)
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CROSSPLANE_NAMESPACE}})
        # What `crossplane core init` creates (internal/initializer/lock.go).
        self.kube.apply({"apiVersion": "pkg.crossplane.io/v1beta1", "kind": "Lock", "metadata": {"name": "lock"}})

    def _function(self) -> None:
        port = free_port()
        self.function_address = f"127.0.0.1:{port}"
        script = Path(sys.executable).with_name("function-cluster-plugin")
        process = self._start(
            "function",
            [
                str(script),
                "serve",
                "--address",
                self.function_address,
                "--tls-server-certs-dir",
                str(self.function_cert.dir),
                *self.function_args,
            ],
            env={"PYTHONUNBUFFERED": "1"},
        )
        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True

        wait_until(process, listening, "listening")

    def _crossplane(self) -> None:
        self.webhook_port = free_port()
        self.xpkg_cache = self.root / "xpkg"
        self.xpkg_cache.mkdir(exist_ok=True)
        process = self._start(
            "crossplane",
            [
                str(self.tool(self.core_tool)),
                "core",
                "start",
                "--package-runtime=External",
                f"--xpkg-cache-dir={self.xpkg_cache}",
                f"--tls-client-certs-dir={self.crossplane_client.dir}",
                f"--tls-server-certs-dir={self.webhook_cert.dir}",
                f"--webhook-port={self.webhook_port}",
                f"--metrics-port={free_port()}",
                f"--health-probe-port={(probe := free_port())}",
                *self.core_version_args(),
                "--debug",
                *self.crossplane_args,
            ],
            env={"KUBECONFIG": str(self.crossplane_kubeconfig()), "POD_NAMESPACE": CROSSPLANE_NAMESPACE},
        )
        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as rsp:
                return rsp.status == 200

        wait_until(process, ready, "/readyz", timeout_s=90)
        self._usage_webhook()

    def core_version_args(self) -> list[str]:
        """The flags of ``crossplane core start`` that only this core's version has."""
        # Each XR's watch circuit breaker opens after 100 watch events in a burst
        # (refilled at 1/s) and then drops events for 5 minutes but one every 30 s:
        # converging ~45 composed resources (finalizer, status, usage labels each an
        # event) opens it, and an edit of the XR made then waits for the function's
        # TTL (ttl.ready, 10 min). Raised here so each test sees its edits at once.
        return [f"--circuit-breaker-burst={self.circuit_breaker_burst:g}"]

    def _usage_webhook(self) -> None:
        """The chart's crossplane-no-usages webhook (cluster/webhookconfigurations/usage.yaml), by URL."""
        source = self.tool_source(self.core_tool) / "cluster" / "webhookconfigurations" / "usage.yaml"
        config = yaml.safe_load(source.read_text())
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{self.webhook_port}{path}",
                "caBundle": base64.b64encode(self.ca.pem).decode(),
            }
        self.kube.apply(config)

    def install_function(self) -> None:
        """Install the function as Crossplane installs a package, without a registry.

        Crossplane's package client looks a digest reference up in its cache
        (``<xpkg-cache-dir>/<FriendlyID(source, digest)>.gz``, a gzipped package.yaml
        stream) before any registry, and ``packagePullPolicy: Never`` forbids the pull.
        So the package.yaml stream is put in the cache under its own sha256, the Function
        names that digest, and the package manager makes the FunctionRevision, parses and
        lints the package (its Input CRD included, which Crossplane never installs: the
        xpkg spec says a function package's objects are not, revision/reconciler.go). With
        ``--package-runtime=External`` nothing starts the function or sets the revision's
        ``status.endpoint``: the test runs it and writes the endpoint (mTLS, as
        Crossplane always dials functions).
        """
        stream = package_stream()
        digest = "sha256:" + hashlib.sha256(stream).hexdigest()
        cached = self.cached_package(FUNCTION_SOURCE, digest)
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(gzip.compress(stream))
        self.kube.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Function",
                "metadata": {"name": FUNCTION_NAME},
                "spec": {"package": f"{FUNCTION_SOURCE}@{digest}", "packagePullPolicy": "Never"},
            }
        )
        self.function_revision = self.play_function_runtime(FUNCTION_NAME)

    def cached_package(self, source: str, digest: str) -> Path:
        """Where the package manager looks for the package ``source@digest`` in its cache."""
        return self.xpkg_cache / f"{friendly_id(source, digest)}.gz"

    def package_revision(self, kind: str, package: str, timeout_s: float = 60) -> dict[str, Any]:
        """The revision of the package object ``package`` (``kind``: Function, Provider or
        Configuration), once the package manager has made it."""
        return self.kube.wait_for(
            lambda: next(
                iter(
                    self.kube.list(
                        "pkg.crossplane.io/v1",
                        f"{kind}Revision",
                        labels={PARENT_PACKAGE_LABEL: package},
                    )
                ),
                None,
            ),
            f"a {kind}Revision of the {kind} {package}",
            timeout_s=timeout_s,
        )

    def play_function_runtime(self, function: str, timeout_s: float = 60) -> str:
        """What the Deployment runtime's FunctionHooks do for the Function ``function``,
        served by the function the test runs; the name of its revision.

        It records the revision's TLS server Secret in its status and fills it (the
        package manager's establisher waits for it before it reports the revision healthy),
        points ``status.endpoint`` at the function and reports the runtime healthy
        (runtime_function.go, runtime/reconciler.go). With the External runtime the package
        manager leaves ``spec.tlsServerSecretName`` empty, so the Secret is named here.
        """
        return self._play_runtime(
            "Function",
            function,
            self.function_cert,
            {"endpoint": f"dns:///{self.function_address}"},
            timeout_s,
        )

    def play_provider_runtime(self, provider: str, timeout_s: float = 60) -> str:
        """What the Deployment runtime's ProviderHooks do for the Provider ``provider``,
        whose controller is the driver; the name of its revision.

        The establisher waits for the webhook TLS Secret of a provider's revision as of a
        function's, and the Provider is Healthy only once its runtime is.
        """
        return self._play_runtime("Provider", provider, self.provider_cert, {}, timeout_s)

    def _play_runtime(
        self, kind: str, package: str, cert: pki.Leaf, status: dict[str, Any], timeout_s: float
    ) -> str:
        revision = self.package_revision(kind, package, timeout_s)
        # The name the package manager gives it with the Deployment runtime
        # (apis pkg/v1 GetTLSServerSecretName: <package>-tls-server).
        named = revision.get("spec", {}).get("tlsServerSecretName")
        server_secret = named or f"{package}-tls-server"
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": server_secret, "namespace": CROSSPLANE_NAMESPACE},
                "type": "kubernetes.io/tls",
                "stringData": {
                    "tls.crt": cert.cert.read_text(),
                    "tls.key": cert.key.read_text(),
                    "ca.crt": cert.ca.read_text(),
                },
            }
        )
        self.kube.apply_status(
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": f"{kind}Revision",
                "metadata": {"name": revision["metadata"]["name"]},
                "status": {
                    **status,
                    # Where the package manager named none in the spec (v2's External runtime;
                    # Crossplane 1.20 names it in the spec, and its status has no such field).
                    **({} if named else {"tlsServerSecretName": server_secret}),
                    "conditions": [
                        {
                            "type": "RuntimeHealthy",
                            "status": "True",
                            "reason": "HealthyPackageRevision",
                            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        }
                    ],
                },
            },
            field_manager="e2e-package-runtime",
        )
        self.kube.wait_for(
            lambda: self.package_ready(kind, package), f"the {kind} {package} Installed and Healthy", timeout_s=timeout_s
        )
        return str(revision["metadata"]["name"])

    def package_ready(self, kind: str, name: str) -> bool:
        """Whether the package object is Installed and Healthy (what `kubectl get` shows)."""
        got = self.kube.get("pkg.crossplane.io/v1", kind, name) or {}
        conditions = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
        return conditions.get("Healthy") == "True" and conditions.get("Installed") == "True"

    # --- the project's API -------------------------------------------------------------------

    def install_api(
        self, flavour: str, *, ttl_waiting: str | None = "1s", edit_input: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """The project's XRD and Composition of ``apis/<flavour>`` (v2 or v1); the Composition.

        The step input's ``ttl.waiting`` is shortened: Crossplane does not watch the Cluster
        API objects the function reads, so a control plane turning initialized is seen at
        the next TTL (30 s by default). ``edit_input`` changes the step input before the
        Composition is applied (once: a second apply makes a second CompositionRevision,
        and an XR created meanwhile may be composed from either).
        """
        # The ClusterPluginRollout's first: the ClusterPlugin Composition asks for rollouts
        # (fleet.rollouts), which Crossplane cannot list before their XRD is established.
        for name in ("rollout-definition.yaml", "definition.yaml"):
            self._establish(yaml.safe_load((ROOT / "apis" / flavour / name).read_text()))
        self.install_composition(ROOT / "apis" / flavour / "rollout-composition.yaml", ttl_waiting=ttl_waiting)
        return self.install_composition(
            ROOT / "apis" / flavour / "composition.yaml", ttl_waiting=ttl_waiting, edit_input=edit_input
        )

    def _establish(self, xrd: dict[str, Any]) -> None:
        """An XRD applied, once Crossplane serves its kinds."""
        self.kube.apply(xrd)

        def offered() -> bool:
            got = self.kube.get(xrd["apiVersion"], "CompositeResourceDefinition", xrd["metadata"]["name"]) or {}
            conditions = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
            wanted = ["Established"] + (["Offered"] if "claimNames" in xrd["spec"] else [])
            return all(conditions.get(t) == "True" for t in wanted)

        # Crossplane's definition controller backs a requeued XRD off for up to 60 s (its
        # default rate limiter): one re-created right after its deletion may wait that out.
        try:
            self.kube.wait_for(offered, f"XRD {xrd['metadata']['name']} established", timeout_s=150)
        except TimeoutError as err:
            got = self.kube.get(xrd["apiVersion"], "CompositeResourceDefinition", xrd["metadata"]["name"]) or {}
            raise TimeoutError(f"{err}; its conditions: {got.get('status', {}).get('conditions')}") from err
        self.kube.kind(f"{xrd['spec']['group']}/v1alpha1", xrd["spec"]["names"]["kind"])

    def install_composition(
        self, path: Path, *, ttl_waiting: str | None = "1s", edit_input: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """A Composition from ``path``, its step input's ``ttl.waiting`` shortened (install_api;
        None: the Composition's own)."""
        composition = yaml.safe_load(path.read_text())
        for step in composition["spec"]["pipeline"]:
            if ttl_waiting is not None:
                step["input"].setdefault("ttl", {})["waiting"] = ttl_waiting
            if edit_input is not None:
                edit_input(step["input"])
        self.kube.apply(composition)
        return composition

    def remove_api(self, flavour: str) -> None:
        """Delete every claim and XR of ``apis/<flavour>`` and every ClusterPluginRollout, then
        the two XRDs and Compositions.

        Every XR goes before any XRD: an XR whose Composition is gone cannot be reconciled, so
        its finalizer would never be removed; and a rollout reconciled once the ClusterPlugin
        kind is gone asks Crossplane's cache to list a kind that no longer exists, which can
        hold the rollout's worker until the reconcile's 2-minute timeout, and its deletion with
        it (inferred from Crossplane's XR reconciler and controller-runtime's informer cache).
        A CI run once timed out after 60 s waiting for a rollout's deletion in the old order;
        the fleet suite alone did not reproduce it (16.8 s of teardown either way), so the
        wait is 240 s and a timeout says what is left and why.
        """
        cluster_plugins = _Kinds.of(yaml.safe_load((ROOT / "apis" / flavour / "definition.yaml").read_text()))
        rollouts = _Kinds.of(yaml.safe_load((ROOT / "apis" / flavour / "rollout-definition.yaml").read_text()))
        for kinds in (cluster_plugins, rollouts):
            self._delete_every(kinds)
        for kinds, composition in ((cluster_plugins, "composition.yaml"), (rollouts, "rollout-composition.yaml")):
            self._remove_definition(kinds)
            made = yaml.safe_load((ROOT / "apis" / flavour / composition).read_text())
            self.kube.delete(made["apiVersion"], "Composition", made["metadata"]["name"])

    def _served(self, kinds: _Kinds) -> bool:
        """Whether the XRD's CRD is there (an earlier step may have failed before applying it)."""
        return self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", kinds.crds[-1]) is not None

    def _delete_every(self, kinds: _Kinds) -> None:
        """Every object of the XRD's kinds (claims first) deleted, and gone."""
        if not self._served(kinds):
            return
        for kind in kinds.kinds:
            for obj in self.kube.list(kinds.version, kind):
                meta = obj["metadata"]
                try:
                    self.kube.delete(kinds.version, kind, meta["name"], meta.get("namespace"))
                except ApiError as err:
                    # An XR listed before its claim's deletion reached it (Crossplane 1.x
                    # deletes a claim's XR at once): gone already.
                    if err.status.code != 404:
                        raise
        try:
            self.kube.wait_for(
                lambda: not any(self.kube.list(kinds.version, k) for k in kinds.kinds),
                f"every {' and '.join(kinds.kinds)} deleted",
                timeout_s=240,
            )
        except TimeoutError as err:
            left = [_deleting(o) for k in kinds.kinds for o in self.kube.list(kinds.version, k)]
            raise TimeoutError(f"{err}; still there: {left}") from err

    def _remove_definition(self, kinds: _Kinds) -> None:
        """The XRD deleted, once Crossplane has removed it and its CRDs."""
        self.kube.delete(kinds.xrd_api_version, "CompositeResourceDefinition", kinds.xrd_name)
        self.kube.wait_for(
            lambda: all(self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", n) is None for n in kinds.crds)
            and self.kube.get(kinds.xrd_api_version, "CompositeResourceDefinition", kinds.xrd_name) is None,
            f"XRD {kinds.xrd_name} and its CRDs gone",
            timeout_s=90,
        )

    def function_status(self) -> dict[str, Any]:
        """The Function and its revision as Crossplane reports them."""
        return {
            "function": self.kube.get("pkg.crossplane.io/v1", "Function", FUNCTION_NAME),
            "revision": self.kube.get("pkg.crossplane.io/v1", "FunctionRevision", self.function_revision),
        }


__all__ = ["ControlPlane", "StartError"]
