"""Day two on the real control plane: what an XR's status says of its charts, over time.

``PhaseRecorder`` polls the XR and records, per plugin, each change of its day-two fields
(``status.plugins[]``: upgrade, version, targetVersion, lastHealthyVersion) with the time it
was seen; the tests print it beside helm's own history of the workload cluster
(``workload.HelmHistory``), so a failing run shows what the function said while helm acted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from e2e.controlplane.workload import HelmHistory, ReleaseEvent

FIELDS = ("upgrade", "version", "targetVersion", "lastHealthyVersion")


def plugin_entry(xr: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """``status.plugins[]`` entry ``name`` of ``xr`` ({} when there is none)."""
    for entry in (xr or {}).get("status", {}).get("plugins", []) or []:
        if entry.get("name") == name:
            return dict(entry)
    return {}


@dataclass
class PhaseRecorder:
    """Each change of a plugin's day-two fields, as the XR said it (polled)."""

    read_xr: Callable[[], dict[str, Any] | None]
    interval_s: float = 0.25
    lines: list[str] = field(default_factory=list)
    seen: dict[str, list[tuple[float, dict[str, str]]]] = field(default_factory=dict)
    _start: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        last: dict[str, dict[str, str]] = {}
        while not self._stop.is_set():
            try:
                xr = self.read_xr()
            except Exception:  # the API server restarting; the next poll reads it
                xr = None
            for entry in (xr or {}).get("status", {}).get("plugins", []) or []:
                name = str(entry.get("name", ""))
                fields = {k: str(entry[k]) for k in FIELDS if entry.get(k)}
                if last.get(name) == fields:
                    continue
                last[name] = fields
                at = time.monotonic() - self._start
                with self._lock:
                    self.seen.setdefault(name, []).append((at, fields))
                    moving = f" -> {fields['targetVersion']}" if "targetVersion" in fields else ""
                    self.lines.append(
                        f"{at:7.1f}s  {name}: {fields.get('upgrade', '-')} "
                        f"{fields.get('version', '-')}{moving} "
                        f"(last healthy {fields.get('lastHealthyVersion', '-')})"
                    )
            self._stop.wait(self.interval_s)

    def phases(self, plugin: str) -> list[str]:
        """The upgrade phases ``plugin`` went through, in order, each once per run of it."""
        with self._lock:
            out: list[str] = []
            for _, fields in self.seen.get(plugin, []):
                phase = fields.get("upgrade", "")
                if phase and (not out or out[-1] != phase):
                    out.append(phase)
            return out

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)


def revision_event(history: HelmHistory, release: str, version: int, status: str) -> ReleaseEvent | None:
    """The first event of ``release``'s helm revision ``version`` in ``status``."""
    with history._lock:  # the history's own lock, read as its methods do
        return next(
            (e for e in history.events if e.release == release and e.version == version and e.status == status),
            None,
        )


def latest_revision(history: HelmHistory, release: str) -> int:
    """The highest helm revision of ``release`` seen (0 before its install)."""
    with history._lock:
        return max((e.version for e in history.events if e.release == release), default=0)
