"""Day two on one cluster (function/upgrade.py), played against the in-memory Crossplane.

The world's providers act on a changed spec one reconcile late, their old Ready=True standing
until then (InMemoryCrossplane.provider_delay), and provider-helm fails a chart version the
repository lacks (``missing_charts``) with its own message; each reconcile is ten seconds of
the world's clock, which the function is called with.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from function import observed, structs, upgrade
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import by_name, staged_control_plane

CNI = "cni-release"
EBS = "ebs-release"
OLD, NEW, MISSING = "1.22.4", "1.21.1", "1.99.0"


def _converged(
    name: str = "selfhosted-full", steps: int = 30, **kw: Any
) -> tuple[InMemoryCrossplane, Callable[[InMemoryCrossplane], None]]:
    world = by_name(name).world(**kw)
    before = staged_control_plane(3, 8)
    world.run(steps, before=before)
    assert world.xr_ready
    assert world.xr["status"]["upgrade"] == "Healthy", world.xr["status"]
    return world, before


def _set(world: InMemoryCrossplane, path: str, value: Any) -> None:
    node = world.xr
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


def _plugin(world: InMemoryCrossplane, name: str) -> dict[str, Any]:
    return next(p for p in world.xr["status"]["plugins"] if p["name"] == name)


def _chart(world: InMemoryCrossplane, node: str) -> str:
    return world.composed[node].obj["spec"]["forProvider"]["chart"]["version"]


def _deployed(world: InMemoryCrossplane, node: str) -> str:
    deployed = world.composed[node].deployed
    assert deployed is not None
    return deployed["chart"]["version"]


def _record(world: InMemoryCrossplane, node: str) -> upgrade.Record:
    text = world.composed[node].obj["metadata"]["annotations"][upgrade.RECORD_ANNOTATION]
    record = upgrade.parse_record(text)
    assert record is not None
    return record


def _phases(world: InMemoryCrossplane, plugin: str, steps: int) -> list[tuple[int, str, str]]:
    """(reconcile, upgrade phase, chart in the spec) of ``plugin`` over ``steps`` reconciles."""
    out = []
    for _ in range(steps):
        world.reconcile()
        entry = _plugin(world, plugin)
        out.append((world.step, entry.get("upgrade", ""), _chart(world, CNI)))
    return out


def test_a_healthy_upgrade_runs_then_soaks_then_is_healthy() -> None:
    world, _ = _converged()
    assert _plugin(world, "vpc-cni")["lastHealthyVersion"] == OLD
    _set(world, "spec.networking.amazonVPC.version", NEW)
    start = world.step + 1
    seen = _phases(world, "vpc-cni", 12)
    # Written at once (nothing else moves), deployed by provider-helm a reconcile later.
    assert seen[0] == (start, "Upgrading", NEW)
    assert _deployed(world, CNI) == NEW
    phases = [phase for _, phase, _ in seen]
    healthy = phases.index("Healthy")
    # The soak: 60 s of the world's clock (10 s a reconcile) after it first ran the new spec.
    running = start + 2  # written at start, acted on at start+1, observed so at start+2
    assert seen[healthy][0] == running + 6, seen
    entry = _plugin(world, "vpc-cni")
    assert entry["version"] == NEW and entry["lastHealthyVersion"] == NEW
    assert "targetVersion" not in entry
    assert world.xr["status"]["upgrade"] == "Healthy"
    # The record lives on the Release: the last healthy spec is no longer kept apart.
    annotations = world.composed[CNI].obj["metadata"]["annotations"]
    assert upgrade.LAST_HEALTHY_ANNOTATION not in annotations
    assert _record(world, CNI).phase is upgrade.Phase.HEALTHY


def test_while_it_soaks_the_status_says_so_and_the_function_calls_back_by_its_end() -> None:
    world, _ = _converged()
    _set(world, "spec.networking.amazonVPC.version", NEW)
    world.run(3)
    rec = world.reconcile()
    entry = _plugin(world, "vpc-cni")
    assert entry["upgrade"] == "Upgrading" and entry["targetVersion"] == NEW
    assert entry["lastHealthyVersion"] == OLD
    assert "soaking for 60s" in entry["message"]
    assert rec.ttl <= 30
    charts = next(c for c in world.xr["status"]["conditions"] if c["type"] == "ChartsHealthy")
    assert (charts["status"], charts["reason"]) == ("False", "Upgrading")


def _adding_ebs_while_the_cni_moves() -> tuple[InMemoryCrossplane, int]:
    """Converged with the VPC CNI alone, then in one change: a new CNI version and EBS.

    IRSA Disabled: EBS has no role to wait for, so only the CNI (and the CCM, ready) gates
    its Release, which the function emits as soon as it may.
    """

    def cni_only(xr: dict[str, Any]) -> None:
        xr["spec"]["storage"] = {}
        xr["spec"]["ingress"] = {}
        xr["spec"]["irsa"] = {"mode": "Disabled"}

    scenario = copy.copy(by_name("selfhosted-full"))
    scenario.mutate_xr = cni_only
    world = scenario.world()
    world.run(30, before=staged_control_plane(3, 8))
    assert world.xr_ready and EBS not in world.composed
    _set(world, "spec.networking.amazonVPC.version", NEW)
    _set(world, "spec.storage.ebs", {})
    changed = world.step + 1
    return world, changed


def _cni_deployed_when_ebs_appeared(world: InMemoryCrossplane) -> str:
    """The CNI chart helm ran when the function created EBS's Release (what it observed)."""
    for _ in range(20):
        observed = _deployed(world, CNI)  # the providers act after the function's call
        if EBS in world.reconcile().created:
            return observed
    raise AssertionError("EBS was never created")


def test_an_add_on_gated_on_the_cni_waits_for_its_new_revision() -> None:
    world, _ = _adding_ebs_while_the_cni_moves()
    assert _cni_deployed_when_ebs_appeared(world) == NEW


def test_trusting_a_stale_ready_would_create_it_on_the_old_revision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same play, read as before day two (Ready=True whatever its generation and chart)."""
    monkeypatch.setattr(
        observed,
        "release_ready",
        lambda obj, *_: structs.condition_status(obj, "Ready") == "True"
        or observed.upgraded_release(obj),
    )
    world, _ = _adding_ebs_while_the_cni_moves()
    assert _cni_deployed_when_ebs_appeared(world) == OLD


def _fail_cni(world: InMemoryCrossplane) -> int:
    world.missing_charts.add(f"aws-vpc-cni@{MISSING}")
    _set(world, "spec.networking.amazonVPC.version", MISSING)
    return world.step + 1


def test_a_failed_upgrade_rolls_back_with_helms_message_and_is_not_tried_again() -> None:
    world, _ = _converged()
    before = copy.deepcopy(world.composed[CNI].obj["spec"]["forProvider"])
    start = _fail_cni(world)
    # The default progress deadline, 900 s: 90 reconciles of the world's clock.
    timeline = _phases(world, "vpc-cni", 100)
    phases = [p for _, p, _ in timeline]
    assert phases[0] == "Upgrading"
    assert "RollingBack" in phases and phases[-1] == "RolledBack", timeline
    failed_at = timeline[phases.index("RollingBack")][0]
    assert failed_at - start == 90
    # What provider-helm said is in the status, and the way forward.
    entry = _plugin(world, "vpc-cni")
    assert f'chart "aws-vpc-cni" version "{MISSING}" not found' in entry["message"]
    assert upgrade.RETRY_ANNOTATION in entry["message"]
    assert entry["version"] == OLD and entry["lastHealthyVersion"] == OLD
    assert world.xr["status"]["upgrade"] == "RolledBack"
    # The Release is back to the spec that ran healthy, chart and values.
    assert world.composed[CNI].obj["spec"]["forProvider"] == before
    # No loop: it stays there while the spec still asks for the failed version.
    generation = world.composed[CNI].generation
    world.run(30)
    assert world.composed[CNI].generation == generation
    assert _plugin(world, "vpc-cni")["upgrade"] == "RolledBack"
    charts = next(c for c in world.xr["status"]["conditions"] if c["type"] == "ChartsHealthy")
    assert (charts["status"], charts["reason"]) == ("False", "RolledBack")


def test_a_rolled_back_version_is_tried_again_on_a_retry_or_a_new_spec() -> None:
    world, _ = _converged()
    _fail_cni(world)
    world.run(100)
    assert _plugin(world, "vpc-cni")["upgrade"] == "RolledBack"
    # A person fixed the repository and asks for a retry of the same version.
    world.missing_charts.clear()
    world.xr["metadata"].setdefault("annotations", {})[upgrade.RETRY_ANNOTATION] = "1"
    world.reconcile()
    assert _plugin(world, "vpc-cni")["upgrade"] == "Upgrading"
    assert _chart(world, CNI) == MISSING
    world.run(12)
    assert _plugin(world, "vpc-cni")["upgrade"] == "Healthy"
    assert _deployed(world, CNI) == MISSING


def test_a_new_version_asked_for_while_an_upgrade_fails_goes_there_at_once() -> None:
    """No need to sit out the deadline of a version that cannot be had: the new ask wins."""
    world, _ = _converged()
    _fail_cni(world)
    world.run(5)
    assert _plugin(world, "vpc-cni")["upgrade"] == "Upgrading"
    _set(world, "spec.networking.amazonVPC.version", NEW)
    world.reconcile()
    entry = _plugin(world, "vpc-cni")
    assert (entry["upgrade"], entry["targetVersion"]) == ("Upgrading", NEW)
    # The version to come back to stays the one that ran healthy, not the failed ask.
    assert entry["lastHealthyVersion"] == OLD
    world.run(12)
    entry = _plugin(world, "vpc-cni")
    assert (entry["upgrade"], entry["version"]) == ("Healthy", NEW)
    assert world.composed[CNI].revision == 3  # install, IRSA restart, NEW: MISSING never ran


def test_a_new_version_after_a_rollback_moves_again() -> None:
    world, _ = _converged()
    _fail_cni(world)
    world.run(100)
    _set(world, "spec.networking.amazonVPC.version", NEW)
    world.run(12)
    entry = _plugin(world, "vpc-cni")
    assert (entry["upgrade"], entry["version"]) == ("Healthy", NEW)


def test_asking_again_for_what_was_rolled_back_to_is_healthy() -> None:
    world, _ = _converged()
    _fail_cni(world)
    world.run(100)
    assert _plugin(world, "vpc-cni")["upgrade"] == "RolledBack"
    generation = world.composed[CNI].generation
    _set(world, "spec.networking.amazonVPC.version", None)  # back to the default it runs
    world.run(2)
    entry = _plugin(world, "vpc-cni")
    assert (entry["upgrade"], entry["version"]) == ("Healthy", OLD)
    assert world.composed[CNI].generation == generation  # nothing to write
    assert world.xr["status"]["upgrade"] == "Healthy"


def test_hold_keeps_the_failed_version_and_moves_no_other_chart() -> None:
    world, _ = _converged()
    _set(world, "spec.upgradePolicy", {"onFailure": "Hold", "progressDeadlineSeconds": 60})
    _fail_cni(world)
    world.run(8)
    entry = _plugin(world, "vpc-cni")
    assert entry["upgrade"] == "Failed", entry
    assert _chart(world, CNI) == MISSING  # left in place
    assert "onFailure: Hold" in entry["message"]
    # Another chart's change waits while the failed one is held.
    _set(world, "spec.storage.ebs.version", "2.63.0")
    ebs_generation = world.composed[EBS].generation
    world.run(5)
    assert world.composed[EBS].generation == ebs_generation
    assert "held" in _plugin(world, "ebs-csi")["message"]
    assert world.xr["status"]["upgrade"] == "Failed"
    # A person acts: a version that exists. The CNI moves, then EBS.
    _set(world, "spec.networking.amazonVPC.version", NEW)
    world.run(25)
    assert _plugin(world, "vpc-cni")["upgrade"] == "Healthy"
    assert _deployed(world, CNI) == NEW
    assert _deployed(world, EBS) == "2.63.0"


def test_charts_move_one_at_a_time_what_others_use_first() -> None:
    world, _ = _converged()
    _set(world, "spec.storage.ebs.version", "2.63.0")
    _set(world, "spec.networking.amazonVPC.version", NEW)
    world.reconcile()
    # The CNI goes first although EBS comes first in no order of the spec: EBS uses it.
    assert _chart(world, CNI) == NEW
    assert world.composed[EBS].obj["spec"]["forProvider"]["chart"]["version"] != "2.63.0"
    assert "one at a time" in _plugin(world, "ebs-csi")["message"]
    moved = []
    for _ in range(25):
        world.reconcile()
        if not moved and world.composed[EBS].obj["spec"]["forProvider"]["chart"]["version"] == "2.63.0":
            moved.append(world.step)
            # ... once the CNI's upgrade is over, soak included.
            assert _record(world, CNI).phase is upgrade.Phase.HEALTHY
    assert moved


def test_the_record_survives_a_lost_xr_status() -> None:
    """The memory is on the Release (its annotations), written with the spec it belongs to."""
    world, _ = _converged()
    _fail_cni(world)
    world.run(95)
    assert _plugin(world, "vpc-cni")["upgrade"] in {"RollingBack", "RolledBack"}
    world.xr["status"] = {}
    world.run(10)
    entry = _plugin(world, "vpc-cni")
    assert entry["upgrade"] == "RolledBack" and _chart(world, CNI) == OLD


def test_no_chart_moves_while_the_cluster_is_being_deleted() -> None:
    world, _ = _converged()
    world.delete_cluster()
    _set(world, "spec.networking.amazonVPC.version", NEW)
    world.run(3)
    assert _chart(world, CNI) == OLD
    assert "being deleted" in _plugin(world, "vpc-cni")["message"]


def test_wait_true_releases_write_waittimeout_as_provider_helm_keeps_it() -> None:
    """provider-helm stores a metav1.Duration: "10m" comes back "10m0s" (a spec write each time)."""
    world, _ = _converged()
    webhook = world.composed["pod-identity-webhook-release"].obj["spec"]["forProvider"]
    assert webhook["wait"] is True and webhook["waitTimeout"] == "10m0s"


def test_record_json_round_trips() -> None:
    record = upgrade.Record(
        upgrade.Phase.ROLLED_BACK,
        "2026-01-01T00:00:00Z",
        OLD,
        "abc",
        failed=upgrade.Failure(MISSING, "def", "not found", "1"),
    )
    assert upgrade.parse_record(record.annotation) == record
    assert upgrade.parse_record(json.dumps({"phase": "nonsense"})) is None
    assert upgrade.parse_record("not json") is None


def test_what_provider_helm_adds_to_a_release_spec_is_no_change() -> None:
    """The real provider-helm gives each Release's chart an empty pullSecretRef and the API
    server a maxHistory: neither is a new spec to move to (found on the real provider-helm,
    where every chart waited for another to move, for ever)."""
    world, _ = _converged()
    generations = {}
    for name, c in world.composed.items():
        fp = c.obj.get("spec", {}).get("forProvider", {})
        if c.obj["kind"] == "Release":
            fp["chart"]["pullSecretRef"] = {}
            fp["maxHistory"] = 10
            generations[name] = c.generation
    assert len(generations) >= 6
    world.run(3)
    assert world.xr["status"]["upgrade"] == "Healthy", world.xr["status"]
    waiting = [p for p in world.xr["status"]["plugins"] if "waits" in p.get("message", "")]
    assert waiting == []
    ready = next(c for c in world.xr["status"]["conditions"] if c["type"] == "ChartsHealthy")
    assert ready["status"] == "True", ready
    assert {n: world.composed[n].generation for n in generations} == generations
