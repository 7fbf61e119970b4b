"""What holds after every fault and its repair, and what the XR said while the fault lasted.

- ``StatusWatch`` reads the XR and what it composed every second from the fault until the
  case ends: the XR's Ready, Synced and PluginsReady, what each plugin waits for, and which
  composed resources are not ready as the function counts them (``composed_ready``). A reading
  the API server cannot answer (it is down) is kept as unreadable.
- ``honesty_problems``: at every reading, a Ready XR had everything composed ready (a resource
  seen unready in one reading only may have turned so between its two reads), and was not
  Ready at all before ``ready_from`` (a part was down, or the XR was being created or its cluster
  deleted); an XR not Ready said why: Crossplane's Synced=False message (the function or an API
  unreachable), the function's PluginsReady message and each waiting plugin's ``waitingFor``,
  or Crossplane's ``Unready resources: ...``.
- ``withdrawal_problems``: only what was expected went (nothing while its cluster exists),
  nothing was uninstalled while the cluster was being deleted, the Usage order held in the
  control plane (``e2e/aws/deletion.usage_order_problems``: the user gone before what it used
  was marked for deletion, the Usage too) and Crossplane's usage webhook refused nothing.
- ``leftovers``: what the API server still holds of the XR's composed kinds in its namespace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from e2e.aws.deletion import refusals, reversed_usages, usage_order_problems, wait_recorded
from e2e.controlplane.composite import Composite, composed_ready, conditions
from e2e.controlplane.driver import Providers, composed_kinds

SAMPLE_INTERVAL_S = 1.0
T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One reading of the XR and what it composed."""

    at: float
    readable: bool
    ready: str = ""
    ready_message: str = ""
    synced: str = ""
    synced_message: str = ""
    plugins_ready: str = ""
    plugins_message: str = ""
    waiting: tuple[str, ...] = ()  # "<plugin>: <waitingFor>" of each plugin not Ready
    composed: int = 0
    unready: tuple[str, ...] = ()  # composed resources not ready as the function counts them
    upgrade: str = ""  # status.upgrade: whether a chart is mid-upgrade (day two)
    charts_healthy: str = ""  # the ChartsHealthy condition's status
    error: str = ""

    def said(self) -> str:
        """Why the XR says it is not Ready, in its own words ("" if it says nothing)."""
        parts = []
        if self.synced == "False" and self.synced_message:
            parts.append(f"Synced: {self.synced_message}")
        if self.plugins_ready == "False" and self.plugins_message:
            parts.append(f"PluginsReady: {self.plugins_message}")
        if self.waiting:
            parts.append("waiting: " + "; ".join(self.waiting))
        if self.ready != "True" and self.ready_message:
            parts.append(f"Ready: {self.ready_message}")
        return " | ".join(parts)


def sample(composite: Composite) -> Sample:
    """The XR and what it composed, now."""
    now = time.monotonic()
    try:
        xr = composite.xr()
        composed = composite.composed()
    except Exception as err:
        return Sample(now, readable=False, error=f"{type(err).__name__}: {err}"[:200])
    cond = conditions(xr)
    plugins = (xr or {}).get("status", {}).get("plugins", []) or []
    return Sample(
        now,
        readable=xr is not None,
        ready=str(cond.get("Ready", {}).get("status", "")),
        ready_message=str(cond.get("Ready", {}).get("message", "")),
        synced=str(cond.get("Synced", {}).get("status", "")),
        synced_message=str(cond.get("Synced", {}).get("message", "")),
        plugins_ready=str(cond.get("PluginsReady", {}).get("status", "")),
        plugins_message=str(cond.get("PluginsReady", {}).get("message", "")),
        waiting=tuple(f"{p['name']}: {p.get('waitingFor', '')}" for p in plugins if p.get("phase") != "Ready"),
        composed=len(composed),
        unready=tuple(sorted(n for n, o in composed.items() if not composed_ready(o))),
        upgrade=str((xr or {}).get("status", {}).get("upgrade", "")),
        charts_healthy=str(cond.get("ChartsHealthy", {}).get("status", "")),
    )


@dataclass
class StatusWatch:
    """Readings of one XR, every ``interval_s``, from ``start`` to ``stop``."""

    composite: Composite
    interval_s: float = SAMPLE_INTERVAL_S
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> StatusWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(sample(self.composite))
            self._stop.wait(self.interval_s)

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.samples.append(sample(self.composite))
        return self.samples

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]


def honesty_problems(samples: list[Sample], *, ready_from: float | None) -> list[str]:
    """Where the XR was Ready while it should not have been, or not Ready without saying why.

    ``ready_from``: from when (monotonic) the XR may be Ready; None: never in these readings."""
    readable = [s for s in samples if s.readable]
    if not readable:
        return ["no reading of the XR at all during the fault"]
    out = []
    before: Sample | None = None
    for s in readable:
        if s.ready == "True":
            if ready_from is None or s.at < ready_from:
                out.append(f"{s.at:.1f}: Ready while a part was down or the XR was not done")
            elif s.unready and before is not None and before.ready == "True" and set(s.unready) & set(before.unready):
                # A reading is two reads (the XR, then what it composed): a resource that turns
                # unready between them (a provider meeting a 500) is seen before Crossplane has
                # reconciled the XR on it. So the XR lies only if it still says Ready at the
                # next reading (a second later) with that resource still unready.
                both = sorted(set(s.unready) & set(before.unready))
                out.append(f"{s.at:.1f}: Ready while {', '.join(both)} not ready (since {before.at:.1f})")
        elif not s.said():
            out.append(f"{s.at:.1f}: not Ready (Ready={s.ready!r}) and said nothing of why")
        before = s
    return out


def what_it_said(samples: list[Sample]) -> list[str]:
    """Each different thing the XR said while not Ready, in order (for the test's output)."""
    out: list[str] = []
    for s in samples:
        said = s.said() if s.readable else f"(API server unreadable: {s.error[:80]})"
        if said and (not out or out[-1] != said):
            out.append(said)
    return out


def withdrawal_problems(
    composite: Composite,
    watch: Providers,
    composed: dict[str, dict[str, Any]],
    gone: set[str],
    *,
    since: int = 0,
) -> list[str]:
    """``gone`` (composition-resource-names of ``composed``) went, in Usage order, and nothing
    else of the namespace was marked or deleted after the watch's event number ``since``;
    nothing uninstalled or hanging while the cluster was being deleted; no refusal."""
    namespace = composite.namespace
    withdrawn = {n: composed[n] for n in gone}
    events = wait_recorded(watch, withdrawn, namespace) if withdrawn else watch.history(namespace)
    events = [e for e in events[since:] if e.namespace == namespace]
    touched = {e.resource for e in events if e.what in {"deleting", "deleted"} and e.resource}
    out = [f"{n} deleted, though it was not to be withdrawn" for n in sorted(touched - gone)]
    out += [f"{n} not withdrawn" for n in sorted(gone - {e.resource for e in events if e.what == "deleted"})]
    out += [f"{e.resource} {e.what}" for e in events if e.what in {"hung"}]
    usages = {n: o for n, o in withdrawn.items() if o["kind"] == "Usage"}
    if usages:
        out += usage_order_problems(usages, composed, events, None).problems
        # The same evidence must refute the reversed order, or the check could not tell.
        if not usage_order_problems(reversed_usages(usages), composed, events, None).problems:
            out.append(f"the reversed Usage order fits the evidence too: {sorted(usages)}")
    out += refusals(composite.cp, watch, withdrawn or composed, namespace)
    return out


def uninstalls(watch: Providers, namespace: str, since: int = 0) -> list[str]:
    """Releases the played provider-helm uninstalled (or tried to) after event ``since``."""
    return [f"{e.resource} {e.what}" for e in watch.history(namespace)[since:] if e.what in {"uninstalled", "hung"}]


def leftovers(composite: Composite, settle_s: float = 60) -> list[str]:
    """Objects of the composed kinds the API server still holds in the composite's namespace.

    What is only still finalizing (marked for deletion: a ProviderConfig while its provider
    releases it, just after the XR said ClusterDeleted) gets up to ``settle_s`` to go; an
    object not even marked for deletion is left at once.
    """
    deadline = time.monotonic() + settle_s
    while True:
        left = [
            obj
            for api_version, kind in composed_kinds(namespaced=True)
            for obj in composite.kube.list(api_version, kind, composite.namespace)
        ]
        finalizing = all(o["metadata"].get("deletionTimestamp") for o in left)
        if not left or not finalizing or time.monotonic() > deadline:
            return [
                f"{o['kind']} {o['metadata']['name']}"
                + (" (marked for deletion, still there)" if o["metadata"].get("deletionTimestamp") else "")
                for o in left
            ]
        time.sleep(1)


def explain(composite: Composite) -> str:
    """The XR's status and every object of the composed kinds left in its namespace, with its
    finalizers, deletion mark and conditions: what a case that did not converge prints."""
    import yaml

    xr = composite.xr() or {}
    lines = ["XR status:", yaml.safe_dump(xr.get("status", {}), width=200)]
    for api_version, kind in composed_kinds(namespaced=True):
        for obj in composite.kube.list(api_version, kind, composite.namespace):
            meta = obj["metadata"]
            said = "; ".join(f"{t}={c['status']} {c.get('reason', '')}" for t, c in conditions(obj).items())
            extra = f" by {obj['spec']['by']['resourceRef']['name']} of {obj['spec']['of']['resourceRef']['name']}" if kind == "Usage" else ""
            lines.append(
                f"{kind} {meta['name']} ({(meta.get('annotations') or {}).get('crossplane.io/composition-resource-name')}){extra}: "
                f"finalizers {meta.get('finalizers')}, deleting {bool(meta.get('deletionTimestamp'))}, labels {meta.get('labels')}, {said}"
            )
    return "\n".join(lines)


def until_converged(composite: Composite, wait: Callable[[], T], more: Callable[[], str] = lambda: "") -> T:
    """What ``wait`` returns; if it times out, the test fails saying what is left (and ``more``)."""
    try:
        return wait()
    except TimeoutError as err:
        pytest.fail(f"{err}\n{more()}\n{explain(composite)}", pytrace=False)


def cluster_deleted(composite: Composite, timeout_s: float, more: Callable[[], str] = lambda: "") -> dict[str, Any]:
    """The XR once its PluginsReady says ClusterDeleted (until_converged)."""
    return until_converged(
        composite,
        lambda: composite.kube.wait_for(
            lambda: (got := composite.xr()) is not None and conditions(got).get("PluginsReady", {}).get("reason") == "ClusterDeleted" and got,
            "the XR ClusterDeleted",
            timeout_s=timeout_s,
            interval_s=0.5,
        ),
        more,
    )
