"""Lifecycle fault injection over random schedules (the default run plays 30; soak 1000+).

Each schedule takes a scenario and, reconcile by reconcile, injects: readiness flaps of
any composed resource, a control plane that goes unavailable (or reads uninitialized, or
cannot be read) after having been available, required objects briefly missing, a switch
between Crossplane 1.x (label-selected extra resources) and 2.x, and plugins removed from
or added to the spec mid-way. Then the faults stop.

Held: every deletion is exactly a node of a plugin removed at that reconcile (or a Usage
naming one), nothing else is ever deleted, no call fails or hangs, and the XR always
converges to Ready once the faults stop. Reproduce one schedule with its seed:
``pytest tests/test_faults.py -k 'seed-17'`` or ``play(17)``.

Deletion schedules (``play(seed, delete=True)``) also delete the CAPI cluster mid-way
(docs/architecture.md, "The cluster's own deletion"), remove it some reconciles later, and bring a new one of the same
name back (sometimes before the function has let go of the old one). Held on top: while
the cluster exists only removed plugins' nodes are deleted; once it is gone, everything
composed is withdrawn over a few reconciles in Usage order (never a resource while a Usage
of it is observed) and nothing new is created before it is all gone, even when the new
cluster is already there; no Release is ever uninstalled after the deletion began, none
ever hangs in an uninstall; the new cluster converges to Ready from scratch. Required
objects are not hidden once the deletion has begun: after a recorded deletion, a cluster
not found twice in a row is gone, by design.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests import strategies as gen
from tests.scenarios import SCENARIOS, Scenario

logging.configure(logging.Level.DISABLED)

FEATURE_PATHS = {
    "amazonVPC": ("networking", "amazonVPC"),
    "calico": ("networking", "calico"),
    "ebs": ("storage", "ebs"),
    "efs": ("storage", "efs"),
    "lbc": ("ingress", "awsLoadBalancerController"),
    "ccm": ("cloudProvider", "aws"),
    "externalDNS": ("dns", "externalDNS"),
}
AWS_ADDONS = {"amazonVPC", "ebs", "efs", "lbc", "externalDNS"}
DEFAULT_SCHEDULES = 30
# Reconciles from the cluster gone to everything withdrawn: seen gone twice, then six per
# layer of the Usage graph (the users dropped, gone from the API server three reconciles later,
# their Usages dropped and held one more by their finalizers, then what they used), as
# tests/test_deletion.py counts: 25 for the full example, 37 behind a Managed CloudFront issuer,
# with room to spare. Which scenario a seed plays depends on the length of SCENARIOS.
WITHDRAWAL_RECONCILES = 48


def features(spec: dict[str, Any]) -> set[str]:
    """The plugins a spec asks for, including those implied (issuer, webhook)."""
    out = {f for f, (a, b) in FEATURE_PATHS.items() if (spec.get(a) or {}).get(b) is not None}
    irsa = spec.get("irsa") or {}
    if irsa.get("mode") == "PodIdentity" and out & AWS_ADDONS:
        out.add("pod-identity-agent")
    if irsa.get("mode", "SelfHosted") == "SelfHosted" and out & AWS_ADDONS:
        out.add("irsa")
        webhook = irsa.get("podIdentityWebhook") or {}
        if webhook.get("install", True):
            out.add("webhook")
            if webhook.get("certManager", "Install") == "Install":
                out.add("cert-manager")
    if out & {"amazonVPC", "calico"}:
        out.add("cni")
    return out


def owner(node: str) -> str:
    """The feature a composed resource belongs to (independent of the function's own tables)."""
    if node == "helm-provider-config":
        return "always"
    if node == "cni-release":
        return "cni"
    for prefix, feature in (
        ("irsa-", "irsa"),
        ("cert-manager-", "cert-manager"),
        ("pod-identity-webhook-", "webhook"),
        ("pod-identity-agent-", "pod-identity-agent"),
        ("vpc-cni-", "amazonVPC"),
        ("sg-vpc-cni-", "amazonVPC"),
        ("calico-", "calico"),
        ("sg-calico-", "calico"),
        ("ebs-", "ebs"),
        ("efs-", "efs"),
        ("lbc-", "lbc"),
        ("sg-lbc-", "lbc"),
        ("ccm-", "ccm"),
        ("external-dns-", "externalDNS"),
    ):
        if node.startswith(prefix):
            return feature
    raise AssertionError(f"a composed resource of no known plugin: {node}")


def usage_ends(usage: str, names: set[str]) -> tuple[str, str]:
    """(by, of) of ``usage-<by>-<of>``, split against the known node names."""
    rest = usage.removeprefix("usage-")
    for by in names:
        if rest.startswith(by + "-") and rest[len(by) + 1 :] in names:
            return by, rest[len(by) + 1 :]
    raise AssertionError(f"cannot split {usage} into two known nodes")


def expected_deletions(before: set[str], removed: set[str], known: set[str]) -> set[str]:
    """What removing ``removed`` features must delete from the composed set ``before``: their
    resources, and the Usages of those or by them, or by a user already withdrawn (a Usage waits
    for its user to be gone from the API server, whatever becomes of what it used)."""
    gone = {n for n in before if not n.startswith("usage-") and owner(n) in removed}
    for n in before:
        if n.startswith("usage-"):
            by, of = usage_ends(n, known)
            if by in gone or of in gone or by not in before:
                gone.add(n)
    return gone


def used_when_deleted(rec: Any, before: set[str], known: set[str]) -> list[str]:
    """Resources deleted while a Usage of them was still observed (Crossplane would refuse)."""
    return [
        n
        for n in rec.deleted
        if not n.startswith("usage-")
        and any(u.startswith("usage-") and usage_ends(u, known)[1] == n for u in before)
    ]


@dataclass
class Outcome:
    """What one schedule did."""

    seed: int
    scenario: str
    reconciles: int = 0
    requests: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    deletions: int = 0
    gone_at: int = 0
    dropped_at: int | None = None  # the old cluster's withdrawal began
    emptied_at: int | None = None  # and was over: nothing of it left
    flapped: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    changes: list[str] = field(default_factory=list)


def _toggle_feature(rng: random.Random, spec: dict[str, Any], original: dict[str, Any]) -> str | None:
    """Remove a present plugin, put back a removed one, or add a new CSI/ingress one."""
    present = {f for f, (a, b) in FEATURE_PATHS.items() if (spec.get(a) or {}).get(b) is not None}
    had = {f for f, (a, b) in FEATURE_PATHS.items() if (original.get(a) or {}).get(b) is not None}
    options = [("remove", f) for f in sorted(present)]
    options += [("restore", f) for f in sorted(had - present)]
    # A CNI is not switched for another one; CSI drivers and the ingress can be added.
    options += [("add", f) for f in sorted({"ebs", "efs", "lbc"} - present - had)]
    if not options:
        return None
    action, feature = rng.choice(options)
    a, b = FEATURE_PATHS[feature]
    if action == "remove":
        del spec[a][b]
        if not spec[a]:
            del spec[a]
    else:
        value = copy.deepcopy((original.get(a) or {}).get(b, {}))
        spec.setdefault(a, {})[b] = value
    return f"{action}:{feature}"


def play(
    seed: int,
    *,
    scenario: Scenario | None = None,
    flap_rate: float | None = None,
    inner: Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse] = fn.run,
    prepare: Callable[[InMemoryCrossplane], None] | None = None,
    delete: bool = False,
) -> Outcome:
    """Play one random fault schedule; assert on every reconcile; return what it did.

    ``inner`` answers the requests (default ``fn.run``); ``prepare`` may change the world
    (add objects) before the first reconcile; ``delete`` deletes the cluster mid-way.
    """
    rng = random.Random(seed)
    chosen = rng.choice(SCENARIOS)
    scenario = scenario or chosen
    out = Outcome(seed, scenario.name)
    runner = gen.CountingRunner(inner=inner)
    world = scenario.world(runner=runner, ready_delay=rng.choice([1, 1, 2, 3]))
    if prepare is not None:
        prepare(world)
    original_spec = copy.deepcopy(world.xr["spec"])
    legacy = "namespace" not in world.xr["metadata"]
    steps = rng.randrange(30, 60)
    init_at = rng.randrange(1, 7)
    avail_at = init_at + rng.randrange(0, 7)
    drawn_rate = rng.choice([0.0, 0.05, 0.15, 0.4])
    flap_rate = drawn_rate if flap_rate is None else flap_rate
    events: dict[int, list[tuple[str, Any]]] = {}

    def at(step: int, event: str, arg: Any = None) -> None:
        events.setdefault(step, []).append((event, arg))

    for _ in range(rng.randrange(0, 4)):
        start = rng.randrange(avail_at + 1, steps)
        kind = rng.choice(["cp-unavailable", "cp-uninitialized", "cp-unreadable"])
        at(start, kind, rng.randrange(1, 7))
    kinds = sorted({f"{o['kind']}/{o['metadata']['name']}" for o in world.required})
    for _ in range(rng.randrange(0, 4)):
        hidden = set(rng.sample(kinds, rng.randrange(1, len(kinds) + 1)))
        at(rng.randrange(1, steps), "hide", (hidden, rng.randrange(1, 6)))
    if legacy and rng.random() < 0.5:
        at(rng.randrange(2, steps), "crossplane-mode", None)
    if rng.random() < 0.3:
        at(rng.randrange(2, steps), "capabilities", None)
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        at(rng.randrange(3, steps), "plugin", None)
    delete_at = gone_at = back_at = steps + 1
    if delete:
        delete_at = rng.randrange(avail_at + 1, steps - 6)
        gone_at = delete_at + rng.randrange(2, 6)
        # Sometimes the new cluster is there before the function let go of the old one.
        back_at = gone_at + rng.choice([1, 2, 4, 8])
        out.gone_at = gone_at
        steps = max(steps, back_at + 4, gone_at + WITHDRAWAL_RECONCILES)

    cp_down_until = -1
    cp_state = "starting"
    hides: list[tuple[set[str], int]] = []
    known: set[str] = set()
    ever: set[str] = set()

    recorded_at: int | None = None
    fresh_at: int | None = None  # the new cluster's: its record cleared
    for step in range(1, steps + 1):
        # --- the world changes -------------------------------------------------
        if step == delete_at:
            world.delete_cluster(cascade=False)
            out.faults["cluster-deleted"] += 1
        elif delete_at < step < gone_at:
            world.delete_cluster()
        elif step == gone_at:
            world.remove_cluster()
        elif step == back_at:
            world.recreate_cluster()
            out.faults["cluster-recreated"] += 1
        ever |= features(world.xr["spec"])
        for event, arg in events.get(step, []):
            if event != "plugin":
                out.faults[event] += 1
            if event.startswith("cp-"):
                cp_down_until = max(cp_down_until, step + arg)
                cp_state = event
            elif event == "hide":
                hides.append((arg[0], step + arg[1]))
            elif event == "crossplane-mode":
                world.crossplane_v1 = not world.crossplane_v1
            elif event == "capabilities":
                world.capabilities = not world.capabilities
            elif event == "plugin":
                change = _toggle_feature(rng, world.xr["spec"], original_spec)
                if change:
                    out.faults[change.split(":")[0] + "-plugin"] += 1
                    out.changes.append(f"step {step} {change}")
        # Crossplane 1.x never advertises capabilities.
        world.capabilities = world.capabilities and not world.crossplane_v1
        # A removed plugin is withdrawn over a few reconciles, in Usage order.
        absent = ever - features(world.xr["spec"])
        if step < init_at:
            world.set_control_plane(initialized=False, available=False)
        elif step < avail_at:
            world.set_control_plane(initialized=True, available=False)
        elif step < cp_down_until and cp_state == "cp-unavailable":
            world.set_control_plane(initialized=True, available=False)
        elif step < cp_down_until and cp_state == "cp-uninitialized":
            world.set_control_plane(initialized=False, available=False)
        else:
            world.set_control_plane(initialized=True, available=True)
        hidden: set[str] = set()
        for names, until in hides:
            if step < until and step < delete_at:
                hidden |= names
        cp = world.control_plane()
        if step < min(cp_down_until, delete_at) and cp_state == "cp-unreadable" and cp is not None:
            hidden.add(f"{cp['kind']}/{cp['metadata']['name']}")
        world.hidden = hidden
        out.nodes |= set(world.composed)
        world.held_down = {n for n in sorted(world.composed) if rng.random() < flap_rate}
        out.flapped |= world.held_down
        out.faults["flap"] += len(world.held_down)
        out.faults["hidden-object"] += len(hidden)

        # --- Crossplane reconciles --------------------------------------------
        composed_before = set(world.composed)
        rec = world.reconcile()
        known |= set(world.composed) | composed_before
        assert rec.fatal is None, f"seed {seed} step {step}: FATAL {rec.fatal}"
        # Once the cluster is gone, all of the old cluster's is withdrawn; before, only what
        # removed plugins composed. Never anything while a Usage of it is observed.
        withdrawing = step > gone_at and out.emptied_at is None
        want = composed_before if withdrawing else expected_deletions(composed_before, absent, known)
        if withdrawing and rec.deleted and out.dropped_at is None:
            out.dropped_at = step
        assert set(rec.deleted) <= want and not used_when_deleted(rec, composed_before, known), (
            f"seed {seed} ({scenario.name}) step {step}: deleted {sorted(rec.deleted)}, "
            f"expected only {sorted(want)}, none still used (removed plugins: {sorted(absent)})"
        )
        assert rec.deleted_in_use == [], f"seed {seed} step {step}: deleted in use {rec.deleted_in_use}"
        if withdrawing:
            # Nothing new while the old cluster's resources go, even for a new cluster.
            assert rec.created == [], f"seed {seed} step {step}: created {rec.created} while withdrawing"
            if not world.composed:
                out.emptied_at = step
            assert step < gone_at + WITHDRAWAL_RECONCILES, (
                f"seed {seed} ({scenario.name}) step {step}: {sorted(world.composed)} left "
                "after the cluster was gone"
            )
        assert world.hung == [], f"seed {seed}: Releases hang uninstalling: {world.hung}"
        recorded = "clusterDeletion" in world.xr["status"]
        if recorded_at is None and recorded:
            recorded_at = step
        if fresh_at is None and step >= back_at and not recorded:
            fresh_at = step
        # Once the function has seen the deletion, the Releases carry the orphan policy
        # from the next reconcile: a plugin removed then is forgotten, not uninstalled
        # (until a new cluster of the name is composed: its Releases uninstall as usual).
        late = [
            u
            for u in world.uninstalls
            if recorded_at is not None and recorded_at < u[0] and (fresh_at is None or u[0] < fresh_at)
        ]
        assert not late, f"seed {seed} step {step}: uninstalled after the deletion: {late}"
        out.deletions += len(rec.deleted)

    # --- the faults stop: the XR converges ----------------------------------------
    world.held_down.clear()
    world.hidden = set()
    world.set_control_plane(initialized=True, available=True)
    absent = ever - features(world.xr["spec"])
    for _ in range(60):
        composed_before = set(world.composed)
        rec = world.reconcile()
        known |= set(world.composed) | composed_before
        assert rec.fatal is None, rec.fatal
        assert set(rec.deleted) <= expected_deletions(composed_before, absent, known), (
            f"seed {seed}: deleted {rec.deleted} after the faults stopped"
        )
        assert rec.deleted_in_use == [], f"seed {seed}: deleted in use {rec.deleted_in_use}"
        if world.xr_ready and not expected_deletions(set(world.composed), absent, known):
            break
    assert world.xr_ready, f"seed {seed} ({scenario.name}) did not converge: {world.xr['status']}"
    left = expected_deletions(set(world.composed), absent, known)
    assert not left, f"seed {seed}: removed plugins' resources left: {sorted(left)}"
    out.reconciles = world.step
    out.requests = runner.calls
    return out


def record(o: Outcome) -> None:
    """Add a schedule's figures to the run's."""
    gen.figure("faults", "schedules")
    gen.figure("faults", "reconciles", o.reconciles)
    gen.figure("faults", "requests", o.requests)
    gen.figure("faults", "planned deletions", o.deletions)
    gen.figure("faults", "unexpected deletions", 0)
    for k, v in o.faults.items():
        gen.figure("faults", f"fault {k}", v)


@pytest.mark.parametrize("seed", range(DEFAULT_SCHEDULES), ids=lambda s: f"seed-{s}")
def test_random_fault_schedule(seed: int) -> None:
    record(play(seed))


DELETION_SCHEDULES = 20


@pytest.mark.parametrize("seed", range(DELETION_SCHEDULES), ids=lambda s: f"seed-{s}")
def test_random_fault_schedule_with_the_clusters_deletion(seed: int) -> None:
    o = play(10_000 + seed, delete=True)
    assert o.dropped_at is not None, f"seed {10_000 + seed}: never withdrew the old cluster's"
    assert o.emptied_at is not None, f"seed {10_000 + seed}: the old cluster's never all gone"
    record(o)
    gen.figure("faults", "cluster deletions")
    gen.figure("faults", "reconciles from gone to withdrawal", o.dropped_at - o.gone_at)
    gen.figure("faults", "reconciles of the withdrawal", o.emptied_at - o.dropped_at + 1)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_node_flaps(scenario: Scenario) -> None:
    """Dense flapping: every composed resource of the scenario is held not-ready at some point."""
    seen: set[str] = set()
    flapped: set[str] = set()
    for seed in range(20_000, 20_040):
        o = play(seed, scenario=scenario, flap_rate=0.3)
        record(o)
        seen |= o.nodes
        flapped |= o.flapped
        if seen <= flapped:
            break
    assert seen - flapped == set()


def test_removing_every_plugin_in_turn_deletes_exactly_its_nodes() -> None:
    """A deterministic walk: each plugin of the full example removed, re-added, converged."""
    scenario = next(s for s in SCENARIOS if s.name == "selfhosted-full")
    world: InMemoryCrossplane = scenario.world(staged=False)
    world.run(15)
    assert world.xr_ready
    original = copy.deepcopy(world.xr["spec"])
    known = set(world.composed)
    for feature in ("efs", "lbc", "ebs", "amazonVPC"):
        a, b = FEATURE_PATHS[feature]
        before = set(world.composed)
        feats = features(world.xr["spec"])
        del world.xr["spec"][a][b]
        removed = feats - features(world.xr["spec"])
        deleted: set[str] = set()
        for _ in range(20):
            composed_before = set(world.composed)
            rec = world.reconcile()
            assert not used_when_deleted(rec, composed_before, known), feature
            deleted |= set(rec.deleted)
        assert deleted == expected_deletions(before, removed, known), feature
        assert deleted, feature
        world.xr["spec"][a][b] = copy.deepcopy(original[a][b])
        for _ in range(20):
            rec = world.reconcile()
            assert rec.deleted == []
            known |= set(world.composed)
            if world.xr_ready:
                break
        assert world.xr_ready, feature
