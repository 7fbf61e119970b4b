"""A fleet rollout in memory: 20 ClusterPlugins, a canary and three waves (function_tools/fleet.py).

Every cluster is an in-memory Crossplane of its own running the real function; the
ClusterPluginRollout is one more XR the same function answers. The fleet runs the AWS Load
Balancer Controller's chart 1.12.0 (the Composition's version) and the rollout moves it to
3.5.0, whose upstream IAM policy differs (v2.12.0 against v2.13.0): a cluster moves its policy
and its chart as one unit on day two, and the rollout decides only who moves when.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.following.target import FAILED, ROLLED_BACK, UPGRADING
from function.names import PARTITIONS
from function.policies import lbc_policy
from function.rollout import answer
from function.rollout.spec import OpenWave, RolloutSpec, RolloutStatus, bucket, wave_of
from function_tools.fleet import Fleet, Sample
from tests.kube_schema import xr_status_errors
from tests.scenarios import example

OLD, NEW, MISSING = "1.12.0", "3.5.0", "3.4.0"
LBC = "aws-load-balancer-controller"
AWS = PARTITIONS["aws"]
CANARY_CLUSTERS = ("team-00", "team-01")
STEP_INPUT = {
    "fleet": {"rollouts": True},
    "charts": {
        "loadBalancerController": {
            "repository": "https://aws.github.io/eks-charts",
            "name": LBC,
            "version": OLD,
        }
    },
}


def rollout(**strategy: Any) -> dict[str, Any]:
    """The fleet's ClusterPluginRollout: canary, 25% of the fleet, 50%, the rest."""
    return {
        "apiVersion": "clusterplugin.dev/v1alpha1",
        "kind": "ClusterPluginRollout",
        "metadata": {"name": "lbc-3-5"},
        "spec": {
            "selector": {"matchLabels": {"fleet": "prod"}},
            "target": {"plugins": [{"name": LBC, "version": NEW}]},
            "strategy": {
                "canary": {"matchLabels": {"ring": "canary"}},
                "waves": [{"maxClusters": "25%"}, {"maxClusters": "50%"}, {}],
                "soakSeconds": 60,
                "progressDeadlineSeconds": 600,
                **strategy,
            },
        },
    }


def _labels(namespace: str) -> dict[str, str]:
    return {"fleet": "prod", **({"ring": "canary"} if namespace in CANARY_CLUSTERS else {})}


def _missing(namespace: str, failing: str) -> list[str]:
    return [f"{LBC}@{NEW}"] if namespace == failing else []


@functools.cache
def _converged_fleet(failing: str) -> Fleet:
    """20 clusters converged on chart 1.12.0 (``failing``'s repository lacks 3.5.0)."""
    xr, required = example("selfhosted-full")
    xr["spec"].pop("storage")
    xr["spec"].pop("cloudProvider")
    fleet = Fleet(xr, required, step_input=STEP_INPUT, seconds_per_reconcile=30, helm_poll=2)
    for i in range(20):
        namespace = f"team-{i:02d}"
        fleet.add(namespace, _labels(namespace), missing_charts=_missing(namespace, failing))
    fleet.run(12)
    for key, world in fleet.worlds.items():
        assert world.xr_ready, key
        assert _chart(fleet, key) == OLD
    return fleet


def converged(failing: str = "") -> Fleet:
    """A copy of the converged fleet, for one test to play with."""
    return copy.deepcopy(_converged_fleet(failing))


def _chart(fleet: Fleet, key: str) -> str:
    return fleet.worlds[key].composed["lbc-release"].obj["spec"]["forProvider"]["chart"]["version"]


def _policy(fleet: Fleet, key: str) -> str:
    return fleet.worlds[key].composed["lbc-policy"].obj["spec"]["forProvider"]["policy"]


def _expected_waves(fleet: Fleet) -> dict[str, list[str]]:
    """Each non-canary cluster's wave by the rule, from the buckets of their uids alone."""
    ordered = sorted(
        (k for k in fleet.worlds if k.split("/")[0] not in CANARY_CLUSTERS),
        key=lambda k: bucket(fleet.worlds[k].xr["metadata"]["uid"]),
    )
    return {"wave-1": ordered[:5], "wave-2": ordered[5:15], "wave-3": ordered[15:]}


def _wave_2_member(fleet: Fleet) -> str:
    return _expected_waves(fleet)["wave-2"][3].split("/")[0]


def _first_change(history: list[Sample], key: str) -> int | None:
    return next((s.step for s in history if s.clusters.get(key, ("",))[0] == NEW), None)


def _opened_at(history: list[Sample], wave: str) -> int | None:
    order = ["canary", "wave-1", "wave-2", "wave-3"]
    return next(
        (s.step for s in history if s.wave in order and order.index(s.wave) >= order.index(wave)),
        None,
    )


def test_a_healthy_rollout_moves_canary_then_each_wave_in_its_share_to_complete() -> None:
    fleet = converged()
    fleet.apply_rollout(rollout())
    history = fleet.run_until("Complete", 60)
    assert history[-1].phase == "Complete", fleet.rollout
    status = fleet.rollout["status"]
    assert status["counts"]["admitted"] == status["counts"]["healthy"] == 20
    waves = _expected_waves(fleet)
    assert [len(waves[w]) for w in ("wave-1", "wave-2", "wave-3")] == [5, 10, 3]
    for key in fleet.worlds:
        reported = fleet.worlds[key].xr["status"]["rollout"]
        wave = (
            "canary"
            if key.split("/")[0] in CANARY_CLUSTERS
            else next(w for w, members in waves.items() if key in members)
        )
        assert (reported["wave"], reported["phase"]) == (wave, "Healthy"), key
        # Nobody moves before its wave opens.
        first, opened = _first_change(history, key), _opened_at(history, wave)
        assert first is not None and opened is not None and first >= opened, (key, first, opened)
        assert _chart(fleet, key) == NEW
        assert _policy(fleet, key) == lbc_policy(AWS, NEW), key
    # A wave opens only after the one before soaked: the canary's clusters were healthy for
    # soakSeconds (two reconciles of 30 s) before wave-1 opened.
    assert _opened_at(history, "wave-1") > (_opened_at(history, "canary") or 0) + 2
    phases = [s.phase for s in history]
    assert set(phases) == {"Progressing", "Complete"}
    # What both sides wrote, against the XRDs (a key they do not name would be pruned).
    assert xr_status_errors("ClusterPluginRollout", fleet.rollout["status"]) == []
    for world in fleet.worlds.values():
        assert xr_status_errors("ClusterPlugin", world.xr["status"]) == []
    settled = fleet.rollout["status"]["settled"]["target"]["plugins"]
    assert [(p["name"], p["version"]) for p in settled] == [(LBC, NEW)]

    # A new target the chart repository lacks, with Rollback: only the canary tries it, and
    # every cluster stays on (or returns to) the target the rollout completed, not the
    # Composition's version.
    for world in fleet.worlds.values():
        world.missing_charts = {f"{LBC}@{MISSING}"}
    bad = rollout(onFailure="Rollback")
    bad["spec"]["target"]["plugins"][0]["version"] = MISSING
    fleet.apply_rollout(bad)
    after = fleet.run_until("RolledBack", 40)
    assert after[-1].phase == "RolledBack", fleet.rollout["status"]
    after += fleet.run(8)
    tried = {k for k in fleet.worlds if any(s.clusters[k][0] == MISSING for s in after)}
    assert tried == {f"{ns}/demo" for ns in CANARY_CLUSTERS}
    # The canaries that failed stay named once they are back (they then report RolledBack).
    assert {fleet.worlds[k].xr["status"]["rollout"]["phase"] for k in tried} == {"RolledBack"}
    assert {f["name"] for f in fleet.rollout["status"]["failed"]} == tried
    for key in fleet.worlds:
        assert all(s.clusters[key][0] in (NEW, MISSING) for s in after), key
        assert _chart(fleet, key) == NEW, key


def _play_failure(on_failure: str) -> tuple[Fleet, list[Sample], str]:
    fleet = converged(failing="pending")
    failing = f"{_wave_2_member(fleet)}/demo"
    world = fleet.worlds[failing]
    world.missing_charts = {f"{LBC}@{NEW}"}
    fleet.apply_rollout(rollout(onFailure=on_failure))
    history = fleet.run_until("Halted" if on_failure == "Halt" else "RolledBack", 40)
    # Then long enough for every cluster to settle where the outcome leaves it.
    history += fleet.run(12)
    return fleet, history, failing


def test_a_failure_in_wave_2_halts_and_no_cluster_outside_the_admitted_waves_changes() -> None:
    fleet, history, failing = _play_failure("Halt")
    assert history[-1].phase == "Halted", fleet.rollout["status"]
    status = fleet.rollout["status"]
    assert status["wave"] == "wave-2"
    assert [f["name"] for f in status["failed"]] == [failing]
    assert "not found in" in status["failed"][0]["reason"]
    waves = _expected_waves(fleet)
    for key in waves["wave-3"]:
        assert all(s.clusters[key][0] == OLD for s in history), key
        assert fleet.worlds[key].xr["status"]["rollout"]["phase"] == "NotAdmitted"
        assert _policy(fleet, key) == lbc_policy(AWS, OLD)
    # The failed cluster rolled itself back (its own upgradePolicy); the rest stay on 3.5.0.
    assert _chart(fleet, failing) == OLD
    for key in [*waves["wave-1"], *(k for k in waves["wave-2"] if k != failing)]:
        assert _chart(fleet, key) == NEW, key


def test_a_failure_in_wave_2_with_rollback_brings_every_admitted_cluster_back_iam_included() -> (
    None
):
    fleet, history, failing = _play_failure("Rollback")
    assert history[-1].phase == "RolledBack", fleet.rollout["status"]
    moved = [k for k in fleet.worlds if _first_change(history, k) is not None]
    assert len(moved) >= 7  # the canary, wave-1 and some of wave-2 had moved
    for key in fleet.worlds:
        assert _chart(fleet, key) == OLD, key
        assert _policy(fleet, key) == lbc_policy(AWS, OLD), key
        plugin = next(p for p in fleet.worlds[key].xr["status"]["plugins"] if p["name"] == LBC)
        assert plugin["version"] == OLD, (key, plugin)
    for key in _expected_waves(fleet)["wave-3"]:
        assert all(s.clusters[key][0] == OLD for s in history), key


def test_added_deleted_paused_and_resumed_mid_rollout() -> None:
    fleet = converged()
    fleet.apply_rollout(rollout(paused=False))
    waves = _expected_waves(fleet)
    deleted = waves["wave-3"][0]
    fleet.run(4)
    # Paused while the canary soaks: no wave opens, whatever the health.
    paused = rollout(paused=True)
    fleet.apply_rollout(paused)
    during = fleet.run(12)
    assert {s.phase for s in during[1:]} == {"Paused"}
    assert {s.wave for s in during} == {"canary"}
    fleet.apply_rollout(rollout(paused=False))
    fleet.run(1)
    assert fleet.rollout["status"]["phase"] == "Progressing"
    # A cluster joins (its own world at the fleet's clock), another's cluster is deleted.
    added = fleet.add("team-20", _labels("team-20"))
    fleet.worlds[deleted].delete_cluster()
    history = fleet.run_until("Complete", 60)
    assert history[-1].phase == "Complete", fleet.rollout["status"]
    status = fleet.rollout["status"]
    assert status["counts"]["selected"] == 21
    assert {"name": deleted, "reason": "being deleted"} in status["skipped"]
    # The newcomer is in the wave its own bucket puts it in, by the published thresholds.
    spec = RolloutSpec.model_validate(rollout()["spec"])
    opened = [OpenWave.model_validate(w) for w in status["waves"]]
    key = "team-20/demo"
    want = wave_of(spec.strategy, opened, _labels("team-20"), bucket(added.xr["metadata"]["uid"]))
    assert added.xr["status"]["rollout"]["wave"] == want
    assert want is not None
    # The thresholds that admitted the first 20 did not move: nobody was reshuffled.
    for wave, members in waves.items():
        for member in members:
            if member != deleted:
                assert fleet.worlds[member].xr["status"]["rollout"]["wave"] == wave, member
    first, opened_at = _first_change(history, key), _opened_at(history, want)
    assert first is not None and opened_at is not None and first >= opened_at
    assert _chart(fleet, deleted) == OLD


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("target.plugins[0].name", "nginx", "is not an add-on with a chart"),
        ("target.plugins[0].version", "3.6.0", "3.6.0"),
        ("strategy.waves[0].maxClusters", "0%", "neither a count"),
        ("strategy.onFailure", "Pause", "must be one of"),
    ],
)
def test_a_bad_rollout_gets_one_fatal_naming_the_field_and_nobody_moves(
    field: str, value: str, message: str
) -> None:
    fleet = converged()
    bad = rollout()
    node: Any = bad["spec"]
    *parents, last = field.replace("[0]", ".0").split(".")
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[last] = value
    fleet.apply_rollout(bad)
    fleet.run(2)
    fatal = [r for r in fleet.rollout_responses[-1].results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1
    assert fatal[0].message.startswith(f"spec.{field}"), fatal[0].message
    assert message in fatal[0].message
    # Every cluster it selects says which rollout is refused and why, and keeps what it runs.
    for world in fleet.worlds.values():
        report = world.xr["status"]["rollout"]
        assert (report["name"], report["phase"]) == ("lbc-3-5", "Held"), report
        assert f"is refused (spec.{field}" in report["reason"], report
        assert "applied" not in report
    assert all(_chart(fleet, k) == OLD for k in fleet.worlds)


def test_a_cluster_that_failed_stays_named_after_it_rolled_back() -> None:
    """The real provider-helm's order (e2e/controlplane/test_fleet_rollout.py): the canary's own
    progress deadline fails it, the rollout rolls back, then the canary reports RolledBack."""
    spec = RolloutSpec.model_validate(rollout(onFailure="Rollback")["spec"])
    canary = answer.Member("team-00/demo", {"fleet": "prod", "ring": "canary"}, 0.5, UPGRADING, "", "")
    other = answer.Member("team-01/demo", {"fleet": "prod"}, 0.2, "", "", "")
    moving = answer.decide(spec, RolloutStatus(), [canary, other], 1000.0)
    assert (moving.phase, moving.failed) == ("Progressing", [])
    why = "aws-load-balancer-controller: chart not found"
    failed = answer.decide(spec, moving, [dataclasses.replace(canary, phase=FAILED, reason=why), other], 1010.0)
    assert failed.phase == "RolledBack"
    assert [(n.name, n.reason) for n in failed.failed] == [("team-00/demo", why)]
    back = answer.decide(spec, failed, [dataclasses.replace(canary, phase=ROLLED_BACK), other], 1020.0)
    assert back.phase == "RolledBack"
    assert [(n.name, n.reason) for n in back.failed] == [("team-00/demo", why)]
    assert back.counts.failed == 0  # the counts are what the clusters report now


def test_the_clusters_a_progress_deadline_stopped_are_named() -> None:
    spec = RolloutSpec.model_validate(rollout(onFailure="Halt")["spec"])
    canary = answer.Member("team-00/demo", {"fleet": "prod", "ring": "canary"}, 0.5, UPGRADING, "", "")
    moving = answer.decide(spec, RolloutStatus(), [canary], 1000.0)
    halted = answer.decide(spec, moving, [canary], 1000.0 + 601)
    assert halted.phase == "Halted"
    assert [(n.name, n.reason) for n in halted.failed] == [
        ("team-00/demo", "not healthy within the progress deadline (600s): Upgrading")
    ]
