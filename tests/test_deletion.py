"""The cluster's own deletion (docs/architecture.md, "The cluster's own deletion"): orphan, keep, withdraw in Usage order, start over; never hang."""

from __future__ import annotations

from typing import Any

import pytest
from crossplane.function import resource

from function import fn, observed
from function.plan import USAGE_ENDS
from function_tools import simulate
from function_tools.in_memory_crossplane import InMemoryCrossplane, Reconcile, orphaned
from tests import kube_schema
from tests.scenarios import SCENARIOS, Scenario, by_name, example, usage_order_problems

# Both XR flavours, both Crossplane modes (and every other scenario but EKS's, whose
# cluster is deleted the same way: it is in the parametrization too).
DELETION_SCENARIOS = SCENARIOS
AWS_KINDS = {
    "Bucket",
    "BucketOwnershipControls",
    "BucketPublicAccessBlock",
    "BucketPolicy",
    "Object",
    "OpenIDConnectProvider",
    "Role",
    "Policy",
    "RolePolicyAttachment",
    "SecurityGroupIngressRule",
}


# Reconciles the withdrawal may take once it begins. Each layer of the Usage graph takes six
# with the InMemoryCrossplane's deletion delay of three: the users are dropped, gone from the
# API server three reconciles later, then their Usages are dropped, held one more reconcile by
# their finalizers, and then what they used is dropped. The full example has four such layers
# (the add-on releases; cert-manager and the roles' attachments; the roles and the CNI; the CNI's
# role; then the OIDC provider) and a Managed CloudFront issuer two more (the provider's Usage of
# the distribution, the distribution's of the bucket and the origin access control), with room
# to spare.
WITHDRAWAL_RECONCILES = 48


def _withdraw(world: InMemoryCrossplane) -> list[Reconcile]:
    """Reconcile until nothing composed is left; the reconciles that withdrew it."""
    recs = []
    for _ in range(WITHDRAWAL_RECONCILES):
        recs.append(world.reconcile())
        if not world.composed:
            break
    assert world.composed == {}, f"left after {len(recs)} reconciles: {sorted(world.composed)}"
    return recs


def _assert_usage_order(world: InMemoryCrossplane, recs: list[Reconcile]) -> None:
    """Nothing deleted while a Usage of it or its user was there; each Usage once its user was
    gone from the API server, what it used once the Usage was gone too."""
    assert world.deleted_in_use == []
    deleted_at = {n: r.step for r in recs for n in r.deleted}
    for usage, (by, of) in USAGE_ENDS.items():
        if usage in deleted_at:
            assert deleted_at[by] < deleted_at[usage] < deleted_at[of], (usage, deleted_at)
    assert usage_order_problems(world) == []


def _started_again(world: InMemoryCrossplane, last: list[str]) -> Reconcile:
    """Reconcile a new cluster's XR until it composes again: the reconcile after the first
    that found the old cluster's last layer (``last``, composition-resource-names) gone from
    the API server (that one says ClusterDeleted), never before."""
    for _ in range(world.deletion_delay + 2):
        rec = world.reconcile()
        if rec.created:
            break
    assert rec.created
    assert rec.step == max(step for step, name in world.gone if name in last) + 1
    return rec


def _ready_world(scenario: Scenario) -> InMemoryCrossplane:
    world = scenario.world(staged=False)
    world.run(30)  # Ready, and the VPC CNI's IRSA restart soaked
    assert world.xr_ready, scenario.name
    return world


def _releases(world: InMemoryCrossplane) -> list[Any]:
    return [c for c in world.composed.values() if c.obj["kind"] == "Release"]


def _record(world: InMemoryCrossplane) -> dict[str, str] | None:
    return world.xr["status"].get("clusterDeletion")


def _condition(world: InMemoryCrossplane, typ: str) -> dict[str, Any]:
    return next(c for c in world.xr["status"]["conditions"] if c["type"] == typ)


@pytest.mark.parametrize("scenario", DELETION_SCENARIOS, ids=[s.name for s in DELETION_SCENARIOS])
def test_cluster_first_orphan_keep_then_drop_without_uninstall(scenario: Scenario) -> None:
    world = _ready_world(scenario)
    ready_ttl = world.history[-1].ttl
    composed = set(world.composed)
    uid = next(o for o in world.required if o["kind"] == "Cluster")["metadata"]["uid"]

    # CAPI marks the Cluster, then its control plane and infrastructure object.
    world.delete_cluster(cascade=False)
    first = world.reconcile()
    world.delete_cluster()
    second = world.reconcile()
    # Crossplane 1.x never reads the Cluster: it sees the deletion one reconcile later.
    seen_at = first if not world.crossplane_v1 else second
    assert _record(world) == {"name": world.xr["spec"]["clusterName"], "uid": uid, "phase": "Deleting"}
    assert kube_schema.xr_status_errors(world.xr["kind"], world.xr["status"]) == []
    rsp = seen_at.response
    for name, r in rsp.desired.resources.items():
        if r.resource.fields["kind"].string_value == "Release":
            policies = r.resource.fields["spec"].struct_value
            assert (
                "managementPolicies" in policies.fields or "deletionPolicy" in policies.fields
            ), name
    # Within two reconciles of the deletion every Release is observed orphaned.
    assert all(orphaned(c.obj) for c in _releases(world))
    assert _releases(world), "the scenario composes Releases"
    legacy = "namespace" not in world.xr["metadata"]
    for c in _releases(world):
        if legacy:
            assert c.obj["spec"]["deletionPolicy"] == "Orphan"
        else:
            assert c.obj["spec"]["managementPolicies"] == ["Observe", "Create", "Update", "LateInitialize"]
            assert "deletionPolicy" not in c.obj["spec"]
    # What the function asks for while the cluster goes is valid for the real CRDs.
    for rec in (first, second):
        for name, r in rec.response.desired.resources.items():
            errors = kube_schema.validate(resource.struct_to_dict(r.resource))
            assert errors == [], (name, errors)
    cond = _condition(world, "PluginsReady")
    assert (cond["status"], cond["reason"]) == ("False", "ClusterDeleting")
    assert uid in cond["message"]
    assert not world.xr_ready

    # Deleting for a while: nothing goes, AWS resources and Releases alike.
    world.run(4)
    assert set(world.composed) == composed
    assert world.deletions == []

    releases = {c.name for c in _releases(world)}
    world.remove_cluster()
    seen_gone = world.reconcile()  # once: it may be a read that missed
    assert seen_gone.deleted == [] and _record(world)["phase"] == "Gone"
    recs = _withdraw(world)
    assert {n for _, n in world.deletions} == composed
    assert world.uninstalls == [] and world.hung == []
    # Over a few reconciles, in Usage order: the Releases nothing uses first (forgotten),
    # never anything while a Usage of it is there.
    assert len(recs) > 2
    _assert_usage_order(world, recs)
    used = {of for by, of in USAGE_ENDS.values()}
    assert releases - used and releases - used <= set(recs[0].deleted)
    # The XR says what is going on: ClusterDeleting counting what is left, then ClusterDeleted.
    for rec in recs:
        assert rec.ttl == world.history[0].ttl  # waiting, not ready, TTL
    for rec in recs[:-1]:
        summary = next(c for c in rec.response.conditions if c.type == "PluginsReady")
        assert summary.reason == "ClusterDeleting", summary
        assert "being deleted in Usage order" in summary.message
    assert _record(world)["phase"] == "Deleted"
    assert kube_schema.xr_status_errors(world.xr["kind"], world.xr["status"]) == []
    # Crossplane observes nothing, but its provider still deletes the last layer: the record
    # lists it, the function asks for it by name, and says ClusterDeleted once it is gone.
    last = set(recs[-1].deleted)
    finalizing = _record(world)["finalizing"]
    assert len(finalizing) == len(last) and all(set(f) == {"apiVersion", "kind", "name"} for f in finalizing)
    for _ in range(world.deletion_delay + 1):
        rec = world.reconcile()
        summary = next(c for c in rec.response.conditions if c.type == "PluginsReady")
        if summary.reason == "ClusterDeleted":
            break
        assert "still being deleted by their providers" in summary.message
        asked = rec.response.requirements
        asked_names = set(asked.extra_resources if world.crossplane_v1 else asked.resources)
        assert {f"finalizing/{f['kind']}/{f['name']}" for f in finalizing} <= asked_names
    # The first reconcile the API server no longer had any of them.
    assert rec.step == max(step for step, name in world.gone if name in last)
    assert "finalizing" not in _record(world)
    cond = _condition(world, "PluginsReady")
    assert (cond["status"], cond["reason"]) == ("False", "ClusterDeleted")
    assert world.xr["status"]["plugins"] == [] and "roleARNs" not in world.xr["status"]
    assert not world.xr_ready
    # Stays empty and quiet.
    for rec in world.run(3):
        assert rec.created == [] and rec.deleted == []
        assert rec.ttl == ready_ttl


def test_a_deletion_settles_in_few_reconciles() -> None:
    """Measured for the issue note: reconciles from the deletion to everything dropped."""
    for scenario in (by_name("selfhosted-full"), by_name("selfhosted-legacy-xr-v1")):
        sim = simulate.Simulator(
            *example(scenario.example) if scenario.mutate_xr is None else _mutated(scenario),
            settings=simulate.Settings(
                steps=70, delete_cluster_at=24, crossplane_v1=scenario.crossplane_v1
            ),
        ).run()
        assert sim.ok, sim.problems()
        assert sim.deletion_recorded_at == (25 if scenario.crossplane_v1 else 24)
        assert sim.orphaned_at == sim.deletion_recorded_at + 1
        drops = {step for step, _ in sim.deletions}
        # Deleted at 24 (Ready at 12, the VPC CNI's IRSA restart soaked by 17). Gone from 28:
        # seen gone at 28, confirmed at 29, withdrawn from 29 in the full example's eleven
        # layers: users (gone from the API server three reconciles after their deletion), their
        # Usages (held one more by their finalizers), what they used. 29 the Releases and what
        # no Usage names a user of, 33 their Usages, 35 the add-ons' role attachments,
        # cert-manager and the bucket, 39 their Usages, 41 the CNI and the add-ons' roles, 45
        # their Usages, 47 the CNI's attachment, 51 its Usage, 53 its role, 57 its Usage of the
        # OIDC provider, 59 the provider.
        assert drops == {29, 33, 35, 39, 41, 45, 47, 51, 53, 57, 59}
        assert sim.deleted_in_use == [] and sim.left == []


def _mutated(scenario: Scenario) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    world = scenario.world(staged=False)
    return world.xr, world.required


def test_aws_resources_stay_while_the_cluster_is_deleting_however_long() -> None:
    world = _ready_world(by_name("selfhosted-full"))
    aws = {n for n, c in world.composed.items() if c.obj["kind"] in AWS_KINDS}
    assert {"lbc-role", "lbc-role-attachment", "irsa-oidc-provider"} <= aws
    world.delete_cluster()
    world.run(30)
    assert aws <= set(world.composed)
    assert world.deletions == []


def test_nothing_new_is_installed_into_a_cluster_being_deleted() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(7)  # the add-on releases are not there yet
    assert "ebs-release" not in world.composed
    world.delete_cluster()
    world.run(8)
    assert "ebs-release" not in world.composed
    plugins = {p["name"]: p for p in world.xr["status"]["plugins"]}
    assert plugins["ebs-csi"]["waitingFor"] == "cluster deletion"
    assert world.deletions == []


def test_a_cluster_that_merely_vanishes_drops_nothing() -> None:
    """No recorded deletion (a read that missed, or a deletion never seen): keep everything."""
    world = _ready_world(by_name("selfhosted-full"))
    composed = set(world.composed)
    world.remove_cluster()  # gone without the function ever seeing it deleting
    world.run(10)
    assert set(world.composed) == composed
    assert world.deletions == []
    assert _record(world) is None
    # The Releases took the orphan policy meanwhile (harmless): deleting the XR now
    # could not hang on a helm uninstall.
    assert all(orphaned(c.obj) for c in _releases(world))
    # Back: the orphan policy is undone, nothing was ever deleted.
    world.required, world.cluster_gone = world._removed, False
    world.run(3)
    assert not any(orphaned(c.obj) for c in _releases(world))
    assert world.deletions == [] and world.xr_ready


def test_one_read_that_misses_during_a_deletion_drops_nothing() -> None:
    world = _ready_world(by_name("selfhosted-full"))
    composed = set(world.composed)
    world.delete_cluster()
    world.run(2)
    world.hidden = {f"{o['kind']}/{o['metadata']['name']}" for o in world.required}
    rec = world.reconcile()
    assert rec.deleted == [] and _record(world)["phase"] == "Gone"
    world.hidden = set()
    world.run(3)
    assert set(world.composed) == composed and world.deletions == []
    assert _record(world)["phase"] == "Deleting"


def test_a_release_not_yet_seen_orphaned_holds_the_drop() -> None:
    world = _ready_world(by_name("selfhosted-full"))
    world.delete_cluster()
    world.run(2)
    world.remove_cluster()
    world.reconcile()  # seen gone once
    # As if the provider had not applied the policy yet: observed without it.
    world.composed["ebs-release"].obj["spec"].pop("managementPolicies")
    rec = world.reconcile()
    assert rec.deleted == []
    assert _record(world)["phase"] == "Gone"
    assert orphaned(world.composed["ebs-release"].obj)  # applied again now
    recs = _withdraw(world)
    assert "ebs-release" in recs[0].deleted
    assert world.uninstalls == [] and world.hung == []


@pytest.mark.parametrize("scenario", [by_name("selfhosted-full"), by_name("calico-legacy-claim-v1")], ids=lambda s: s.name)
def test_a_new_cluster_of_the_same_name_starts_from_scratch(scenario: Scenario) -> None:
    world = _ready_world(scenario)
    old_uid = _cluster_uid(world)
    world.delete_cluster()
    world.run(2)
    world.remove_cluster()
    world.reconcile()
    _withdraw(world)
    world.recreate_cluster()
    assert _cluster_uid(world) != old_uid
    created = [n for rec in world.run(20) for n in rec.created]
    assert world.xr_ready
    assert _record(world) is None
    assert "irsa-bucket" in created or "helm-provider-config" in created
    assert not any(orphaned(c.obj) for c in _releases(world))
    assert world.uninstalls == [] and world.hung == []


def _cluster_uid(world: InMemoryCrossplane) -> str:
    for o in world.required:
        if o["kind"] == "Cluster":
            return o["metadata"]["uid"]
    return ""


def test_a_replacement_cluster_found_before_the_old_one_was_seen_gone() -> None:
    """The old cluster went and a new one of the same name came between two calls."""
    world = _ready_world(by_name("selfhosted-full"))
    old = set(world.composed)
    world.delete_cluster()
    world.run(2)
    world.remove_cluster()
    world.recreate_cluster()
    seen = world.reconcile()
    assert seen.fatal is None and seen.deleted == [] and seen.created == []
    # Seen replaced, confirmed, the old cluster's withdrawn in Usage order; only then the
    # new cluster's, from scratch.
    recs = _withdraw(world)
    assert {n for r in recs for n in r.deleted} == old
    assert all(r.fatal is None and r.created == [] for r in recs)
    _assert_usage_order(world, recs)
    _started_again(world, recs[-1].deleted)
    world.run(20)
    assert world.xr_ready and _record(world) is None
    assert world.uninstalls == [] and world.hung == []


@pytest.mark.parametrize("after", [1, 4])
def test_a_new_cluster_that_appears_during_the_withdrawal_waits_for_its_end(after: int) -> None:
    """The old cluster's resources (its issuer, its key's JWKS) are never handed to the new one."""
    world = _ready_world(by_name("selfhosted-full"))
    old = {n: c.obj["metadata"]["name"] for n, c in world.composed.items()}
    world.delete_cluster()
    world.run(2)
    world.remove_cluster()
    world.reconcile()
    first = world.run(after)  # the withdrawal is under way
    assert first[0].deleted and world.composed
    world.recreate_cluster()
    recs = [*first, *_withdraw(world)]
    assert {n for r in recs for n in r.deleted} == set(old)
    assert all(r.created == [] for r in recs)
    _assert_usage_order(world, recs)
    assert _record(world)["phase"] == "Deleted"
    started = _started_again(world, recs[-1].deleted)
    assert _record(world) is None
    world.run(20)
    assert world.xr_ready and world.uninstalls == [] and world.hung == []
    # Everything composed anew (the InMemoryCrossplane names a resource after its XR and name alike, so
    # the names come back; what matters is that nothing old was kept).
    assert set(world.composed) == set(old)
    assert all(c.created_at >= started.step for c in world.composed.values())


def test_xr_first_deletion_uninstalls_from_the_live_cluster() -> None:
    """Without a cluster deletion, Releases carry no policy: deleting the XR uninstalls them."""
    world = _ready_world(by_name("selfhosted-full"))
    for c in _releases(world):
        assert "managementPolicies" not in c.obj["spec"]
        assert not orphaned(c.obj)


def test_an_uninstall_against_a_cluster_that_is_gone_hangs_in_the_world() -> None:
    """The world's provider-helm: what the orphan policy is for (and the one case left).

    A plugin removed from the spec while the cluster is unreachable is deleted with
    the policy it was last applied with: without a recorded deletion that is an
    uninstall, which cannot finish. The Release stays, as in a real cluster.
    """
    world = _ready_world(by_name("selfhosted-full"))
    world.remove_cluster()
    del world.xr["spec"]["storage"]["ebs"]
    rec = world.reconcile()
    assert world.hung == [(rec.step, "ebs-release")]
    assert "ebs-release" in world.composed and "ebs-release" not in rec.deleted
    world.run(3)
    assert world.hung == [(rec.step, "ebs-release")], "recorded once"
    assert world.uninstalls == []


def test_protect_cluster_usage() -> None:
    scenario = by_name("selfhosted-full")
    world = scenario.world(staged=False)
    world.step_input = {"protectCluster": True}
    world.run(3)
    usage = world.composed["usage-helm-provider-config-cluster"].obj
    assert usage["apiVersion"] == "protection.crossplane.io/v1beta1"
    assert usage["spec"]["of"] == {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "resourceRef": {"name": "demo"},
    }
    pc = world.composed["helm-provider-config"].obj
    assert usage["spec"]["by"] == {
        "apiVersion": pc["apiVersion"],
        "kind": "ProviderConfig",
        "resourceRef": {"name": pc["metadata"]["name"]},
    }
    assert usage["spec"]["replayDeletion"] is True
    assert kube_schema.validate(usage) == []
    # Without the input: no Usage of the Cluster.
    plain = scenario.world(staged=False)
    plain.run(3)
    assert "usage-helm-provider-config-cluster" not in plain.composed


@pytest.mark.parametrize("name", ["selfhosted-legacy-xr", "calico-legacy-claim"])
def test_protect_cluster_is_refused_for_legacy_xrs(name: str) -> None:
    world = by_name(name).world(staged=False)
    world.step_input = {"protectCluster": True}
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith("input.protectCluster: ")
    assert world.composed == {}


def test_simulate_plays_a_deletion_from_the_command_line(tmp_path) -> None:
    from click.testing import CliRunner

    from function_tools.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "examples/selfhosted-full/xr.yaml",
            "--required",
            "examples/selfhosted-full/required",
            "--delete-cluster-at",
            "24",
            "--steps",
            "80",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| cluster deleting |" in result.output
    assert "| cluster gone |" in result.output
    assert "the function recorded the deletion at 24, every Release orphaned from 25" in result.output
    assert "Releases uninstalled: 0, hanging in an uninstall: 0; composed resources left: 0" in result.output
    # The add-on releases go first (forgotten), the CNI's after the Usages of it, the
    # OIDC provider last.
    timeline = {line.split()[0]: line.split() for line in result.output.splitlines() if line}
    assert timeline["ebs-release"][-2:] == ["29", "forgotten"]
    assert timeline["cni-release"][-2:] == ["41", "forgotten"]
    assert timeline["irsa-oidc-provider"][-1] == "59"
    assert (
        "  over reconciles 29-59: 11, 0, 0, 0, 13, 0, 5, 0, 0, 0, 5, 0, 5, 0, 0, 0, 5, 0, 1, 0, 0, "
        "0, 1, 0, 1, 0, 0, 0, 1, 0, 1\n"
    ) in result.output
    assert "  deleted while a Usage of it or its user was still there: none\n" in result.output
    assert result.output.rstrip().endswith(
        "OK: the XR became Ready at reconcile 12 with every condition True; nothing deleted while "
        "the cluster existed, no uninstall, everything deleted in Usage order once it was gone"
    )


def test_simulate_fails_a_withdrawal_cut_short_and_says_why() -> None:
    xr, required = example("selfhosted-full")
    sim = simulate.Simulator(
        xr, required, settings=simulate.Settings(steps=32, delete_cluster_at=24)
    ).run()
    assert not sim.ok
    assert sim.problems() == [
        (
            f"the run ended while {len(sim.left)} composed resource(s) were still being deleted "
            "in Usage order: play more reconciles (--steps)"
        )
    ]


LAST_LAYER_CUT_SHORT = (
    "the run ended while what was deleted last was still being deleted by its providers: play "
    "more reconciles (--steps)"
)


def test_simulate_fails_a_run_that_ends_while_the_last_layer_is_still_being_deleted() -> None:
    """Crossplane observes nothing from reconcile 60, but the OIDC provider it deleted at 59
    is in the API server through 62: the function says ClusterDeleted at 63, not before."""
    xr, required = example("selfhosted-full")
    for steps, problems in [
        (62, [LAST_LAYER_CUT_SHORT]),
        (63, []),
    ]:
        sim = simulate.Simulator(
            xr, required, settings=simulate.Settings(steps=steps, delete_cluster_at=24)
        ).run()
        assert sim.left == [] and sim.problems() == problems, (steps, sim.problems())


def test_simulate_fails_a_deletion_while_a_usage_is_there() -> None:
    """The check the run relies on: a function that drops everything at once fails it."""
    xr, required = example("selfhosted-full")

    def drop_at_once(req: Any) -> Any:
        rsp = fn.run(req, now=simulator.world.now)
        status = resource.struct_to_dict(req.observed.composite.resource).get("status", {})
        if status.get("clusterDeletion", {}).get("phase") == "Deleted":
            rsp.desired.ClearField("resources")
        return rsp

    simulator = simulate.Simulator(
        xr, required, settings=simulate.Settings(steps=70, delete_cluster_at=24)
    )
    simulator.world.runner = drop_at_once
    sim = simulator.run()
    assert sim.deleted_in_use and not sim.ok
    assert sim.problems()[0].startswith(
        "deleted while a Usage of it, or the user a Usage of it named, was still there "
        "(Crossplane's usage webhook refuses the one, the other breaks the order): "
    )


def test_simulate_fails_a_withdrawal_that_does_not_wait_for_the_users_to_be_gone() -> None:
    """A function told that every withdrawn user is already gone from the API server (as if it
    dropped a Usage once Crossplane stopped observing its user) deletes what was used while the
    users' finalizers still hold them: the run fails."""
    xr, required = example("selfhosted-full")

    def users_said_gone(req: Any) -> Any:
        for usage in USAGE_ENDS:
            req.required_resources[f"user-of/{usage}"].ClearField("items")  # resolved, empty
        return fn.run(req, now=simulator.world.now)

    simulator = simulate.Simulator(
        xr, required, settings=simulate.Settings(steps=70, delete_cluster_at=24)
    )
    simulator.world.runner = users_said_gone
    sim = simulator.run()
    assert not sim.ok
    assert {name for _, name in sim.deleted_in_use} >= {"ebs-role", "cni-release"}, sim.deleted_in_use


def test_simulate_fails_a_deletion_the_function_never_sees() -> None:
    # Gone one reconcile after it was marked: Crossplane 1.x only reads the control plane,
    # marked one reconcile after the Cluster, so the deletion is never seen.
    xr, required = _mutated(by_name("selfhosted-legacy-xr-v1"))
    sim = simulate.Simulator(
        xr,
        required,
        settings=simulate.Settings(
            steps=40, delete_cluster_at=24, cluster_gone_after=1, crossplane_v1=True
        ),
    ).run()
    assert not sim.ok
    assert "the function never saw the cluster being deleted" in sim.problems()
    assert sim.deletions == []  # and, never having seen it, drops nothing


def test_objects_resent_from_an_earlier_reconcile_are_not_read_once_the_cluster_is_gone() -> None:
    """Crossplane v2.4 sends again what the previous reconcile resolved. Once the Cluster is
    gone the function no longer asks for its control plane and infrastructure object (their
    names come from the Cluster): copies of them as they were, not being deleted, must not
    read as a cluster that is back (which would forget the recorded deletion)."""
    world = by_name("selfhosted-full").world(staged=False, capabilities=True)
    world.run(20)
    world.delete_cluster(cascade=False)  # the Cluster alone carries a deletionTimestamp
    world.run(2)
    assert _record(world)["phase"] == "Deleting"
    req = world.request()
    for _ in range(3):
        world._fill(req, fn.run(req))
    assert {"cluster", "control-plane", "infrastructure"} <= set(req.required_resources)
    del req.required_resources["cluster"].items[:]  # gone; the rest as last resolved
    status = resource.struct_to_dict(fn.run(req).desired.composite.resource)["status"]
    assert status["clusterDeletion"]["phase"] == "Gone", status


def test_the_finalizing_list_does_not_follow_the_maps_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """``status.clusterDeletion.finalizing`` is the same whatever order the observed map gives.

    upb seeds its map hashing per process: two replicas iterate one request's map differently,
    and a status list in that order would flip between them (a status write for nothing).
    """
    scenario = next(s for s in DELETION_SCENARIOS if s.name == "cloudfront-managed")
    lists = []
    for reverse in (False, True):
        if reverse:
            monkeypatch.setattr(observed.Observed, "names", lambda self: list(self.resources)[::-1])
        world = _ready_world(scenario)
        world.delete_cluster()
        world.run(2)
        world.remove_cluster()
        seen = []
        for _ in range(90):  # the withdrawal layer by layer, then the last layer finalizing
            world.reconcile()
            seen.append((_record(world) or {}).get("finalizing"))
        lists.append(seen)
    assert max(len(f or ()) for f in lists[0]) >= 2, lists[0]
    assert lists[0] == lists[1]
