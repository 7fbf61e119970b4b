"""The token an add-on's pod gets, all the way to its role (issue 29, part 2).

- ``issuer_of``: what ``function-cluster-plugin issuer -o json`` prints for an XR: the URL and
  the KubeadmControlPlane apiServer extraArgs the user is told to set.
- ``KubeadmWorkload``: the kwok workload cluster whose kube-apiserver runs as kubeadm runs it
  for this cluster: those extraArgs as flags, and the service-account key files
  (``sa.pub``/``sa.key``) holding the ``<cluster>-sa`` Secret's pair (CAPI's; the function
  publishes its JWKS from the same Secret).
- ``addon_renderings``: the composed Releases rendered by the real helm (``tests/helm.py``);
  ``apply_workloads`` puts their Namespaces, ServiceAccounts, Deployments and DaemonSets
  into the workload cluster, where kube-controller-manager makes the pods and kwok runs them.
- ``PodIdentityWebhook``: amazon-eks-pod-identity-webhook, built from the Go module proxy
  (``e2e/tools.json``), run out of cluster with the arguments the function's own
  pod-identity-webhook Release renders to (ports, certificates and namespace aside), and the
  MutatingWebhookConfiguration of that render pointed at it by URL.
- ``token_request``: a ServiceAccount token minted as the projected volume asks for it.
- ``IssuerSite``: the issuer's documents served over HTTPS at the issuer's own host and
  path, on loopback: a CONNECT proxy on 127.0.0.1 sends ``<host>:443`` to a TLS server
  whose certificate names that host (a test CA). ``verify`` reads the discovery document
  there and checks a token with PyJWT's ``PyJWKClient`` against its ``jwks_uri``.
- ``IamSimulator``: ``@cloud-copilot/iam-simulate`` (AGPL-3.0: test time only, installed
  from ``e2e/aws/iam_simulate/package-lock.json`` into the user's cache, never shipped),
  run by ``e2e/aws/iam_simulate/evaluate.mjs`` through its core ``authorize``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import select
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
import yaml

from e2e.controlplane import pki
from e2e.controlplane.harness import ROOT
from e2e.controlplane.kube import Kube
from e2e.controlplane.processes import Process, free_port, start, wait_until
from e2e.controlplane.workload import WorkloadCluster
from tests.helm import ROLE_ARN_ANNOTATION, HelmRelease, Rendering, render

STS_AUDIENCE = "sts.amazonaws.com"
DISCOVERY_PATH = "/.well-known/openid-configuration"
WEBHOOK_CHART = "amazon-eks-pod-identity-webhook"
# What the webhook's mutation puts into a pod (its defaults, and the chart's values).
TOKEN_VOLUME = "aws-iam-token"  # noqa: S105 - a volume's name
IAM_SIMULATE_DIR = Path(__file__).resolve().parent / "iam_simulate"
LOCK = ROOT / "e2e" / "tools.json"


def kubernetes_version() -> str:
    """The version of the pinned kube-apiserver: what helm renders the charts for."""
    return str(json.loads(LOCK.read_text())["tools"]["kube-apiserver"]["version"])


# --- the issuer the function derives ----------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The project's command line, as a user runs it."""
    script = Path(sys.executable).with_name("function-cluster-plugin")
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=False, timeout=120)


def issuer_of(manifest: dict[str, Any], composition: dict[str, Any], work: Path) -> dict[str, Any]:
    """``function-cluster-plugin issuer XR --composition C -o json`` for the XR as created."""
    work.mkdir(parents=True, exist_ok=True)
    xr, comp = work / "xr.yaml", work / "composition.yaml"
    xr.write_text(yaml.safe_dump(manifest))
    comp.write_text(yaml.safe_dump(composition))
    done = cli("issuer", str(xr), "--composition", str(comp), "-o", "json")
    assert done.returncode == 0, f"issuer exited {done.returncode}: {done.stderr}"
    return dict(json.loads(done.stdout))


def kubeadm_api_server_args(issuer: dict[str, Any]) -> dict[str, str]:
    """The KubeadmControlPlane v1beta2 apiServer extraArgs ``issuer`` tells the user to set."""
    spec = issuer["kubeadmControlPlane"]["v1beta2"]["spec"]["kubeadmConfigSpec"]
    return {a["name"]: a["value"] for a in spec["clusterConfiguration"]["apiServer"]["extraArgs"]}


# --- the workload cluster ----------------------------------------------------------------------


def with_flags(argv: list[str], flags: dict[str, str]) -> list[str]:
    """``argv`` with each ``--name=value`` of ``flags`` in place of the harness's own (added
    when the harness sets none), as kubeadm's extraArgs override its defaults."""
    out = [a for a in argv if a.split("=", 1)[0].removeprefix("--") not in flags]
    return out + [f"--{name}={value}" for name, value in flags.items()]


class KubeadmWorkload(WorkloadCluster):
    """The kwok workload cluster with kube-apiserver configured as kubeadm configures it here."""

    def __init__(self, root: Path, tool: Callable[[str], Path], *, extra_args: dict[str, str], sa_secret: dict[str, Any]) -> None:
        super().__init__(root, tool)
        self.extra_args = dict(extra_args)
        self.sa_secret = sa_secret
        self.apiserver_argv: list[str] = []

    def _certificates(self) -> None:
        super()._certificates()
        # kubeadm's files: /etc/kubernetes/pki/sa.pub and sa.key, CAPI's <cluster>-sa pair.
        pki_dir = self.root / "certs" / "kubeadm"
        pki_dir.mkdir(parents=True, exist_ok=True)
        self.sa_public = pki_dir / "sa.pub"
        self.sa_key = pki_dir / "sa.key"
        self.sa_public.write_bytes(secret_bytes(self.sa_secret, "tls.crt"))
        self.sa_key.write_bytes(secret_bytes(self.sa_secret, "tls.key"))
        self.sa_key.chmod(0o600)

    def kubeadm_flags(self) -> dict[str, str]:
        """kubeadm's service-account key flags, then the KubeadmControlPlane's extraArgs."""
        return {
            "service-account-key-file": str(self.sa_public),
            "service-account-signing-key-file": str(self.sa_key),
            **self.extra_args,
        }

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        if name == "kube-apiserver":
            argv = with_flags(argv, self.kubeadm_flags())
            self.apiserver_argv = argv
        return super()._start(name, argv, env)

    def url_of(self, path: str) -> str:
        return f"{self.server}{path}"

    def tls(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.path))
        ctx.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        return ctx


def secret_bytes(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def token_request(server: str, tls: ssl.SSLContext, namespace: str, name: str, *, audience: str, seconds: int) -> str:
    """A token of ServiceAccount ``namespace/name`` through TokenRequest (what the kubelet asks
    for a projected serviceAccountToken volume)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": [audience], "expirationSeconds": seconds}}
    req = urllib.request.Request(  # noqa: S310 - the test's API server on loopback
        f"{server}/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, context=tls, timeout=30) as rsp:  # noqa: S310
        return str(json.load(rsp)["status"]["token"])


# --- the add-ons' charts -----------------------------------------------------------------------


def addon_renderings(releases: list[dict[str, Any]]) -> list[Rendering]:
    """Each composed Release rendered by the real helm with its values, as provider-helm installs it."""
    out = []
    for body in releases:
        rendering = render(HelmRelease.from_body(body, kubernetes_version()))
        assert not rendering.error, f"{rendering.release}: {rendering.error}"
        out.append(rendering)
    return out


def namespaced(rendering: Rendering, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the namespace helm installs it into."""
    return {**obj, "metadata": {**obj["metadata"], "namespace": rendering.namespace_of(obj)}}


def role_service_accounts(renderings: list[Rendering]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> role ARN of every rendered ServiceAccount with the role annotation."""
    return {
        (r.namespace_of(sa), sa["metadata"]["name"]): sa["metadata"]["annotations"][ROLE_ARN_ANNOTATION]
        for r in renderings
        for sa in r.of_kind("ServiceAccount")
        if ROLE_ARN_ANNOTATION in (sa["metadata"].get("annotations") or {})
    }


POD_KINDS = ("Deployment", "DaemonSet")


def apply_service_accounts(kube: Kube, renderings: list[Rendering]) -> None:
    """The release namespaces and every rendered ServiceAccount."""
    namespaces = {r.namespace_of(o) for r in renderings for o in r.objects if o.get("kind") in {"ServiceAccount", *POD_KINDS}}
    for ns in sorted(namespaces):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for r in renderings:
        for sa in r.of_kind("ServiceAccount"):
            kube.apply(namespaced(r, sa))


def apply_workloads(kube: Kube, renderings: list[Rendering]) -> list[dict[str, Any]]:
    """Every rendered Deployment and DaemonSet (the controllers make their pods); those."""
    applied = []
    for r in renderings:
        for kind in POD_KINDS:
            for obj in r.of_kind(kind):
                applied.append(kube.apply(namespaced(r, obj)))
    return applied


def pods_of(kube: Kube, workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a Deployment's ReplicaSets or a DaemonSet made (by the template's labels)."""
    meta = workload["metadata"]
    labels = workload["spec"]["selector"].get("matchLabels") or {}
    return [p for p in kube.list("v1", "Pod", namespace=meta["namespace"], labels=labels) if p["metadata"].get("ownerReferences")]


# --- the pod identity webhook ---------------------------------------------------------------


@dataclass
class PodIdentityWebhook:
    """The real webhook out of cluster with the arguments the function's Release renders to."""

    process: Process
    argv: list[str]
    port: int
    metrics_port: int
    configuration: dict[str, Any]

    @classmethod
    def start(cls, workload: KubeadmWorkload, rendering: Rendering, tool: Path) -> PodIdentityWebhook:
        deployment = rendering.of_kind("Deployment")[0]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        rendered = [*container["command"][1:], *(container.get("args") or [])]
        cert = workload.ca.leaf("pod-identity-webhook", server=True)
        port, metrics = free_port(), free_port()
        flags = {
            "port": str(port),
            "metrics-port": str(metrics),
            "tls-cert": str(cert.cert),
            "tls-key": str(cert.key),
            "namespace": rendering.release.namespace,  # $(POD_NAMESPACE)
            "kubeconfig": str(workload.kubeconfig),
            "enable-debugging-handlers": "true",  # /debug/alpha/cache: which ServiceAccounts it knows
        }
        argv = [str(tool), *with_flags(rendered, flags)]
        process = start("pod-identity-webhook", argv, workload.logs)
        workload.processes[process.name] = process
        ctx = ssl.create_default_context(cafile=str(workload.ca.path))

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=2) as rsp:
                return rsp.status == 200

        wait_until(process, healthy, "/healthz over TLS", timeout_s=60)
        configuration = rendering.of_kind("MutatingWebhookConfiguration")[0]
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"].get("path", "")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(workload.ca.pem).decode()}
        configuration["metadata"].pop("annotations", None)  # cert-manager's CA injection: the bundle is here
        workload.kube.apply(configuration)
        for config_map in rendering.of_kind("ConfigMap"):
            workload.kube.apply(namespaced(rendering, config_map))
        return cls(process, argv, port, metrics, configuration)

    def cached(self) -> dict[str, Any]:
        """The ServiceAccounts the webhook's cache holds (its debug handler)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/debug/alpha/cache", timeout=5) as rsp:
            return dict(json.load(rsp) or {})


# --- the issuer over HTTPS ---------------------------------------------------------------------


class _Tunnel(socketserver.BaseRequestHandler):
    """One CONNECT: to the issuer's host on 443 only, then bytes both ways."""

    server: _Proxy

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        self.server.asked.append(f"{method} {target}")
        if method != "CONNECT" or target != f"{self.server.host}:443":
            self.request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        with socket.create_connection(("127.0.0.1", self.server.tls_port)) as upstream:
            self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            pair = {self.request: upstream, upstream: self.request}
            while True:
                readable, _, _ = select.select(list(pair), [], [], 30)
                if not readable:
                    return
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def __init__(self, host: str, tls_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.host = host
        self.tls_port = tls_port
        self.asked: list[str] = []


class _Documents(BaseHTTPRequestHandler):
    def __init__(self, site: IssuerSite, *args: Any) -> None:
        self.site = site
        super().__init__(*args)

    def do_GET(self) -> None:
        self.site.served.append(self.path)
        found = self.site.documents.get(self.path)
        if found is None:
            self.send_error(404)
            return
        content_type, body = found
        self.send_response(200)
        self.send_header("Content-Type", content_type or "binary/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@dataclass
class IssuerSite:
    """``documents`` (URL path -> content type, bytes) at ``https://<host>`` over loopback."""

    root: Path
    issuer_url: str
    documents: dict[str, tuple[str, bytes]]
    served: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.host = urlsplit(self.issuer_url).hostname or ""
        self.ca = pki.CA(self.root, name="issuer hosting CA")
        leaf = self.ca.leaf(self.host, server=True, sans=(self.host,))
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(leaf.cert), str(leaf.key))
        self.https = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Documents, self))
        self.https.socket = server_ctx.wrap_socket(self.https.socket, server_side=True)
        self.proxy = _Proxy(self.host, self.https.server_address[1])
        self.proxy_url = f"http://127.0.0.1:{self.proxy.server_address[1]}"
        for server in (self.https, self.proxy):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def client_tls(self) -> ssl.SSLContext:
        """A client context that trusts the hosting's CA alone (hostname checked)."""
        return ssl.create_default_context(cafile=str(self.ca.path))

    def stop(self) -> None:
        for server in (self.https, self.proxy):
            server.shutdown()
            server.server_close()

    @contextlib.contextmanager
    def reachable(self) -> Iterator[None]:
        """urllib (PyJWT's fetcher too) reaches ``https://<host>`` through the proxy meanwhile."""
        names = ("https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY")
        saved = {n: os.environ.get(n) for n in names}
        os.environ.update({"https_proxy": self.proxy_url, "HTTPS_PROXY": self.proxy_url, "no_proxy": "", "NO_PROXY": ""})
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def issuer_documents(issuer_url: str, objects: dict[str, dict[str, Any]]) -> dict[str, tuple[str, bytes]]:
    """URL path -> (content type, bytes) of a bucket's objects under the issuer's path: the
    hostings serve the bucket's keys as paths (S3 by path on the bucket's host, CloudFront
    with the bucket as its origin)."""
    prefix = urlsplit(issuer_url).path.strip("/")
    return {f"/{key}": (obj.get("contentType") or "", obj["body"]) for key, obj in objects.items() if not prefix or key.startswith(prefix + "/")}


def verify(site: IssuerSite, token: str) -> dict[str, Any]:
    """The token's claims once PyJWT has checked it against the issuer's published documents:
    discovery at ``<issuer>/.well-known/openid-configuration``, its ``jwks_uri`` through
    ``PyJWKClient``, the signature with the key of the token's ``kid``, ``iss``, ``aud`` and
    the times. Raises PyJWT's error otherwise."""
    tls = site.client_tls()
    with site.reachable():
        with urllib.request.urlopen(site.issuer_url + DISCOVERY_PATH, context=tls, timeout=10) as rsp:  # noqa: S310
            discovery = json.load(rsp)
        assert discovery["issuer"] == site.issuer_url, discovery
        client = jwt.PyJWKClient(discovery["jwks_uri"], cache_jwk_set=False, ssl_context=tls)
        key = client.get_signing_key_from_jwt(token)
    return dict(
        jwt.decode(
            token,
            key=key,
            algorithms=discovery["id_token_signing_alg_values_supported"],
            audience=STS_AUDIENCE,
            issuer=discovery["issuer"],
            options={"require": ["exp", "iat", "iss", "sub", "aud"]},
        )
    )


# --- IAM ---------------------------------------------------------------------------------------


def npm_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "function-cluster-plugin" / "npm"


@dataclass
class IamSimulator:
    """@cloud-copilot/iam-simulate at the version of ``iam_simulate/package-lock.json``."""

    install: Path

    @classmethod
    def installed(cls) -> IamSimulator:
        """``npm ci`` of the lock into the cache (once per lock), outside the checkout.

        Raises:
            AssertionError: naming the command and npm's output when it cannot be installed.
        """
        lock = (IAM_SIMULATE_DIR / "package-lock.json").read_bytes()
        install = npm_cache() / f"iam-simulate-{hashlib.sha256(lock).hexdigest()[:16]}"
        stamp = install / ".installed"
        if not stamp.is_file():
            npm = shutil.which("npm")
            assert npm, "npm is not on PATH: the token e2e installs @cloud-copilot/iam-simulate with it (Debian: nodejs, npm)"
            install.mkdir(parents=True, exist_ok=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(IAM_SIMULATE_DIR / name, install / name)
            cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"]
            done = subprocess.run(cmd, cwd=install, capture_output=True, text=True, check=False, timeout=600)
            assert done.returncode == 0, f"`{' '.join(cmd)}` in {install} exited {done.returncode}:\n{done.stderr or done.stdout}"
            stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
        return cls(install)

    def evaluate(self, cases: list[dict[str, Any]]) -> list[str]:
        """The engine's verdict for each case (``Allowed``, ``ImplicitlyDenied``, ``ExplicitlyDenied``)."""
        node = shutil.which("node")
        assert node, "node is not on PATH: the token e2e runs @cloud-copilot/iam-simulate with it"
        done = subprocess.run(
            [node, str(IAM_SIMULATE_DIR / "evaluate.mjs"), str(self.install)],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, f"evaluate.mjs exited {done.returncode}:\n{done.stderr}"
        return list(json.loads(done.stdout))


def web_identity_case(provider_arn: str, issuer_key: str, role_arn: str, trust: Any, claims: dict[str, Any]) -> dict[str, Any]:
    """sts:AssumeRoleWithWebIdentity of ``role_arn`` by the OIDC provider ``provider_arn``, with
    the ``<issuer>:sub``/``:aud`` keys STS takes from the token's claims."""
    aud = claims["aud"]
    account = role_arn.split(":")[4]
    return {
        "principal": provider_arn,
        "action": "sts:AssumeRoleWithWebIdentity",
        "resource": role_arn,
        "accountId": account,
        "policy": json.loads(trust) if isinstance(trust, str) else trust,
        "context": {f"{issuer_key}:sub": claims["sub"], f"{issuer_key}:aud": aud if isinstance(aud, str) else aud[0]},
    }
