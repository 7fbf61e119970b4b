"""Render provider-helm Releases with the real helm 3 and the vendored chart packages.

provider-helm v1.x installs a Release by running helm 3 on the chart at
``spec.forProvider.chart``, under the release name ``crossplane.io/external-name``,
into ``spec.forProvider.namespace``, with ``spec.forProvider.values``. This module
does the same offline with ``helm template`` (``scripts/install_helm.py`` puts helm
v3.17.2 beside the venv's python): the chart's ``values.schema.json``, its templates'
``required``/``fail`` and its CRDs (``--include-crds``, as ``helm install`` installs
``crds/`` too) all take part.

Renders are cached by (chart, version, release name, namespace, Kubernetes version,
values digest): a lifecycle repeats the same Release many times.

Public API::

    HELM_VERSION, ROLE_ARN_ANNOTATION, UNVENDORED
    helm_binary() -> Path
    helm_version() -> str
    HelmRelease.from_body(body, kube_version) -> HelmRelease
    Renderer().render_all(releases) -> dict[HelmRelease, Rendering]
    RENDERER  # the session's shared Renderer
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from function_tools.render import go_numbers
from tests.kube_schema import vendored_charts

HELM_VERSION = "v3.17.2"  # what provider-helm v1.x embeds
ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn"
EXTERNAL_NAME = "crossplane.io/external-name"

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Releases whose chart version has no vendored package, by scenario: nothing else
# may go unrendered, and each entry must still be needed.
UNVENDORED: dict[str, dict[tuple[str, str], str]] = {
    "prefixed-and-versions": {
        ("aws-ebs-csi-driver", "2.63.0"): "step input charts.ebs points at an OCI mirror's older chart",
    },
}


def helm_binary() -> Path:
    """The helm the tests run: ``$HELM`` if set, else ``helm`` beside the venv's python.

    Raises:
        AssertionError: If it is not there (``make helm`` installs it): never a skip.
    """
    path = Path(os.environ.get("HELM") or Path(sys.executable).parent / "helm")
    assert path.is_file(), f"no helm at {path}: run `make helm` (scripts/install_helm.py)"
    return path


@cache
def _helm_home() -> dict[str, str]:
    # helm keeps a cache and config under $HOME; keep the runs off the user's.
    home = tempfile.mkdtemp(prefix="helm-home-")
    return {
        "HELM_CACHE_HOME": f"{home}/cache",
        "HELM_CONFIG_HOME": f"{home}/config",
        "HELM_DATA_HOME": f"{home}/data",
    }


def _run_helm(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_helm_home()}
    return subprocess.run(
        [str(helm_binary()), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


def helm_version() -> str:
    """The version ``helm version`` reports."""
    done = _run_helm("version", "--template", "{{.Version}}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass(frozen=True)
class HelmRelease:
    """What provider-helm hands helm for one Release (hashable: the render cache key)."""

    name: str  # the Helm release name: the Release's external name
    chart: str
    version: str
    repository: str
    namespace: str
    values_json: str  # canonical JSON of spec.forProvider.values
    kube_version: str = ""

    @classmethod
    def from_body(cls, body: dict[str, Any], kube_version: str = "") -> HelmRelease:
        """The Release a composed provider-helm Release body asks for."""
        fp = body["spec"]["forProvider"]
        chart = fp["chart"]
        return cls(
            name=body["metadata"]["annotations"][EXTERNAL_NAME],
            chart=chart["name"],
            version=chart["version"],
            repository=chart.get("repository", ""),
            namespace=fp["namespace"],
            # Crossplane writes the values as JSON, where Go prints a float64 26.0 as 26.
            values_json=json.dumps(go_numbers(fp.get("values") or {}), sort_keys=True),
            kube_version=kube_version,
        )

    @property
    def values(self) -> dict[str, Any]:
        """The values, as helm receives them."""
        return dict(json.loads(self.values_json))

    @property
    def values_digest(self) -> str:
        """A short digest of the values (for messages and counting)."""
        return hashlib.sha256(self.values_json.encode()).hexdigest()[:12]

    @property
    def archive(self) -> Path | None:
        """The vendored package of this chart version, if there is one."""
        return vendored_charts().get((self.chart, self.version))

    def __str__(self) -> str:
        return f"{self.name} ({self.chart} {self.version} -n {self.namespace}, values {self.values_digest})"


@dataclass
class Rendering:
    """The outcome of one ``helm template``."""

    release: HelmRelease
    objects: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""  # helm's stderr when it failed
    seconds: float = 0.0

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The rendered objects of ``kind``."""
        return [o for o in self.objects if o.get("kind") == kind]

    def namespace_of(self, obj: dict[str, Any]) -> str:
        """Where a namespaced object lands: its own namespace, else the release's."""
        return str(obj.get("metadata", {}).get("namespace") or self.release.namespace)


def render(release: HelmRelease) -> Rendering:
    """Run ``helm template`` for one Release on its vendored package."""
    archive = release.archive
    assert archive is not None, f"{release}: no vendored chart {release.chart} {release.version}"
    args = [
        "template", release.name, str(archive),
        "--namespace", release.namespace,
        "--include-crds",
        "--values", "-",
    ]  # fmt: skip
    if release.kube_version:
        args += ["--kube-version", release.kube_version]
    start = time.perf_counter()
    done = _run_helm(*args, stdin=release.values_json)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        return Rendering(release, error=done.stderr.strip() or "helm failed", seconds=seconds)
    objects = [doc for doc in yaml.load_all(done.stdout, Loader=_YAML_LOADER) if doc]
    return Rendering(release, objects=objects, seconds=seconds)


@dataclass
class Renderer:
    """Renders Releases once each, in parallel; counts what it did."""

    workers: int = max(2, os.cpu_count() or 2)
    cache: dict[HelmRelease, Rendering] = field(default_factory=dict)
    requests: int = 0  # Release bodies asked for (one per Release per reconcile)
    helm_runs: int = 0
    helm_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def render_all(self, releases: Iterable[HelmRelease]) -> dict[HelmRelease, Rendering]:
        """Render every Release (from the cache when it was rendered before)."""
        wanted = list(releases)
        with self._lock:
            self.requests += len(wanted)
            missing = sorted({r for r in wanted if r not in self.cache}, key=str)
        if missing:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                done = list(pool.map(render, missing))
            with self._lock:
                for rendering in done:
                    self.cache[rendering.release] = rendering
                    self.helm_runs += 1
                    self.helm_seconds += rendering.seconds
        return {r: self.cache[r] for r in wanted}

    def summary(self) -> str:
        """One line for the test report: how much was rendered, and what it cost."""
        pairs = {(r.chart, r.version, r.values_json) for r in self.cache}
        return (
            f"helm {HELM_VERSION}: {self.requests} Release bodies rendered from "
            f"{len(self.cache)} distinct renders ({len(pairs)} distinct chart+values), "
            f"{self.helm_runs} helm runs, {self.helm_seconds:.1f} s of helm time"
        )


# One renderer for the whole test session, so scenarios share renders.
RENDERER = Renderer()
