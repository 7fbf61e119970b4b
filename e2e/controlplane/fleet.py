"""Many workload clusters at the price of one: kube-apiservers on one etcd, each under its own prefix.

A fleet rollout needs a workload cluster per ClusterPlugin (helm's release names are fixed per
add-on, so two XRs cannot share one). ``SharedEtcdClusters`` runs one etcd and ``count``
kube-apiservers, each storing under ``--etcd-prefix=/cluster-<i>``: separate clusters to every
client, one store to run. No controller runs in them: the fleet's add-on (the AWS Load
Balancer Controller) is a Release without ``wait``, so helm installs and upgrades it against
the API server alone. ``HelmHistory`` per member removes the webhook configurations its chart
registers (nothing serves them) and records each helm revision.

``ClusterTimeline`` polls the rollout and every member's Release (its spec's chart version and
helm's latest revision) and keeps a line per change: what the test prints and asserts on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.controlplane.day_two import latest_revision
from e2e.controlplane.harness import ROOT
from e2e.controlplane.kube import Kube
from e2e.controlplane.workload import HelmHistory, WorkloadCluster


class SharedEtcdClusters(WorkloadCluster):
    """One etcd and ``count`` kube-apiservers, each a workload cluster of its own."""

    def __init__(self, root: Path, tool: Callable[[str], Path], *, count: int) -> None:
        super().__init__(root, tool)
        self.count = count
        self.members: list[tuple[str, Kube]] = []

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("certificates", self._certificates),
            ("etcd", self._etcd),
            (f"{self.count} kube-apiservers", self._members),
        ]

    def _members(self) -> None:
        # Started together: each mostly waits for its own storage to come up.
        with ThreadPoolExecutor(self.count) as pool:
            self.members = list(
                pool.map(lambda i: self.start_apiserver(f"kube-apiserver-{i}", f"/cluster-{i}"), range(self.count))
            )
        self.server, self.kube = self.members[0]

    def kubeconfig_of(self, index: int, name: str) -> bytes:
        """What ``<name>-kubeconfig`` holds for member ``index``."""
        return self.inline_kubeconfig(name, server=self.members[index][0])


def renamed_required(example: str, name: str, into: Path) -> Path:
    """The example's CAPI objects for a cluster called ``name`` (its objects, labels and Secrets
    are named after the cluster): several clusters in one namespace."""
    into.mkdir(parents=True, exist_ok=True)
    for path in sorted((ROOT / "examples" / example / "required").glob("*.yaml")):
        (into / path.name).write_text(re.sub(r"\bdemo\b", name, path.read_text()))
    return into


@dataclass
class Member:
    """One ClusterPlugin of the fleet: where it lives and how to read its workload cluster."""

    namespace: str
    name: str
    history: HelmHistory

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Sample:
    """The fleet at one poll."""

    at: float
    phase: str
    wave: str
    admitted: int
    # member key -> (its Release's chart version in the spec, helm's latest revision, its wave).
    clusters: dict[str, tuple[str, int, str]]


@dataclass
class ClusterTimeline:
    """The rollout's phase, wave and admitted count, and each member's Release, over time."""

    kube: Kube
    rollout: tuple[str, str, str]  # apiVersion, kind, name
    release_kind: tuple[str, str]
    xr_kind: tuple[str, str]
    members: Sequence[Member]
    interval_s: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    _start: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _read(self) -> Sample:
        status = (self.kube.get(*self.rollout) or {}).get("status", {})
        releases = {}
        for release in self.kube.list(*self.release_kind):
            meta = release["metadata"]
            owner = meta.get("labels", {}).get("crossplane.io/composite", "")
            releases[(meta.get("namespace", ""), owner)] = release["spec"]["forProvider"]["chart"]["version"]
        xrs = {(x["metadata"]["namespace"], x["metadata"]["name"]): x for x in self.kube.list(*self.xr_kind)}
        clusters = {}
        for m in self.members:
            xr = xrs.get((m.namespace, m.name), {})
            wave = xr.get("status", {}).get("rollout", {}).get("wave", "")
            clusters[m.key] = (releases.get((m.namespace, m.name), ""), latest_revision(m.history, "aws-load-balancer-controller"), wave)
        return Sample(
            time.monotonic() - self._start,
            status.get("phase", ""),
            status.get("wave", ""),
            int(status.get("counts", {}).get("admitted", 0)),
            clusters,
        )

    def _run(self) -> None:
        last: tuple[Any, ...] | None = None
        while not self._stop.is_set():
            try:
                sample = self._read()
            except Exception:
                self._stop.wait(self.interval_s)
                continue
            key = (sample.phase, sample.wave, sample.admitted, tuple(sorted(sample.clusters.items())))
            with self._lock:
                self.samples.append(sample)
                if key != last:
                    last = key
                    cells = "  ".join(f"{k.split('/')[1]}:{v[0]}/r{v[1]}" for k, v in sorted(sample.clusters.items()))
                    self.lines.append(f"{sample.at:6.1f}s  {sample.phase or '-':11} {sample.wave or '-':7} admitted={sample.admitted}  {cells}")
            self._stop.wait(self.interval_s)

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)
