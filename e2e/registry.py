"""An OCI registry on loopback with TLS from a test CA, and a release published to it.

``docker-registry`` is the CNCF distribution registry v2.8 as Debian packages it
(``apt-get install docker-registry``; bookworm has 2.8.2). The test starts its own, on a free
port of 127.0.0.1, storing under a temporary folder, serving TLS with a certificate for
``127.0.0.1`` and ``localhost`` signed by a throw-away CA (``cryptography``). Nothing else
trusts that CA: each client is told to.

- The ``crossplane`` CLI (Go) trusts it with ``SSL_CERT_FILE`` (:attr:`LocalRegistry.cli_env`);
  Go then reads that file instead of the system's roots.
- Crossplane core trusts it with ``--ca-bundle-path`` (or ``CA_BUNDLE_PATH``), added to the
  system's roots for every package fetch (cmd/crossplane/core/core.go,
  ``ParseCertificatesFromPath``); the Helm chart sets it from ``registryCaBundleConfig``.
- The helpers here speak the registry's HTTP API with Python's ssl and the CA.

Usage::

    with LocalRegistry.start(folder) as registry:
        registry.host                        # "127.0.0.1:PORT", a registry host Crossplane accepts
        registry.manifest("org/repo", "v1")  # digest, media type and body of a tag or digest

:func:`publish` builds a release for a path of such a registry and pushes it
(``scripts/release.py``, as ``make release`` and ``make release-push`` do);
:func:`push_stub_providers` pushes stand-ins for the providers the Configurations depend on,
with the ``ImageConfig`` that makes Crossplane fetch them from there instead of
xpkg.crossplane.io (what a mirror does), so that Crossplane can resolve every dependency
here, where the real providers cannot be had. The fixtures in ``e2e/conftest.py`` hand them
to tests.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from function_tools.packaging import PROVIDER_REGISTRY, PROVIDERS, PackageSource, split_reference
from scripts import release
from tests.test_mtls import make_ca, make_leaf
from tests.test_serve import free_port

ACCEPT = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)
START_TIMEOUT_S = 20


class RegistryError(RuntimeError):
    """The registry could not be started, or answered with an error."""


@dataclass(frozen=True)
class Manifest:
    """A manifest as the registry serves it."""

    digest: str
    media_type: str
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        """The manifest's JSON."""
        return dict(json.loads(self.body))


@dataclass
class LocalRegistry:
    """A running registry: its address, its CA and its log."""

    host: str
    ca_file: Path
    log: Path
    process: subprocess.Popen[bytes]

    @classmethod
    @contextmanager
    def start(cls, folder: Path) -> Iterator[LocalRegistry]:
        """Start a registry storing under ``folder``; stopped when the block ends."""
        binary = shutil.which("docker-registry")
        if binary is None:
            msg = "docker-registry not found; on Debian: apt-get install docker-registry"
            raise RegistryError(msg)
        folder.mkdir(parents=True, exist_ok=True)
        ca, ca_cert, ca_key = make_ca("function-cluster-plugin test registry CA")
        leaf = make_leaf(ca_cert, ca_key, "registry", server=True)
        (folder / "ca.crt").write_bytes(ca.cert)
        (folder / "tls.crt").write_bytes(leaf.cert)
        (folder / "tls.key").write_bytes(leaf.key)
        host = f"127.0.0.1:{free_port()}"
        config = folder / "config.yml"
        config.write_text(
            json.dumps(  # YAML's JSON subset
                {
                    "version": 0.1,
                    "log": {"level": "info", "accesslog": {"disabled": True}},
                    "storage": {"filesystem": {"rootdirectory": str(folder / "storage")}},
                    "http": {
                        "addr": host,
                        "tls": {
                            "certificate": str(folder / "tls.crt"),
                            "key": str(folder / "tls.key"),
                        },
                    },
                },
                indent=2,
            )
        )
        log = folder / "registry.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [binary, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        registry = cls(host, folder / "ca.crt", log, process)
        try:
            registry.wait_ready()
            yield registry
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    # --- clients -------------------------------------------------------------------------

    @property
    def cli_env(self) -> dict[str, str]:
        """Environment for Go clients (the crossplane CLI) to trust this registry's CA."""
        return {"SSL_CERT_FILE": str(self.ca_file)}

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _get(self, path: str, headers: dict[str, str] | None = None) -> tuple[bytes, Any]:
        request = urllib.request.Request(
            f"https://{self.host}{path}", headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, context=self._context(), timeout=30) as rsp:  # noqa: S310
                return rsp.read(), rsp.headers
        except urllib.error.HTTPError as e:
            msg = f"GET {path}: {e.code} {e.read()[:300]!r}"
            raise RegistryError(msg) from e

    def wait_ready(self) -> None:
        """Until ``/v2/`` answers over TLS with the CA, or the process dies."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                msg = f"docker-registry exited {self.process.returncode}:\n{self.log.read_text()}"
                raise RegistryError(msg)
            try:
                self._get("/v2/")
            except (OSError, RegistryError):
                if time.monotonic() > deadline:
                    msg = f"docker-registry did not answer in {START_TIMEOUT_S} s:\n{self.log.read_text()}"
                    raise RegistryError(msg) from None
                time.sleep(0.1)
            else:
                return

    def manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest of a tag or digest, with the digest the registry names it by."""
        body, headers = self._get(f"/v2/{repository}/manifests/{reference}", {"Accept": ACCEPT})
        return Manifest(headers["Docker-Content-Digest"], headers["Content-Type"], body)

    def blob(self, repository: str, digest: str) -> bytes:
        """A blob (config or layer) by digest."""
        body, _ = self._get(f"/v2/{repository}/blobs/{digest}")
        return body

    def tags(self, repository: str) -> list[str]:
        """The repository's tags."""
        body, _ = self._get(f"/v2/{repository}/tags/list")
        return list(json.loads(body).get("tags") or [])


# --- A release published to it --------------------------------------------------------------


@dataclass(frozen=True)
class PublishedRelease:
    """A release built for a path of ``registry`` (and, once pushed, in it)."""

    source: PackageSource
    folder: Path
    record: dict[str, Any]
    registry: LocalRegistry

    @property
    def function_name(self) -> str:
        """The name Crossplane gives the function dependency (the Compositions call it)."""
        return str(self.record["function"]["name"])

    def artifact(self, kind: str, flavour: str | None = None) -> dict[str, Any]:
        """The release.json entry of the image, the Function or a flavour's Configuration."""
        (found,) = [
            a
            for a in self.record["artifacts"]
            if a.get("kind") == kind and a.get("flavour") == flavour
        ]
        return found

    def xpkg(self, kind: str, flavour: str | None = None) -> release.Xpkg:
        """A package file of the release, read back."""
        return release.read_xpkg(self.folder / self.artifact(kind, flavour)["file"])

    def repository(self, kind: str, flavour: str | None = None) -> tuple[str, str]:
        """(repository path in the registry, tag) of a package."""
        path, _, tag = self.artifact(kind, flavour)["reference"].rpartition(":")
        return split_reference(path)[1], tag


def publish(
    registry: LocalRegistry, cli: Path, out: Path, path: str, *, push: bool = True
) -> PublishedRelease:
    """Build the checkout's release for ``registry.host/path`` into ``out``; push it unless told not to."""
    source = PackageSource(f"{registry.host}/{path}", release.HOME_SOURCE.version)
    record = release.build(source, out, cli=cli)
    published = PublishedRelease(source, out / source.version, record, registry)
    if push:
        release.push(published.folder, source, cli=cli, env=registry.cli_env)
    return published


MIRROR_PATH = "crossplane-contrib"


def push_stub_providers(registry: LocalRegistry, cli: Path, work: Path) -> dict[str, Any]:
    """Push a stand-in for each provider the Configurations depend on; return the ImageConfig.

    Each stand-in is a Provider package of that name with no CRDs and no controller (the
    tests install the real CRDs themselves), built and read back like the release's packages,
    pushed at the pinned version under ``registry.host/crossplane-contrib``. The ImageConfig
    rewrites ``xpkg.crossplane.io/crossplane-contrib`` to that path: Crossplane's package
    client applies it when it lists a dependency's versions and fetches it, while the Lock
    keeps the original source the Configurations name (crossplane-runtime pkg/xpkg/client.go,
    ``RewritePath``).
    """
    for name, tag in PROVIDERS:
        root = work / name
        root.mkdir(parents=True)
        meta = {
            "apiVersion": "meta.pkg.crossplane.io/v1",
            "kind": "Provider",
            "metadata": {
                "name": name,
                "annotations": {"meta.crossplane.io/description": f"A stand-in for {name} {tag}."},
            },
            "spec": {"crossplane": {"version": ">=v1.17.0-0"}},
        }
        (root / "crossplane.yaml").write_text(json.dumps(meta, indent=2))
        file = work / f"{name}.xpkg"
        release.build_package(cli, root, {"crossplane.yaml"}, file, work)
        release.run_cli(
            cli,
            "xpkg",
            "push",
            f"--package-files={file}",
            f"{registry.host}/{MIRROR_PATH}/{name}:{tag}",
            env=registry.cli_env,
        )
    return {
        "apiVersion": "pkg.crossplane.io/v1beta1",
        "kind": "ImageConfig",
        "metadata": {"name": "crossplane-contrib-mirror"},
        "spec": {
            "matchImages": [{"type": "Prefix", "prefix": PROVIDER_REGISTRY}],
            "rewriteImage": {"prefix": f"{registry.host}/{MIRROR_PATH}"},
        },
    }
