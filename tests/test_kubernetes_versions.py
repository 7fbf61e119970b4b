"""Chart versions follow the cluster's Kubernetes minor, and IAM moves with the chart.

The defaults come from function/data/kubernetes-compatibility.json (function/compat.py);
the load balancer controller's policy from its chart version (function/policies.py). Played
against the in-memory Crossplane: a provider acts on a new spec a reconcile late.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from function import compat
from function.names import Partition
from function.policies import lbc_policy
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import Scenario, by_name, staged_control_plane

LBC, LBC_POLICY, CCM = "lbc-release", "lbc-policy", "ccm-release"
CERT_MANAGER, CNI, CRDS = "cert-manager-release", "cni-release", "calico-crds-release"


def _at_kubernetes(version: str, running: str | None = None) -> Any:
    """A change of the example's control plane: asked for ``version``, running ``running``."""

    def change(objs: list[dict[str, Any]]) -> None:
        for obj in objs:
            if obj["kind"] in {"KubeadmControlPlane", "AWSManagedControlPlane"}:
                obj["spec"]["version"] = version
                obj.setdefault("status", {})["version"] = running or version

    return change


def _world(name: str, kubernetes: str, **kw: Any) -> InMemoryCrossplane:
    scenario = copy.copy(by_name(name))
    scenario.mutate_required = _at_kubernetes(kubernetes)
    world = scenario.world(**kw)
    world.run(30, before=staged_control_plane(3, 8))
    assert world.xr_ready, world.xr["status"]
    return world


def _chart(world: InMemoryCrossplane, node: str) -> str:
    return world.composed[node].obj["spec"]["forProvider"]["chart"]["version"]


def _plugin(world: InMemoryCrossplane, name: str) -> dict[str, Any]:
    return next(p for p in world.xr["status"]["plugins"] if p["name"] == name)


def test_a_default_is_the_newest_version_the_add_on_documents_for_the_minor() -> None:
    """cert-manager v1.21.1 supports 1.33 to 1.36: a 1.29 cluster gets v1.18.6, a 1.32 one
    v1.20.3 (cert-manager's supported-releases page, a row each, vendored packages)."""
    for kubernetes, want in (("v1.29.4", "v1.18.6"), ("v1.32.2", "v1.20.3"), ("v1.33.0", "v1.21.1")):
        world = _world("selfhosted-full", kubernetes)
        assert _chart(world, CERT_MANAGER) == want, kubernetes
        minor = compat.minor_of(kubernetes)
        assert minor is not None
        supported = compat.supported("cert-manager", want)
        assert supported is not None and minor in supported


def test_calico_before_v3_32_carries_its_crds_in_the_operator_chart() -> None:
    """Calico documents v3.32 for 1.34 to 1.36: a 1.33 cluster gets v3.31.7, whose
    tigera-operator chart installs the CRDs itself, so no CRDs Release is composed."""
    world = _world("calico-legacy-claim", "v1.33.0")
    assert _chart(world, CNI) == "v3.31.7"
    assert CRDS not in world.composed
    world = _world("calico-legacy-claim", "v1.34.1")
    assert _chart(world, CNI) == _chart(world, CRDS) == "v3.32.1"
    # It adopts CRDs an older operator chart left, once (a cluster moving to v3.32).
    assert world.composed[CRDS].obj["spec"]["forProvider"]["takeOwnership"] is True


def test_calico_moving_to_v3_32_adopts_its_crds_before_the_operator_moves() -> None:
    """A 1.33 cluster on v3.31.7 whose control plane moves to 1.34: once it runs 1.34, the
    CRDs Release comes first (adopting the CRDs v3.31.7's chart installed), the operator
    moves only once it is ready."""
    world = _world("calico-legacy-claim", "v1.33.0")
    world.set_kubernetes_version("v1.34.1", running=True)
    created = moved = None
    for _ in range(20):
        rec = world.reconcile()
        if CRDS in rec.created:
            created = rec.step
        if moved is None and _chart(world, CNI) == "v3.32.1":
            moved = rec.step
    assert created is not None and moved is not None
    assert moved > created
    assert world.composed[CNI].deployed is not None
    assert world.composed[CNI].deployed["chart"]["version"] == "v3.32.1"


def test_the_charts_follow_the_control_plane_one_at_a_time_once_it_runs_the_new_minor() -> None:
    """1.32 to 1.33. While the control plane is asked for 1.33 and still runs 1.32, nothing
    moves: cert-manager v1.20.3 supports both, and the CCM must not be newer than the API
    server. Once it runs 1.33: cert-manager to v1.21.1 first (the webhook uses it), then the
    CCM's image to the 1.33 tag, each through the health gate."""
    world = _world("selfhosted-full", "v1.32.2")
    assert _chart(world, CERT_MANAGER) == "v1.20.3"
    ccm_values = world.composed[CCM].obj["spec"]["forProvider"]["values"]
    assert ccm_values["image"]["tag"].startswith("v1.32.")
    generations = {n: c.generation for n, c in world.composed.items()}
    world.set_kubernetes_version("v1.33.0", running=False)
    world.run(5)
    assert {n: c.generation for n, c in world.composed.items()} == generations
    world.set_kubernetes_version("v1.33.0", running=True)
    moves: dict[str, int] = {}
    for _ in range(30):
        world.reconcile()
        for node in (CERT_MANAGER, CCM):
            if node not in moves and world.composed[node].generation > generations[node]:
                moves[node] = world.step
    assert _chart(world, CERT_MANAGER) == "v1.21.1"
    assert world.composed[CCM].obj["spec"]["forProvider"]["values"]["image"]["tag"].startswith("v1.33.")
    # One at a time, what others use first; each Healthy again.
    assert moves[CERT_MANAGER] < moves[CCM], moves
    assert _plugin(world, "cloud-controller-manager")["upgrade"] == "Healthy"
    assert _plugin(world, "irsa")["upgrade"] == "Healthy"


def test_a_default_never_moves_a_release_back() -> None:
    """A Release running a newer version than the minor's default keeps it (no downgrade)."""
    world = _world("selfhosted-full", "v1.33.0")
    assert _chart(world, CERT_MANAGER) == "v1.21.1"
    # Seen as if the control plane ran 1.32 (cert-manager's default there: v1.20.3).
    world.set_kubernetes_version("v1.32.2", running=True)
    world.run(5)
    assert _chart(world, CERT_MANAGER) == "v1.21.1"


def test_a_pin_the_release_already_runs_is_not_refused() -> None:
    """Pinned v3.31.7 on 1.33, then the control plane moves to 1.36, outside its range: the
    function does not stop the XR over a version that runs (a FATAL would change nothing)."""
    scenario = copy.copy(by_name("calico-legacy-claim"))
    scenario.mutate_required = _at_kubernetes("v1.33.0")
    world = scenario.world()
    world.xr["spec"]["networking"]["calico"]["version"] = "v3.31.7"
    world.run(30, before=staged_control_plane(3, 8))
    world.set_kubernetes_version("v1.36.0", running=True)
    rec = world.reconcile()
    assert rec.fatal is None
    assert _chart(world, CNI) == "v3.31.7"


# --- the load balancer controller: IAM and chart as one unit -------------------------------


def _actions(document: str) -> set[str]:
    out = set()
    for statement in json.loads(document)["Statement"]:
        actions = statement["Action"]
        out |= {actions} if isinstance(actions, str) else set(actions)
    return out


V12 = lbc_policy(Partition("aws", "amazonaws.com"), "1.12.0")
V13 = lbc_policy(Partition("aws", "amazonaws.com"), "3.5.0")
ONLY_V13 = _actions(V13) - _actions(V12)


def _policy(world: InMemoryCrossplane) -> str:
    return world.composed[LBC_POLICY].obj["spec"]["forProvider"]["policy"]


def _lbc_at(version: str, *, missing: tuple[str, ...] = ()) -> InMemoryCrossplane:
    scenario: Scenario = copy.copy(by_name("selfhosted-full"))
    world = scenario.world(missing_charts=missing)
    world.xr["spec"]["ingress"]["awsLoadBalancerController"]["version"] = version
    world.run(30, before=staged_control_plane(3, 8))
    assert world.xr["status"]["upgrade"] == "Healthy"
    return world


def test_an_upgrade_grants_the_new_permissions_before_the_chart_moves_and_narrows_after() -> None:
    assert ONLY_V13, "v2.13's policy adds nothing to v2.12's"
    world = _lbc_at("1.12.0")
    assert _policy(world) == V12
    del world.xr["spec"]["ingress"]["awsLoadBalancerController"]["version"]  # 3.5.0
    timeline = []
    for _ in range(20):
        world.reconcile()
        timeline.append((world.step, _actions(_policy(world)) >= ONLY_V13, _chart(world, LBC)))
    expanded = next(step for step, grants, _ in timeline if grants)
    moved = next(step for step, _, chart in timeline if chart == "3.5.0")
    # The chart moves only once the policy grants v2.13's actions, and it is ready.
    assert moved > expanded, timeline
    assert world.composed[LBC_POLICY].acted_generation == world.composed[LBC_POLICY].generation
    # Healthy: the policy is v2.13's, exactly.
    assert _plugin(world, "aws-load-balancer-controller")["upgrade"] == "Healthy"
    assert _policy(world) == V13


def test_a_rollback_moves_the_chart_back_before_the_policy_narrows() -> None:
    world = _lbc_at("1.12.0", missing=("aws-load-balancer-controller@3.5.0",))
    del world.xr["spec"]["ingress"]["awsLoadBalancerController"]["version"]
    timeline = []
    for _ in range(110):
        world.reconcile()
        deployed = world.composed[LBC].deployed
        timeline.append(
            (
                world.step,
                _plugin(world, "aws-load-balancer-controller").get("upgrade"),
                _actions(_policy(world)) >= ONLY_V13,
                deployed["chart"]["version"] if deployed else None,
            )
        )
    phases = [phase for _, phase, _, _ in timeline]
    assert phases[-1] == "RolledBack", timeline[-5:]
    narrowed = next(step for step, _, grants, _ in reversed(timeline) if grants) + 1
    rolled_back = next(step for step, phase, _, _ in timeline if phase == "RollingBack")
    # While it rolls back the policy still grants v2.13's actions; it narrows only once
    # 1.12.0 runs again (RolledBack), never before.
    assert narrowed > rolled_back
    assert all(grants for step, phase, grants, _ in timeline if phase == "RollingBack")
    assert _policy(world) == V12
    assert _chart(world, LBC) == "1.12.0"


def test_an_existing_policy_keeps_the_description_it_was_created_with() -> None:
    """IAM cannot change a policy's description: a new one would make the provider replace the
    attached policy (delete, create), so the one a policy was created with stays."""
    world = _lbc_at("3.5.0")
    world.composed[LBC_POLICY].obj["spec"]["forProvider"]["description"] = "made by an older one"
    generation = world.composed[LBC_POLICY].generation
    world.run(2)
    assert world.composed[LBC_POLICY].obj["spec"]["forProvider"]["description"] == "made by an older one"
    assert world.composed[LBC_POLICY].generation == generation
