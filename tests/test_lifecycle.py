"""Play Crossplane over many reconciles: the order of docs/architecture.md, "The resource graph", no surprise deletions."""

from __future__ import annotations

import random

import pytest

from function import structs
from function.plan import USAGE_ENDS
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import (
    SCENARIO_IDS,
    SCENARIOS,
    Scenario,
    by_name,
    staged_control_plane,
    usage_order_problems,
)


def appearances(world: InMemoryCrossplane, steps: int, before=None) -> dict[str, int]:
    first: dict[str, int] = {}
    for rec in world.run(steps, before=before):
        assert rec.fatal is None, rec.fatal
        for name in rec.created:
            first.setdefault(name, rec.step)
    return first


def ready_at(world: InMemoryCrossplane, steps: int, before=None) -> tuple[dict[str, int], dict[str, int]]:
    """(first step each node was desired, first step each node was observed ready)."""
    first: dict[str, int] = {}
    ready: dict[str, int] = {}
    for rec in world.run(steps, before=before):
        assert rec.fatal is None, rec.fatal
        for name in rec.created:
            first.setdefault(name, rec.step)
        for name, c in world.composed.items():
            if c.ready:
                ready.setdefault(name, rec.step + 1)  # observed ready from the next reconcile
    return first, ready


def test_selfhosted_order_follows_the_design() -> None:
    world = by_name("selfhosted-full").world()
    cp_events: dict[str, int] = {}

    def before(w: InMemoryCrossplane) -> None:
        staged_control_plane(initialized_at=4, available_at=12)(w)
        if w.step + 1 == 4:
            cp_events["initialized"] = 4
        if w.step + 1 == 12:
            cp_events["available"] = 12

    first, ready = ready_at(world, 30, before)
    assert world.xr_ready
    assert not world.deletions

    def after(node: str, *deps: str) -> None:
        for dep in deps:
            assert first[node] >= ready[dep], (
                f"{node} appeared at {first[node]} before {dep} was ready ({ready[dep]})"
            )

    assert first["helm-provider-config"] == 1
    assert (
        first["irsa-bucket"]
        == first["irsa-bucket-ownership"]
        == first["irsa-bucket-public-access"]
        == 1
    )
    after("irsa-bucket-policy", "irsa-bucket-public-access")
    after("irsa-discovery", "irsa-bucket")
    after("irsa-jwks", "irsa-bucket")
    after("irsa-oidc-provider", "irsa-discovery", "irsa-jwks", "irsa-bucket-policy")
    for role in ("vpc-cni-role", "ebs-role", "efs-role", "lbc-role", "lbc-policy"):
        after(role, "irsa-oidc-provider")
    after("lbc-role-attachment", "lbc-role", "lbc-policy")
    # CNI: once the control plane is initialized and its role is ready.
    assert first["cni-release"] >= cp_events["initialized"]
    after("cni-release", "vpc-cni-role", "vpc-cni-role-attachment")
    after("cert-manager-release", "cni-release")
    after("pod-identity-webhook-release", "cert-manager-release", "cni-release")
    # The rest: control plane available, CNI ready, own role ready, webhook ready.
    for release, role in (
        ("ebs-release", "ebs-role"),
        ("efs-release", "efs-role"),
        ("lbc-release", "lbc-role"),
    ):
        assert first[release] >= cp_events["available"]
        after(release, "cni-release", role, f"{role}-attachment", "pod-identity-webhook-release")
    # Usages only once both ends exist.
    after("usage-ebs-release-ebs-role", "ebs-release", "ebs-role")


def test_xr_is_held_not_ready_until_everything_is_ready() -> None:
    world = by_name("selfhosted-full").world()
    saw_held = False
    for rec in world.run(30, before=staged_control_plane(3, 8)):
        rsp = rec.response
        assert rsp is not None
        held = rsp.desired.composite.ready == 2  # READY_FALSE
        saw_held = saw_held or held
        plugins = {p["name"]: p["phase"] for p in world.xr["status"]["plugins"]}
        upgrade = structs.str_at(rsp.desired.composite.resource, "status", "upgrade")
        upgrading = upgrade in {"Upgrading", "RollingBack"}
        if rec.xr_ready:
            assert set(plugins.values()) == {"Ready"}, plugins
            # While the CNI's restart soaks: called again by the soak's end, not in ten minutes.
            assert rec.ttl <= 30 if upgrading else rec.ttl == 600
        else:
            assert rec.ttl == 30
    assert saw_held and world.xr_ready


def test_aws_node_restarts_once_the_webhook_is_ready() -> None:
    world = by_name("selfhosted-full").world()
    first, ready = ready_at(world, 30, staged_control_plane(3, 8))
    annotation_at = None
    for rec in world.history:
        assert rec.response is not None
        cni = rec.response.desired.resources.get("cni-release")
        if cni is None:
            continue
        pods = (
            cni.resource.fields["spec"]
            .struct_value.fields["forProvider"]
            .struct_value.fields["values"]
        )
        if "podAnnotations" in pods.struct_value.fields:
            annotation_at = annotation_at or rec.step
        elif annotation_at is not None:
            pytest.fail("the restart annotation was removed again")
    assert annotation_at is not None
    assert annotation_at >= ready["pod-identity-webhook-release"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_every_scenario_converges_without_deletions(scenario: Scenario) -> None:
    world = scenario.world()
    world.run(30, before=staged_control_plane(3, 8))
    assert world.xr_ready, world.xr["status"]
    assert world.deletions == []


@pytest.mark.parametrize("seed", range(12))
def test_flaps_and_outages_never_delete(seed: int) -> None:
    """Random readiness flaps, a control plane that goes away, CAPI objects briefly unreadable."""
    rng = random.Random(seed)
    scenario = rng.choice(SCENARIOS)
    world = scenario.world()
    schedule: dict[int, list[str]] = {}
    for _ in range(8):
        schedule.setdefault(rng.randrange(2, 30), []).append("flap")
    outage = rng.randrange(10, 25)
    hidden_at = rng.randrange(5, 28)

    def before(w: InMemoryCrossplane) -> None:
        staged_control_plane(3, 8)(w)
        step = w.step + 1
        w.held_down.clear()
        for _ in schedule.get(step, []):
            if w.composed:
                w.held_down.add(rng.choice(sorted(w.composed)))
        if step == outage:
            w.set_control_plane(initialized=True, available=False)
        if step == outage + 3:
            w.set_control_plane(initialized=True, available=True)
        w.hidden = (
            {f"{o['kind']}/{o['metadata']['name']}" for o in w.required}
            if step == hidden_at
            else set()
        )

    world.run(40, before=before)
    world.held_down.clear()
    world.hidden.clear()
    world.run(8)
    assert world.deletions == [], f"{scenario.name}: {world.deletions}"
    assert world.xr_ready, f"{scenario.name} did not converge"


def test_removing_a_plugin_deletes_exactly_its_nodes() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    assert world.xr_ready
    before_names = set(world.composed)
    del world.xr["spec"]["storage"]["efs"]
    rec = world.reconcile()
    assert "efs" not in world.xr["status"]["roleARNs"]
    assert "efs-csi" not in {p["name"] for p in world.xr["status"]["plugins"]}
    recs = [rec, *world.run(16)]
    deleted_at = {n: r.step for r in recs for n in r.deleted}
    efs_nodes = {"efs-role", "efs-role-attachment", "efs-release"}
    efs_usages = {n for n in before_names if n.startswith("usage-") and "efs" in n}
    assert set(deleted_at) == efs_nodes | efs_usages
    # In Usage order: a Usage of a removed resource goes once its user is gone from the API
    # server, and the resource once the Usage is (Crossplane refuses to delete a used resource).
    for usage in efs_usages:
        by, of = USAGE_ENDS[usage]
        if of in deleted_at:
            assert deleted_at[by] < deleted_at[usage] < deleted_at[of], usage
    assert usage_order_problems(world) == []
    assert world.deleted_in_use == []
    assert deleted_at["efs-release"] == rec.step
    assert world.deletions == sorted((s, n) for n, s in deleted_at.items())
    assert world.xr_ready


@pytest.mark.parametrize(
    ("spec_path", "node"),
    [(("storage", "efs"), "efs"), (("storage", "ebs"), "ebs"), (("ingress", "awsLoadBalancerController"), "lbc")],
)
def test_a_removed_addon_keeps_its_roles_permissions_until_its_release_is_gone(spec_path: tuple[str, str], node: str) -> None:
    """Found by the fault suite (e2e/faults/test_helm_faults.py: provider-helm stopped while EFS
    was withdrawn): the role's policy was detached in the same layer as the Release's uninstall
    began, so the add-on's pods ran on without their permissions while helm was uninstalling
    them (or could not). The release uses the attachment too: it goes only once the release
    is gone from the API server."""
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    assert world.xr_ready
    del world.xr["spec"][spec_path[0]][spec_path[1]]
    recs = world.run(20)
    deleted_at = {n: r.step for r in recs for n in r.deleted}
    gone_at = {n: s for s, n in world.gone}
    release, attachment = f"{node}-release", f"{node}-role-attachment"
    assert deleted_at[release] < gone_at[release] < deleted_at[attachment], (deleted_at, gone_at)
    assert world.deleted_in_use == []
    assert usage_order_problems(world) == []


def _plugins_ready(world: InMemoryCrossplane) -> dict[str, str]:
    return next(c for c in world.xr["status"]["conditions"] if c["type"] == "PluginsReady")


def test_the_xr_says_what_it_still_withdraws() -> None:
    """Found by the fault suite (e2e/faults/test_helm_faults.py: provider-helm stopped while EFS
    was withdrawn): the XR said only "5 plugin(s) ready" while efs-release waited for its
    uninstall and its role for it, which lasts for ever if the workload cluster cannot be
    reached. PluginsReady (still True: every plugin the spec asks for is Ready) names what is
    still withdrawn, until nothing is."""
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    assert "withdrawing" not in _plugins_ready(world)["message"]
    del world.xr["spec"]["storage"]["efs"]
    said = []
    for _ in range(20):
        rec = world.reconcile()
        cond = _plugins_ready(world)
        # Also what Crossplane deleted and no longer observes while the API server still
        # has it: efs-release through its uninstall.
        lingering = {
            o["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
            for _, o in world.lingering
        }
        left = {
            n
            for n in ("efs-release", "efs-role", "efs-role-attachment")
            if n in world.composed or n in lingering
        }
        said.append((rec.step, cond["status"], cond["reason"], cond["message"], left))
    first = said[0][3]
    assert "still withdrawing what the spec no longer asks for, in Usage order: " in first, first
    assert "efs-release" in first and "efs-role" in first and "Usage(s)" in first, first
    for step, status, reason, message, left in said:
        assert (status, reason) == ("True", "AllPluginsReady"), (step, message)
        assert all(n in message for n in left), (step, left, message)
    assert "withdrawing" not in said[-1][3] and not said[-1][4], said[-1]


def test_adding_a_plugin_mid_way() -> None:
    world = by_name("external-eks").world(staged=False)
    world.run(10)
    assert world.xr_ready
    world.xr["spec"]["storage"] = {"ebs": {}}
    world.run(10)
    assert world.deletions == []
    assert {"ebs-role", "ebs-role-attachment", "ebs-release"} <= set(world.composed)
    assert world.xr_ready


def test_removing_the_cni_keeps_the_addons_and_their_roles() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    del world.xr["spec"]["networking"]
    first, second, third = world.run(3)
    # The usages that pointed at the CNI go first; the CNI once the API server holds none
    # of them any more (their finalizers kept them a reconcile longer), so its deletion is
    # never refused.
    assert {n for n in first.deleted if "cni-release" in n} == {
        n for n in first.deleted if n.startswith("usage-") and n.endswith("-cni-release")
    }
    assert "cni-release" not in second.deleted
    assert "cni-release" in third.deleted
    # Then the CNI's own Usages, once the API server no longer has it, and its role.
    later = [n for r in world.run(16) for n in r.deleted]
    assert not any(
        n in first.deleted + second.deleted + third.deleted + later
        for n in ("ebs-release", "ebs-role", "lbc-release", "irsa-bucket")
    )
    assert all("cni-release" not in n and "vpc-cni" not in n for n in world.composed)
    assert world.deleted_in_use == []
    assert usage_order_problems(world) == []


@pytest.mark.parametrize(
    ("name", "api_version", "namespace"),
    [
        ("selfhosted-full", "protection.crossplane.io/v1beta1", "team-a"),
        ("selfhosted-legacy-xr-v1", "apiextensions.crossplane.io/v1beta1", None),
    ],
)
def test_a_used_resource_waits_until_no_usage_of_it_is_left_in_the_api_server(
    name: str, api_version: str, namespace: str | None
) -> None:
    """Crossplane forgets what it deletes at once, while finalizers keep it a little longer: the
    function keeps a Usage while its user is still in the API server (asked for by name), and
    asks for the XR's Usages by their label while something they may use is withdrawn (the usage
    webhook still counts a Usage being deleted), and only then."""
    world = by_name(name).world(staged=False)
    world.run(15)
    assert "usages" not in world.history[-1].response.requirements.resources
    obj = world.composed["efs-release"].obj
    release = (obj["apiVersion"], "Release", obj["metadata"]["name"])
    del world.xr["spec"]["storage"]["efs"]
    recs = world.run(20)
    deleted_at = {n: r.step for r in recs for n in r.deleted}
    usage = "usage-efs-release-efs-role"
    gone_at = {n: s for s, n in world.gone}
    # The Usage went once its user was gone from the API server (asked for by name meanwhile),
    # and lingered through the next reconcile.
    assert deleted_at[usage] == gone_at["efs-release"] > deleted_at["efs-release"] + 1
    for r in recs:
        if deleted_at["efs-release"] < r.step < deleted_at[usage]:
            assert usage in r.desired
            asked = r.response.requirements
            sel = (asked.extra_resources if world.crossplane_v1 else asked.resources)[f"user-of/{usage}"]
            assert (sel.api_version, sel.kind, sel.match_name) == release
            assert (sel.namespace if sel.HasField("namespace") else None) == namespace
    held = next(r for r in recs if r.step == deleted_at[usage] + 1)
    assert "efs-role" in held.desired and "efs-role" not in held.deleted
    asked = held.response.requirements
    selectors = [asked.extra_resources["usages"]] if world.crossplane_v1 else [asked.resources["usages"]]
    for sel in selectors:
        assert (sel.api_version, sel.kind) == (api_version, "Usage")
        assert dict(sel.match_labels.labels) == {"clusterplugin.dev/composite": world.xr["metadata"]["name"]}
        assert (sel.namespace if sel.HasField("namespace") else None) == namespace
    # The role went two reconciles after the last Usage of it (its attachment's, which waited
    # for the release too: the release uses the role's permissions until it is gone).
    last = max(deleted_at[u] for u in (usage, "usage-efs-role-attachment-efs-role"))
    assert deleted_at["efs-role-attachment"] > gone_at["efs-release"]
    assert deleted_at["efs-role"] == last + 2
    assert world.deleted_in_use == []
    # Done: nothing that may be used is withdrawn, nothing more is asked for.
    assert "usages" not in recs[-1].response.requirements.resources
    assert "usages" not in recs[-1].response.requirements.extra_resources
    last = recs[-1].response.requirements
    assert not [n for n in [*last.resources, *last.extra_resources] if n.startswith("user-of/")]


def test_crossplane_v1_reads_only_extra_resources() -> None:
    world = by_name("selfhosted-legacy-xr-v1").world(staged=False)
    rec = world.reconcile()
    rsp = rec.response
    assert rsp is not None
    assert set(rsp.requirements.extra_resources) == {"control-plane", "infrastructure", "sa-secret"}
    for sel in rsp.requirements.extra_resources.values():
        assert sel.match_labels.labels["cluster.x-k8s.io/cluster-name"] == "demo"
        assert not sel.HasField("namespace")
    world.run(15)
    assert world.xr_ready


def test_label_selected_objects_of_other_namespaces_are_ignored() -> None:
    """Crossplane 1.x lists by label across namespaces: a same-named cluster elsewhere must not leak in."""
    scenario = by_name("selfhosted-legacy-xr-v1")
    world = scenario.world(staged=False)
    for obj in list(world.required):
        if obj["kind"] == "Secret":
            other = {**obj, "metadata": {**obj["metadata"], "namespace": "intruder"}}
            other["data"] = {"tls.crt": "bm90IGEga2V5"}  # "not a key"
            world.required.insert(0, other)
    world.run(15)
    assert world.xr_ready
    assert "intruder" not in str(world.xr["status"])


def test_required_resources_settle_within_crossplanes_cap() -> None:
    for scenario in SCENARIOS:
        world = scenario.world(staged=False)
        for rec in world.run(3):
            assert rec.iterations <= 3, (scenario.name, rec.iterations)
