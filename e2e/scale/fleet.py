"""A fleet of ClusterPlugins on one control plane, and when each reached what.

Every XR is ``examples/selfhosted-full`` in a namespace of its own (``<prefix>-000``...), its
cluster made by the driver (``ClusterAPI``) with the control plane already available, so the
XRs converge as fast as Crossplane, the function and the providers let them. ``XRWatch``
follows the XR kind and records, per XR, when it was first seen Ready, when its PluginsReady
first said ClusterDeleted, and the Ready transitions after a given moment (an input change).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from e2e.controlplane.composite import Composite, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane
from e2e.controlplane.kube import Kube

EXAMPLE = "selfhosted-full"


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(seconds: list[float]) -> dict[str, float]:
    """Count, p50, p99, max and mean of durations."""
    return {
        "count": len(seconds),
        "p50_s": round(percentile(seconds, 50), 1),
        "p99_s": round(percentile(seconds, 99), 1),
        "max_s": round(max(seconds), 1) if seconds else float("nan"),
        "mean_s": round(statistics.fmean(seconds), 1) if seconds else float("nan"),
    }


@dataclass
class XRWatch:
    """The XR kind's events: first Ready, first ClusterDeleted, and the last write, per XR."""

    kube: Kube
    api_version: str
    kind: str
    ready_at: dict[str, float] = field(default_factory=dict)
    deleted_at: dict[str, float] = field(default_factory=dict)
    not_ready_since: dict[str, float] = field(default_factory=dict)
    ready_again_at: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> XRWatch:
        threading.Thread(
            target=self.kube.follow,
            args=(self.api_version, self.kind, self._on, self._stop, lambda e: self.errors.append(str(e)[:200])),
            daemon=True,
        ).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _on(self, event: str, obj: dict[str, Any]) -> None:
        if event == "DELETED":
            return
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        cond = conditions(obj)
        now = time.monotonic()
        with self._lock:
            if cond.get("Ready", {}).get("status") == "True":
                self.ready_at.setdefault(key, now)
                if key in self.not_ready_since:
                    self.ready_again_at.setdefault(key, now)
            elif key in self.ready_at:
                self.not_ready_since.setdefault(key, now)
            if cond.get("PluginsReady", {}).get("reason") == "ClusterDeleted":
                self.deleted_at.setdefault(key, now)


@dataclass
class Fleet:
    """``count`` XRs on ``cp`` in namespaces ``<prefix>-NNN``."""

    cp: ControlPlane
    providers: Providers
    composition: dict[str, Any]
    count: int
    prefix: str = "fleet"
    workload_kubeconfig: Callable[[int], bytes | None] = lambda _: None
    members: list[Composite] = field(default_factory=list)
    created_at: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.members = [
            Composite(
                self.cp, self.providers, EXAMPLE, self.composition, f"{self.prefix}-{i:03d}", workload_kubeconfig=self.workload_kubeconfig(i)
            )
            for i in range(self.count)
        ]

    @staticmethod
    def key(member: Composite) -> str:
        return f"{member.namespace}/{member.manifest['metadata']['name']}"

    def make_clusters(self) -> None:
        """Every member's cluster, its control plane available (not yet the XRs)."""
        for m in self.members:
            m.capi.create()
            m.control_plane_revisions["initialized"] = m.capi.set_control_plane(initialized=True, available=False)
            m.control_plane_revisions["available"] = m.capi.set_control_plane(initialized=True, available=True)

    def create_xrs(self) -> float:
        """Every XR, as fast as the API server takes them; the seconds the burst took."""
        started = time.monotonic()
        for m in self.members:
            m.kube.create(dict(m.manifest))
            self.created_at[self.key(m)] = time.monotonic()
        return time.monotonic() - started
