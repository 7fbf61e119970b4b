"""A fleet moves only through its waves (issue 48), in memory (function_tools/fleet.py).

The fleet of tests/test_fleet.py: 20 clusters on the load balancer controller's chart 1.12.0
(the Composition's), a rollout to 3.5.0. What a careless user does to a rollout (an edit the
function refuses, a deletion, a narrower selector, a label changed, a second rollout over the
same clusters) moves no cluster's chart outside an open wave; and a cluster admitted to a wave
whose workload API is then cut holds the wave open and is never counted as done.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.clock import rfc3339
from function.following.target import FAILED, HEALTHY, UPGRADING
from function.policies import lbc_policy
from function.rollout import answer
from function.rollout.spec import OpenWave, RolloutSpec, RolloutStatus, bucket, wave_of
from function_tools.fleet import Fleet, Sample
from tests.kube_schema import xr_status_errors
from tests.test_fleet import (
    AWS,
    CANARY_CLUSTERS,
    LBC,
    NEW,
    OLD,
    STEP_INPUT,
    converged,
    rollout,
)

REFUSED = "3.6.0"  # matches the XRD's version pattern; no IAM policy is known for it


def chart(fleet: Fleet, key: str) -> str:
    """The chart version in ``key``'s Release spec."""
    return fleet.worlds[key].composed["lbc-release"].obj["spec"]["forProvider"]["chart"]["version"]


def report(fleet: Fleet, key: str) -> dict[str, Any]:
    """``key``'s status.rollout."""
    return dict(fleet.worlds[key].xr["status"].get("rollout", {}))


def charts(fleet: Fleet) -> dict[str, str]:
    return {k: chart(fleet, k) for k in fleet.worlds}


def moved(history: list[Sample], before: dict[str, str]) -> list[tuple[int, str, str]]:
    """(reconcile, cluster, chart) for every chart that differs from ``before``."""
    return [(s.step, k, c[0]) for s in history for k, c in s.clusters.items() if c[0] != before[k]]


def run_until_wave(fleet: Fleet, wave: str, steps: int = 60) -> None:
    """Reconcile until the rollout has just opened ``wave``."""
    while (fleet.rollout or {}).get("status", {}).get("wave") != wave:
        assert fleet.step < steps, fleet.rollout
        fleet.reconcile()


def refused_rollout() -> dict[str, Any]:
    bad = rollout()
    bad["spec"]["target"]["plugins"][0]["version"] = REFUSED
    return bad


def complete() -> Fleet:
    fleet = converged()
    fleet.apply_rollout(rollout())
    assert fleet.run_until("Complete", 60)[-1].phase == "Complete"
    assert set(charts(fleet).values()) == {NEW}
    return fleet


def test_a_running_rollout_edited_to_a_refused_version_freezes_every_cluster() -> None:
    fleet = converged()
    fleet.apply_rollout(rollout())
    # The canaries healthy on 3.5.0, wave-1 just opened.
    run_until_wave(fleet, "wave-1")
    before = charts(fleet)
    assert {before[f"{ns}/demo"] for ns in CANARY_CLUSTERS} == {NEW}
    status_before = fleet.rollout["status"]

    fleet.apply_rollout(refused_rollout())
    history = fleet.run(10)
    assert moved(history, before) == []
    fatal = [r for r in fleet.rollout_responses[-1].results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1 and fatal[0].message.startswith("spec.target.plugins[0].version")
    assert fleet.rollout["status"] == status_before  # a FATAL writes nothing
    for key in fleet.worlds:
        got = report(fleet, key)
        assert got["phase"] == "Held", (key, got)
        assert "rollout lbc-3-5 is refused (spec.target.plugins[0].version" in got["reason"]
        assert "nothing moves until its spec is fixed" in got["reason"]
    for ns in CANARY_CLUSTERS:
        got = report(fleet, f"{ns}/demo")
        assert got["applied"] == [{"name": LBC, "version": NEW}]
        assert got["applying"] is True
    for world in fleet.worlds.values():
        assert xr_status_errors("ClusterPlugin", world.xr["status"]) == []

    # Fixed: the rollout goes on from where it stood, to Complete.
    fleet.apply_rollout(rollout())
    assert fleet.run_until("Complete", 60)[-1].phase == "Complete"
    assert set(charts(fleet).values()) == {NEW}


def test_after_complete_a_refused_edit_moves_no_cluster() -> None:
    fleet = complete()
    fleet.apply_rollout(refused_rollout())
    history = fleet.run(10)
    assert moved(history, charts(fleet)) == []
    assert {report(fleet, k)["phase"] for k in fleet.worlds} == {"Held"}
    assert fleet.rollout["status"]["phase"] == "Complete"


def test_a_complete_rollout_deleted_moves_no_cluster_until_the_composition_names_it() -> None:
    fleet = complete()
    fleet.delete_rollout("lbc-3-5")
    history = fleet.run(10)
    assert moved(history, dict.fromkeys(fleet.worlds, NEW)) == []
    # Said once, as an event, when it starts keeping what the rollout gave it.
    events = [
        (r.severity, r.reason)
        for rec in fleet.worlds["team-05/demo"].history[-10:]
        if rec.response is not None
        for r in rec.response.results
    ]
    assert events.count((fnv1.SEVERITY_WARNING, "RolloutHeld")) == 1, events
    for key in fleet.worlds:
        got = report(fleet, key)
        assert got["phase"] == "Held", got
        assert got["reason"].startswith("rollout lbc-3-5 no longer selects this ClusterPlugin")
        assert f"it keeps {LBC} {NEW}" in got["reason"]
        assert fleet.worlds[key].xr["status"]["conditions"][0]["status"] == "True"
    # The platform team puts the version into the Composition: the hold is over, nothing moves.
    composition = {
        **STEP_INPUT,
        "charts": {
            "loadBalancerController": {
                **STEP_INPUT["charts"]["loadBalancerController"],
                "version": NEW,
            }
        },
    }
    for world in fleet.worlds.values():
        world.step_input = composition
    history = fleet.run(4)
    assert moved(history, dict.fromkeys(fleet.worlds, NEW)) == []
    for key, world in fleet.worlds.items():
        assert "rollout" not in world.xr["status"], key
        reasons = [r.reason for rec in world.history[-4:] if rec.response for r in rec.response.results]
        assert reasons.count("RolloutReleased") == 1, (key, reasons)
        lbc_policy_now = world.composed["lbc-policy"].obj["spec"]["forProvider"]["policy"]
        assert lbc_policy_now == lbc_policy(AWS, NEW)


def test_a_rollout_deleted_under_way_moves_no_admitted_cluster() -> None:
    fleet = converged()
    fleet.apply_rollout(rollout())
    run_until_wave(fleet, "wave-2")
    fleet.run(1)  # wave-2's clusters start
    before = charts(fleet)
    started = {k for k in fleet.worlds if report(fleet, k).get("phase") in ("Upgrading", "Healthy")}
    assert 5 < len(started) < 20, started
    fleet.delete_rollout("lbc-3-5")
    history = fleet.run(12)
    # A cluster that had started its move finishes it (the target is what it was given: its
    # IAM, then its chart, may still be on their way); none goes back, none starts.
    assert {(k, v) for _, k, v in moved(history, before)} <= {(k, NEW) for k in started}
    for key in fleet.worlds:
        got = report(fleet, key)
        if key in started:
            assert got["phase"] == "Held", (key, got)
            assert chart(fleet, key) == NEW
        else:
            assert got == {}, (key, got)
            assert chart(fleet, key) == OLD


def test_a_narrower_selector_or_a_changed_label_moves_no_cluster() -> None:
    fleet = complete()
    leaving = sorted(k for k in fleet.worlds if k.split("/")[0] not in CANARY_CLUSTERS)[:3]
    for key, world in fleet.worlds.items():
        if key not in leaving:
            world.xr["metadata"]["labels"]["keep"] = "yes"
    narrower = rollout()
    narrower["spec"]["selector"]["matchLabels"]["keep"] = "yes"
    fleet.apply_rollout(narrower)
    # And one more cluster's labels change so that it leaves.
    relabelled = next(k for k in sorted(fleet.worlds) if k not in leaving and "00" not in k)
    del fleet.worlds[relabelled].xr["metadata"]["labels"]["fleet"]
    history = fleet.run(10)
    assert moved(history, dict.fromkeys(fleet.worlds, NEW)) == []
    for key in [*leaving, relabelled]:
        assert report(fleet, key)["phase"] == "Held", key
    assert fleet.rollout["status"]["counts"]["selected"] == 16
    assert fleet.rollout["status"]["phase"] == "Complete"


def test_two_rollouts_over_one_cluster_name_the_conflict_on_all_three() -> None:
    fleet = converged()
    fleet.apply_rollout(rollout())
    other = rollout()
    other["metadata"]["name"] = "z-canaries"
    other["spec"]["selector"] = {"matchLabels": {"ring": "canary"}}
    other["spec"]["strategy"] = {"waves": [{}]}
    fleet.apply_rollout(other)
    fleet.run(3)
    canaries = [f"{ns}/demo" for ns in CANARY_CLUSTERS]
    for key in canaries:
        got = report(fleet, key)
        assert (got["name"], got["conflicts"]) == ("lbc-3-5", ["z-canaries"]), got
    z = fleet.rollouts["z-canaries"]["status"]
    assert {(n["name"], n["reason"]) for n in z["skipped"]} == {
        (k, "follows rollout lbc-3-5, which selects it too (the first by name is followed)")
        for k in canaries
    }
    main = fleet.rollout["status"]
    assert {n["name"] for n in main["conflicts"]} == set(canaries)
    assert all("rollout z-canaries" in n["reason"] for n in main["conflicts"])
    assert xr_status_errors("ClusterPluginRollout", z) == []
    assert xr_status_errors("ClusterPluginRollout", main) == []


def test_an_admitted_cluster_cut_off_holds_its_wave_and_halts_it_never_complete() -> None:
    fleet = converged()
    # The progress deadline is 600 s: 20 reconciles of 30 s.
    fleet.apply_rollout(rollout(maxFailures=0, onFailure="Halt"))
    run_until_wave(fleet, "wave-1")
    spec = RolloutSpec.model_validate(fleet.rollout["spec"])
    waves = [OpenWave.model_validate(w) for w in fleet.rollout["status"]["waves"]]
    members = [
        k
        for k, world in sorted(fleet.worlds.items())
        if wave_of(
            spec.strategy,
            waves,
            world.xr["metadata"]["labels"],
            bucket(world.xr["metadata"]["uid"]),
        )
        == "wave-1"
    ]
    cut = members[0]
    fleet.worlds[cut].api_cut = True
    before = charts(fleet)
    history = fleet.run(24)
    assert "Complete" not in {s.phase for s in history}
    assert history[-1].phase == "Halted", fleet.rollout["status"]
    got = report(fleet, cut)
    assert got["phase"] != "Skipped", got
    assert got["wave"] == "wave-1"
    assert cut in {n["name"] for n in fleet.rollout["status"]["failed"]}
    assert cut not in {n["name"] for n in fleet.rollout["status"]["skipped"]}
    # The API comes back: the cluster finishes its own upgrade; the rollout stays Halted and
    # nobody outside wave-1 and the canary moved; nothing went back to 1.12.0.
    fleet.worlds[cut].api_cut = False
    after = fleet.run(10)
    assert {s.phase for s in after} == {"Halted"}
    for key in fleet.worlds:
        versions = [s.clusters[key][0] for s in history + after]
        if before[key] == NEW:
            assert set(versions) == {NEW}, key
        if key not in members and key.split("/")[0] not in CANARY_CLUSTERS:
            assert set(versions) == {OLD}, key


def test_complete_is_never_taken_back_for_its_target() -> None:
    spec = RolloutSpec.model_validate(rollout(soakSeconds=0)["spec"])
    one = answer.Member("team-00/demo", {"fleet": "prod", "ring": "canary"}, 0.5, HEALTHY, "", "x")
    status = RolloutStatus()
    for t in range(5):
        status = answer.decide(
            spec, status, [dataclasses.replace(one, healthy_since=rfc3339(900.0))], 1000.0 + t
        )
    assert status.phase == "Complete"
    later = answer.decide(
        spec, status, [dataclasses.replace(one, phase=FAILED, reason="x")], 2000.0
    )
    assert later.phase == "Complete"
    assert later.counts.failed == 1


def test_a_cluster_late_within_max_failures_lets_the_waves_go_on_but_not_complete() -> None:
    spec = RolloutSpec.model_validate(
        rollout(soakSeconds=0, maxFailures=1, progressDeadlineSeconds=60)["spec"]
    )
    since = rfc3339(900.0)
    stuck = answer.Member(
        "team-00/demo", {"fleet": "prod", "ring": "canary"}, 0.5, UPGRADING, "unreachable: x", ""
    )
    fine = answer.Member(
        "team-01/demo", {"fleet": "prod", "ring": "canary"}, 0.4, HEALTHY, "", since
    )
    rest = answer.Member("team-02/demo", {"fleet": "prod"}, 0.1, HEALTHY, "", since)
    status = answer.decide(spec, RolloutStatus(), [stuck, fine, rest], 1000.0)
    assert (status.phase, status.wave) == ("Progressing", "canary")
    status = answer.decide(spec, status, [stuck, fine, rest], 1000.0 + 61)
    assert (status.phase, status.wave) == ("Progressing", "wave-1"), status.message
    assert [n.name for n in status.failed] == ["team-00/demo"]
    for t in range(2, 6):
        status = answer.decide(spec, status, [stuck, fine, rest], 1000.0 + 61 * t)
    assert status.phase == "Progressing"
    assert "not complete while these are not healthy" in status.message
    assert status.counts.failed == 1
    # Once it is healthy at the target, the rollout completes.
    well = dataclasses.replace(stuck, phase=HEALTHY, reason="", healthy_since=since)
    status = answer.decide(spec, status, [well, fine, rest], 2000.0)
    assert status.phase == "Complete", status.message
    assert status.failed == []
