"""A Release provider-helm has upgraded counts as ready before provider-helm polls it again.

provider-helm (crossplane-runtime's managed reconciler) writes, after a successful helm
upgrade, Synced=True at the generation it acted on and the deployed release, but keeps the
Ready=False its Observe found before upgrading until its next poll, 10 minutes by default.
The function upgrades the VPC CNI's Release once the pod identity webhook is ready; without
this rule the XR stayed not Ready until that poll. The real thing is shown by
e2e/controlplane/test_helm_kwok.py (provider-helm v1.3.0 at its default poll); the shapes
below are what it wrote there.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import observed, upgrade
from function.graph import Readiness
from function.observed import Observed
from tests.scenarios import by_name, staged_control_plane

# cni-release as provider-helm v1.3.0 left it after the upgrade in the e2e run: its
# conditions and generation as printed there, the revision and state as asserted there.
UPGRADED: dict[str, Any] = {
    "apiVersion": "helm.m.crossplane.io/v1beta1",
    "kind": "Release",
    "metadata": {"name": "demo-cni", "namespace": "team-h", "generation": 6},
    "status": {
        "atProvider": {"revision": 2, "state": "deployed"},
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "Unavailable", "lastTransitionTime": "2026-11-24T18:56:38Z"},
            {
                "type": "Synced",
                "status": "True",
                "reason": "ReconcileSuccess",
                "observedGeneration": 6,
                "lastTransitionTime": "2026-11-24T18:56:40Z",
            },
        ],
    },
}


def _ready(obj: dict[str, Any], readiness: Readiness = Readiness.RELEASE) -> bool:
    resources = {"cni-release": fnv1.Resource(resource=resource.dict_to_struct(obj))}
    return Observed(resources).ready("cni-release", readiness)


def _changed(**at: Any) -> dict[str, Any]:
    obj = copy.deepcopy(UPGRADED)
    status = obj["status"]
    for path, value in at.items():
        if path == "generation":
            obj["metadata"]["generation"] = value
        elif path == "state":
            status["atProvider"]["state"] = value
        else:
            synced = status["conditions"][1]
            if value is None:
                synced.pop(path)
            else:
                synced[path] = value
    return obj


def test_an_upgraded_release_is_ready() -> None:
    assert _ready(UPGRADED)


@pytest.mark.parametrize(
    ("why", "changed"),
    [
        # The function changed the spec again since: provider-helm has not acted on it yet.
        ("synced at an older generation", _changed(generation=7)),
        ("the upgrade failed", _changed(status="False", reason="ReconcileError")),
        ("helm left the release failed", _changed(state="failed")),
        ("another helm operation is under way", _changed(state="pending-upgrade")),
        # provider-helm before crossplane-runtime v2 wrote no observedGeneration.
        ("no observedGeneration", _changed(observedGeneration=None)),
    ],
)
def test_not_an_upgraded_release(why: str, changed: dict[str, Any]) -> None:
    assert not _ready(changed), why


def test_only_a_release_is_read_so() -> None:
    """Another kind's Ready=False stays not ready, whatever else its status says."""
    assert not _ready(UPGRADED, Readiness.CONDITION)


def test_ready_true_for_the_current_generation_is_ready() -> None:
    obj = _changed(state="failed")
    obj["status"]["conditions"][0].update(status="True", reason="Available")
    assert _ready(obj)
    assert _ready(obj, Readiness.CONDITION)


@pytest.mark.parametrize("readiness", [Readiness.RELEASE, Readiness.CONDITION])
def test_a_stale_ready_true_is_not_ready(readiness: Readiness) -> None:
    """Ready=True reported for generation 6 says nothing of the spec of generation 7.

    The function changed the spec (an upgrade); until the provider has acted on it, its
    Ready=True is the old revision's, and nothing gated on it may go ahead (argo-cd#29410).
    """
    obj = _changed(generation=7)
    obj["status"]["conditions"][0].update(status="True", reason="Available")
    assert not _ready(obj, readiness)


def test_ready_true_with_another_chart_version_deployed_is_not_ready() -> None:
    obj = copy.deepcopy(UPGRADED)
    obj["status"]["conditions"][0].update(status="True", reason="Available")
    obj["spec"] = {"forProvider": {"chart": {"version": "1.22.5"}}}
    obj["status"]["atProvider"]["version"] = "1.22.4"
    assert not _ready(obj)
    obj["status"]["atProvider"]["version"] = "1.22.5"
    assert _ready(obj)


def test_without_a_generation_or_observed_generation_ready_true_is_taken_as_it_is() -> None:
    """Nothing to compare: a provider built before crossplane-runtime stamped conditions."""
    obj = _changed(observedGeneration=None)
    obj["status"]["conditions"][0].update(status="True", reason="Available")
    assert _ready(obj, Readiness.CONDITION)
    del obj["metadata"]["generation"]
    assert _ready(obj, Readiness.CONDITION)


def test_ready_true_with_synced_false_is_not_ready() -> None:
    """The provider failed to apply the current spec: what runs is not what was asked."""
    obj = _changed(status="False", reason="ReconcileError")
    obj["status"]["conditions"][0].update(status="True", reason="Available")
    assert not _ready(obj, Readiness.CONDITION)


def _play(steps: int = 40) -> Any:
    world = by_name("selfhosted-full").world(helm_poll=1000)
    world.run(steps, before=staged_control_plane())
    return world


def test_the_xr_is_ready_while_provider_helm_has_not_polled_the_upgraded_cni() -> None:
    world = _play()
    cni = world.composed["cni-release"]
    # The function restarted aws-node for IRSA once the webhook was ready (an upgrade) ...
    assert cni.upgraded_at is not None
    observed = world._observed_object(cni)  # what the next request carries
    assert observed["status"]["conditions"][0] == {"type": "Ready", "status": "False", "reason": "Unavailable"}
    # ... and the XR did not wait for provider-helm's next poll.
    assert world.xr_ready
    first_ready = next(r.step for r in world.history if r.xr_ready)
    assert first_ready <= cni.upgraded_at + 3, (first_ready, cni.upgraded_at)
    assert {"ebs-release", "efs-release", "lbc-release"} <= set(world.composed)


def test_without_the_rule_the_xr_waits_for_the_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """The InMemoryCrossplane models the poll: read as Ready=True only, the same play never gets Ready."""
    monkeypatch.setattr(observed, "upgraded_release", lambda _obj: False)
    world = _play()
    assert world.composed["cni-release"].upgraded_at is not None
    assert not world.xr_ready


def _play_cut_install(steps: int = 40) -> Any:
    world = by_name("selfhosted-full").world(helm_poll=1000, interrupted_installs={"cni-release"})
    world.run(steps, before=staged_control_plane())
    return world


def _plugin_messages(world: Any, plugin: str) -> list[str]:
    out = []
    for rec in world.history:
        status = resource.struct_to_dict(rec.response.desired.composite.resource).get("status", {})
        out += [p.get("message", "") for p in status.get("plugins", []) if p["name"] == plugin]
    return out


def test_an_install_cut_off_mid_way_is_installed_again_at_once() -> None:
    """The workload cluster's API lost in the middle of the CNI's helm install (seen on the real
    provider-helm in e2e/faults/test_helm_faults.py): helm leaves the release failed, and
    provider-helm uninstalls it to retry, then installs again only at its next poll. The
    function writes provider-helm's count of tries on the Release: a change of desired state,
    which provider-helm acts on at once."""
    world = _play_cut_install()
    cni = world.composed["cni-release"]
    assert cni.deployed is not None and cni.failed_tries == 0, cni
    assert cni.obj["metadata"]["annotations"][upgrade.INSTALL_TRY_ANNOTATION] == "1"
    assert world.xr_ready
    assert any("helm's install failed (1x); provider-helm installs it again" in m for m in _plugin_messages(world, "vpc-cni"))


def test_without_the_nudge_the_cut_off_install_waits_for_provider_helms_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upgrade, "_install_tries", lambda _obj, _annotations, **_kw: "")
    world = _play_cut_install()
    cni = world.composed["cni-release"]
    assert cni.deployed is None and cni.retry_from is not None, cni
    assert not world.xr_ready


def test_a_failed_upgrade_does_not_move_the_install_try() -> None:
    """provider-helm counts a rolled-back upgrade in status.failed too; day two answers a failed
    upgrade itself, so the count of tries is written only while a Release is being installed."""
    installing = resource.dict_to_struct(
        {"metadata": {"annotations": {}}, "status": {"failed": 2, "atProvider": {"state": "failed"}}}
    )
    assert upgrade._read(installing, runs_spec=False, running=None).install_tries == "2"
    record = upgrade.Record(upgrade.Phase.UPGRADING, "2026-01-01T00:00:00Z", "1.2.3", "t").annotation
    upgrading = resource.dict_to_struct(
        {
            "metadata": {"annotations": {upgrade.RECORD_ANNOTATION: record, upgrade.INSTALL_TRY_ANNOTATION: "1"}},
            "status": {"failed": 2, "atProvider": {"state": "failed"}},
        }
    )
    assert upgrade._read(upgrading, runs_spec=False, running=None).install_tries == "1"  # carried, not moved
