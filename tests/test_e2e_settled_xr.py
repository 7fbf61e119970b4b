"""e2e/controlplane/composite.py's reading of an XR's Ready condition as Crossplane settles it.

Crossplane v2.4 applies the XR status mid-reconcile with the conditions of the XR as that
reconcile read it from its cache, and writes its own verdict at the end; a reconcile that read
the XR one write behind so writes the Ready condition of before for a moment. The XR states
below are the ones e2e/controlplane/test_helm_kwok.py recorded (resourceVersions 898 to 900):
Ready, then ``Unready resources: lbc-release`` with its lastTransitionTime of before, then Ready.
``Composite.settled_xr`` reads past such a replay and no further; the API server is scripted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from e2e.controlplane.composite import Composite
from e2e.controlplane.harness import ROOT
from e2e.controlplane.kube import Kube

READY_AT = "2026-11-27T10:21:03Z"


def _xr(rv: int, status: str, at: str, message: str = "") -> dict[str, Any]:
    ready = {"type": "Ready", "status": status, "reason": "Available" if status == "True" else "Creating", "lastTransitionTime": at}
    if message:
        ready["message"] = message
    meta = {"name": "demo", "namespace": "team-h", "resourceVersion": str(rv)}
    return {"apiVersion": "clusterplugin.dev/v1alpha1", "kind": "ClusterPlugin", "metadata": meta, "status": {"conditions": [ready]}}


READY = _xr(898, "True", READY_AT)
REPLAY = _xr(899, "False", "2026-11-27T10:20:58Z", "Unready resources: lbc-release")
READY_AGAIN = _xr(900, "True", READY_AT)


class ScriptedKube:
    """Answers each read of the XR with the next state (the last one from then on)."""

    wait_for = staticmethod(Kube.wait_for)

    def __init__(self, *states: dict[str, Any]) -> None:
        self.states = states
        self.reads = 0

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        state = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        return state


@dataclass
class ControlPlaneOf:
    kube: ScriptedKube


def composite(*states: dict[str, Any]) -> Composite:
    """The demo converged (its XR seen Ready), then read as ``states`` say."""
    kube = ScriptedKube(READY, *states)
    composition = yaml.safe_load((ROOT / "apis" / "v2" / "composition.yaml").read_text())
    demo = Composite(ControlPlaneOf(kube), None, "selfhosted-full", composition, "team-h")  # type: ignore[arg-type]
    assert demo.wait_ready(timeout_s=1) == READY
    assert demo.ready_at == READY_AT
    return demo


def ready(xr: dict[str, Any] | None) -> dict[str, Any]:
    assert xr is not None
    return dict(xr["status"]["conditions"][0])


def test_a_replayed_ready_condition_is_read_past() -> None:
    demo = composite(REPLAY, REPLAY, READY_AGAIN)
    assert ready(demo.settled_xr(timeout_s=5))["status"] == "True"


def test_a_replay_of_the_second_the_xr_turned_ready_is_one_too() -> None:
    demo = composite(_xr(899, "False", READY_AT, "Unready resources: lbc-release"), READY_AGAIN)
    assert ready(demo.settled_xr(timeout_s=5))["status"] == "True"


def test_a_ready_condition_written_since_is_the_xrs_own() -> None:
    """Not Ready since the XR was Ready (a newer lastTransitionTime): returned as it is."""
    later = _xr(899, "False", "2026-11-27T10:21:04Z", "Unready resources: lbc-release")
    demo = composite(later, READY_AGAIN)
    assert ready(demo.settled_xr(timeout_s=5)) == ready(later)


def test_a_replay_no_write_ends_is_an_error() -> None:
    demo = composite(REPLAY)
    with pytest.raises(TimeoutError, match="Unready resources: lbc-release"):
        demo.settled_xr(timeout_s=0.5)


def test_before_wait_ready_the_xr_is_read_as_it_is() -> None:
    kube = ScriptedKube(REPLAY, READY_AGAIN)
    composition = yaml.safe_load((ROOT / "apis" / "v2" / "composition.yaml").read_text())
    demo = Composite(ControlPlaneOf(kube), None, "selfhosted-full", composition, "team-h")  # type: ignore[arg-type]
    assert demo.settled_xr(timeout_s=0.5) == REPLAY
