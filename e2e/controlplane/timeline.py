"""What each composed resource and the XR said, and when: a watch of their conditions.

``StatusTimeline`` follows every kind the function composes and the XR's kind. For a composed
resource it records a line each time its generation, ``Ready`` (with its lastTransitionTime),
``Synced`` (with its observedGeneration), ``status.atProvider.state``/``revision`` or spec
changes (the spec's difference said); for the XR, every write. Each line carries the store's
resourceVersion and the time it was seen. A readiness test prints it when it fails: the order
in which things happened as the API server saw them, e.g. Crossplane writing the XR's Ready
condition of before for a moment (Composite.settled_xr).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from e2e.controlplane.driver import composed_kinds
from e2e.controlplane.kube import Kube

RESOURCE_NAME = "crossplane.io/composition-resource-name"


def _condition(obj: dict[str, Any], typ: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == typ), {})


def summary(obj: dict[str, Any]) -> str:
    """The generation, Ready, Synced and provider state of ``obj``, in one line."""
    ready, synced = _condition(obj, "Ready"), _condition(obj, "Synced")
    at = obj.get("status", {}).get("atProvider", {}) or {}
    since = str(ready.get("lastTransitionTime", ""))[11:19] or "-"
    parts = [
        f"gen {obj['metadata'].get('generation')}",
        f"Ready={ready.get('status', '-')}/{ready.get('reason', '-')} since {since}",
        f"Synced={synced.get('status', '-')}@{synced.get('observedGeneration', '-')}",
    ]
    if "state" in at or "revision" in at:
        parts.append(f"state={at.get('state', '-')} rev={at.get('revision', '-')}")
    message = ready.get("message", "")
    if message:
        parts.append(f"({message[:120]})")
    return " ".join(parts)


def spec_difference(before: Any, after: Any, path: str = "") -> str:
    """Where two specs differ: ``.path: old -> new``, '; ' between."""
    if isinstance(before, dict) and isinstance(after, dict):
        return "; ".join(
            d for k in sorted(set(before) | set(after)) if (d := spec_difference(before.get(k), after.get(k), f"{path}.{k}"))
        )
    return "" if before == after else f"{path}: {str(before)[:80]} -> {str(after)[:80]}"


@dataclass
class StatusTimeline:
    """Watches the composed kinds and the XR's kind (started by ``start``, until ``stop``)."""

    kube: Kube
    xr_kind: tuple[str, str]  # (apiVersion, kind) of the XR
    namespaced: bool = True
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _last: dict[str, str] = field(default_factory=dict)
    _specs: dict[str, Any] = field(default_factory=dict)
    _start: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for api_version, kind in [*composed_kinds(namespaced=self.namespaced), self.xr_kind]:
            threading.Thread(target=self._watch, args=(api_version, kind), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, api_version: str, kind: str) -> None:
        def on_error(err: Exception) -> None:
            if "429" not in str(err):  # a new CRD's watch cache still initializing
                with self._lock:
                    self.errors.append(f"watch {kind}: {type(err).__name__}: {err}")

        self.kube.follow(api_version, kind, self._on, self._stop, on_error)

    def _on(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        is_xr = obj["kind"] == self.xr_kind[1]
        name = f"{obj['kind']}/{meta['name']}" if is_xr else meta.get("annotations", {}).get(RESOURCE_NAME, meta["name"])
        said = "deleted" if event_type == "DELETED" else summary(obj)
        with self._lock:
            before, self._specs[name] = self._specs.get(name), obj.get("spec")
            if not is_xr and before is not None and event_type != "DELETED":
                changed = spec_difference(before, obj.get("spec"))
                said += f" spec {changed}" if changed else ""
            if self._last.get(name) == said and not is_xr:
                return
            self._last[name] = said
            seen = time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}"
            self.lines.append(f"{time.monotonic() - self._start:7.1f}s {seen} rv {meta.get('resourceVersion')}  {name}: {said}")

    def text(self) -> str:
        """Every line, and the watches' errors."""
        with self._lock:
            return "\n".join([*self.lines, *self.errors])
