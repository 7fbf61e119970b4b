"""The planning core: spec + observed state + cluster facts -> desired state.

Pure: no I/O, no clock, no randomness, so the same request always yields the
same plan. ``fn.py`` (the gRPC runner), ``render`` and ``simulate`` all call it
through ``fn.run``.

The rules (docs/architecture.md, "The resource graph"):
- a node is emitted when its gates hold;
- a node already observed is ALWAYS emitted again, whatever its gates say now
  (if its body cannot be rebuilt, the observed spec is carried over unchanged),
  so a flapping dependency never makes Crossplane delete anything;
- only removing a plugin from the spec removes its nodes (and its Usages);
- the composite is held not-ready while any node of a wanted plugin is held back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from google.protobuf import struct_pb2

from function import deletion, registry, structs, upgrade
from function.cluster import REQ_FINALIZING, REQ_USAGES, REQ_USER_OF, Selector
from function.context import CallContext
from function.flavour import USAGE_COMPOSITE_LABEL, StructWriter
from function.following.target import HELD
from function.graph import ConditionOut, MissingFactError, Node, Plugin, Readiness, Wait
from function.registry import ADDONS, USAGES
from function.spec import OnFailure

HELM_PROVIDER_CONFIG = "helm-provider-config"
PROTECT_CLUSTER_USAGE = "usage-helm-provider-config-cluster"
CLUSTER_DELETING, CLUSTER_DELETED = "ClusterDeleting", "ClusterDeleted"

PLUGIN_BUILDERS: tuple[Callable[[CallContext], Plugin | None], ...] = tuple(
    a.plugin for a in ADDONS
)
STATUS_WRITERS = tuple(a.status for a in ADDONS if a.status is not None)
# A Usage's composition-resource-name -> (by, of).
USAGE_ENDS: dict[str, tuple[str, str]] = {f"usage-{u.by}-{u.of}": (u.by, u.of) for u in USAGES}
# What some Usage may use: withdrawn only once no Usage of it is left in the API server.
MAY_BE_USED = frozenset(of for _, of in USAGE_ENDS.values())
# The requirement that lists the XR's Usages while something that may be used is withdrawn.

PENDING, INSTALLING, READY, BLOCKED = "Pending", "Installing", "Ready", "Blocked"


class DesiredResource(NamedTuple):
    """One composed resource to emit: a fresh body, or the observed spec carried over.

    A NamedTuple (cheaper to make than a dataclass): up to ~45 are made per call.
    """

    name: str
    ready: bool
    body: dict[str, Any] | StructWriter | None = None
    carried: struct_pb2.Struct | None = None


class PluginStatus(NamedTuple):
    """One entry of ``status.plugins[]``.

    A NamedTuple (cheaper to make than a frozen dataclass): one or two per plugin per call.
    """

    name: str
    phase: str
    waiting_for: str = ""
    message: str = ""
    # What it waits for as a label of bounded cardinality (metrics); not in the status.
    reason: str = ""
    # Day two (function/upgrade.py), of its Release: the chart version helm deployed, the one
    # it moves to, the last one that ran healthy, its upgrade phase and since when.
    version: str = ""
    target_version: str = ""
    last_healthy_version: str = ""
    upgrade: str = ""
    upgrade_since: str = ""

    def as_dict(self) -> dict[str, str]:
        """The status entry (empty fields left out)."""
        d = {"name": self.name, "phase": self.phase}
        for key, value in (
            ("waitingFor", self.waiting_for),
            ("message", self.message),
            ("version", self.version),
            ("targetVersion", self.target_version),
            ("lastHealthyVersion", self.last_healthy_version),
            ("upgrade", self.upgrade),
            ("upgradeSince", self.upgrade_since),
        ):
            if value:
                d[key] = value
        return d


@dataclass(frozen=True)
class ResultOut:
    """An event-like result: only emitted on transitions."""

    severity: str  # "Normal" | "Warning"
    reason: str
    message: str


@dataclass
class Plan:
    """Everything one call decides."""

    resources: list[DesiredResource] = field(default_factory=list)
    held_back: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    plugins: list[PluginStatus] = field(default_factory=list)
    conditions: list[ConditionOut] = field(default_factory=list)
    results: list[ResultOut] = field(default_factory=list)
    all_ready: bool = False
    # Required resources to ask for on top of the cluster's (REQ_USAGES).
    requirements: dict[str, Selector] = field(default_factory=dict)
    # Seconds until a soak or a progress deadline ends: call again by then.
    due_in: float | None = None


def _helm_provider_config(ctx: CallContext) -> dict[str, Any]:
    return ctx.flavour.helm_provider_config_resource(
        namespace=ctx.facts.namespace, kubeconfig_secret=ctx.names.kubeconfig_secret
    )


def _first_wait(ctx: CallContext, node: Node) -> Wait | None:
    for gate in node.gates:
        wait = gate(ctx)
        if wait is not None:
            return wait
    return None


class _Emitter:
    """Decides emit / carry over / hold back for nodes, and records the outcome."""

    def __init__(
        self,
        ctx: CallContext,
        plan: Plan,
        hold_new: Wait | None = None,
        upgrades: upgrade.Upgrades | None = None,
    ) -> None:
        self.ctx = ctx
        self.plan = plan
        self.emitted: set[str] = set()
        # Why nothing that does not exist yet is emitted (the cluster is going away).
        self.hold_new = hold_new
        # The day-two decisions: the Release each observed one becomes.
        self.decisions = upgrades.decisions if upgrades is not None else {}

    def node(self, node: Node) -> Wait | None:
        """Emit ``node`` if it may be; return why not otherwise."""
        ctx = self.ctx
        observed = ctx.observed.exists(node.name)
        if not observed and self.hold_new is not None:
            return self.hold_new
        # Gates decide only the first emission: an observed node is emitted again
        # whatever they say, so they are not even asked (a gate costs time on every call).
        wait = None if observed else _first_wait(ctx, node)
        body: dict[str, Any] | StructWriter | None = None
        decision = self.decisions.get(node.name)
        if decision is not None and decision.body is not None:
            body = _copier(decision.body)
        elif wait is None:
            try:
                body = node.build(ctx)
            except MissingFactError as err:
                wait = err.wait
        if body is None and not observed:
            return wait or Wait("unknown")
        carried = ctx.observed.get(node.name) if body is None else None
        if carried is not None and ctx.flavour.orphan_releases and _is_release(carried):
            carried = ctx.flavour.orphaned_copy(carried)
        ready = node.name not in ctx.moving and ctx.observed.ready(node.name, node.readiness)
        self.plan.resources.append(DesiredResource(node.name, ready, body, carried))
        self.emitted.add(node.name)
        return None


def _hand_over(ctx: CallContext, plan: Plan, name: str) -> bool:
    """A Release another installer now runs: carried with the orphan policy until observed so.

    Returns whether it is still wanted (this call orphans it). Once orphaned, it is withdrawn
    like anything no longer wanted, in Usage order, and deleted without a helm uninstall: the
    workloads stay for the other installer (CAPA's EKS add-on takes over the agent's DaemonSet).
    """
    observed = ctx.observed.get(name)
    if observed is None or ctx.flavour.is_orphaned(observed):
        return False
    ready = ctx.observed.ready(name, Readiness.RELEASE)
    plan.resources.append(
        DesiredResource(name, ready, carried=ctx.flavour.orphaned_copy(observed))
    )
    return True


def _copier(body: struct_pb2.Struct) -> StructWriter:
    """A writer of ``body`` (the Release a day-two decision made).

    Nothing to copy when ``body`` is the very Struct written to (built where
    ``CallContext.struct_for`` said: the response's own).
    """

    def write(out: struct_pb2.Struct) -> None:
        if out is not body:
            out.CopyFrom(body)

    return write


def _is_release(obj: struct_pb2.Struct) -> bool:
    return "kind" in obj.fields and obj.fields["kind"].string_value == "Release"


def _plugin_status(
    ctx: CallContext,
    plugin: Plugin,
    held: list[tuple[Node, Wait]],
    emitted: set[str],
    decisions: dict[str, upgrade.Decision],
) -> PluginStatus:
    if plugin.waits_for is not None and not plugin.nodes:
        return _noted(plugin, _waits_for_another(plugin, plugin.waits_for(ctx)))
    names = [n.name for n in plugin.nodes]
    emitted_here = [n for n in names if n in emitted]
    not_ready = [
        n.name
        for n in plugin.nodes
        if n.name in emitted and not ctx.observed.ready(n.name, n.readiness)
    ]
    status = _plugin_phase(plugin, held, emitted_here, not_ready)
    if not_ready and status.phase != READY:
        status = _diagnosed(ctx, plugin, not_ready) or _slow_notes(plugin, not_ready, status)
    ours = [decisions[n] for n in names if n in decisions]
    if ours:
        status = _day_two(status, ours)
    return _noted(plugin, status)


def _diagnosed(ctx: CallContext, plugin: Plugin, not_ready: list[str]) -> PluginStatus | None:
    """Blocked when a node that is not Ready has a known failure its provider reports."""
    for node in plugin.nodes:
        observed = ctx.observed.get(node.name) if node.diagnose and node.name in not_ready else None
        found = node.diagnose(observed) if node.diagnose and observed is not None else ""
        if found:
            waiting_for, message = f"{node.name} Ready", f"{node.name}: {found}"
            return PluginStatus(plugin.name, BLOCKED, waiting_for, message, "provider failure")
    return None


def _noted(plugin: Plugin, status: PluginStatus) -> PluginStatus:
    return _with_note(status, plugin.note)


def _with_note(status: PluginStatus, note: str) -> PluginStatus:
    if not note or note in status.message:
        return status
    message = f"{status.message}; {note}" if status.message else note
    return status._replace(message=message)


def _waits_for_another(plugin: Plugin, wait: Wait | None) -> PluginStatus:
    """A plugin with nothing of its own: Ready once what it waits for holds, Pending until."""
    if wait is None:
        return PluginStatus(plugin.name, READY)
    phase = BLOCKED if wait.blocked else PENDING
    message = wait.message or f"waiting for {wait.waiting_for}"
    return PluginStatus(plugin.name, phase, wait.waiting_for, message, wait.label)


def _day_two(status: PluginStatus, decisions: list[upgrade.Decision]) -> PluginStatus:
    """The plugin's entry with its Release's day-two record (function/upgrade.py).

    A plugin with two Releases (Calico's CRDs and operator, cert-manager and the webhook)
    shows the one that moves, failed or waits, else its last one; every message is kept.
    """
    shown = next(
        (d for d in decisions if d.phase not in (None, upgrade.Phase.HEALTHY) or d.wait),
        decisions[-1],
    )
    record = shown.record
    # Built whole (dataclasses.replace reads the fields' declarations on every call: this
    # runs for every plugin of every call).
    status = PluginStatus(
        status.name,
        status.phase,
        status.waiting_for,
        status.message,
        status.reason,
        version=shown.running or "",
        target_version=shown.target_version or "",
        last_healthy_version=shown.last_healthy_version or "",
        upgrade=str(record.phase) if record is not None else "",
        upgrade_since=record.since if record is not None else "",
    )
    for d in decisions:
        status = _with_note(status, d.message)
    return status


def _slow_notes(plugin: Plugin, not_ready: list[str], status: PluginStatus) -> PluginStatus:
    """Say why a node known to be slow is not Ready yet (what is waited for may be behind it)."""
    message = status.message
    for node in plugin.nodes:
        if node.slow and node.name in not_ready and node.slow not in message:
            message = f"{message}; {node.name}: {node.slow}" if message else node.slow
    if message == status.message:
        return status
    return status._replace(message=message)


def _plugin_phase(
    plugin: Plugin,
    held: list[tuple[Node, Wait]],
    emitted_here: list[str],
    not_ready: list[str],
) -> PluginStatus:
    blocked = next((w for _, w in held if w.blocked), None)
    if blocked is not None:
        return PluginStatus(
            plugin.name, BLOCKED, blocked.waiting_for, blocked.message, blocked.label
        )
    if not held and not not_ready:
        return PluginStatus(plugin.name, READY)
    if held:
        node, wait = held[0]
        msg = wait.message or f"waiting for {wait.waiting_for}"
        phase = INSTALLING if emitted_here else PENDING
        return PluginStatus(plugin.name, phase, wait.waiting_for, f"{node.name}: {msg}", wait.label)
    waiting_for = f"{not_ready[0]} Ready"
    return PluginStatus(
        plugin.name,
        INSTALLING,
        waiting_for,
        f"waiting for {', '.join(not_ready)} to become Ready",
        waiting_for,
    )


def _usages(ctx: CallContext, plan: Plan, wanted: set[str], composite: str) -> None:
    ends: dict[str, struct_pb2.Struct] = {}  # a node is the end of up to 5 Usages

    def end(node: str, ref: tuple[str, str, str]) -> struct_pb2.Struct:
        if node not in ends:
            ends[node] = ctx.flavour.usage_end(ref)
        return ends[node]

    for by, of, reason in USAGES:
        if by not in wanted or of not in wanted:
            continue
        name = f"usage-{by}-{of}"
        by_ref, of_ref = ctx.observed.ref(by), ctx.observed.ref(of)
        if by_ref is not None and of_ref is not None:
            body = ctx.flavour.usage(end(of, of_ref), end(by, by_ref), reason, composite)
            plan.resources.append(DesiredResource(name, ready=True, body=body))
        elif ctx.observed.exists(name):
            # An end is briefly unobserved: keep the Usage exactly as it was.
            plan.resources.append(DesiredResource(name, ready=True, carried=ctx.observed.get(name)))


def _withdraw_in_usage_order(
    ctx: CallContext, plan: Plan, wanted: set[str], composite: str
) -> None:
    """Withdraw what is no longer wanted one layer per reconcile, in Usage order.

    What is no longer wanted: a removed plugin's resources, or everything once the
    cluster is gone (``_withdrawal_plan``).

    Crossplane deletes the composed resources a function stops emitting in no particular
    order, stops at the first deletion its usage webhook refuses, and strips the composite
    label from each first, so a Usage it deletes that way no longer waits for its user
    (Crossplane v2.4, DeletingComposedResourceGarbageCollector and the usage controller).
    Withdrawing a used resource together with its Usages therefore ends in refused
    deletions, retries and no guaranteed order. So a resource that is no longer wanted is
    carried over unchanged while any Usage of it is observed, and a Usage is carried over
    while its user is itself being withdrawn and still there: users go first, then their
    Usages, then what they used.

    Crossplane stops observing a resource as soon as it deletes it, while its finalizers
    keep it (and the usage webhook still counts a Usage) a little longer: a Release while
    helm uninstalls it, an AWS resource while the provider deletes it. So "still there" is
    asked of the API server: a Usage whose user Crossplane no longer observes is carried
    while the API server still has that user (asked for by name, REQ_USER_OF); and before
    a resource some Usage may use goes, the function asks for the XR's Usages that still
    exist (REQ_USAGES, by USAGE_COMPOSITE_LABEL) and carries it while one of them uses it.
    A Usage whose used resource stays waits for its user all the same: that resource may be
    withdrawn next (the CNI after an add-on), while the user is still uninstalling.
    """
    observed = ctx.observed
    names = observed.names()
    carry = _still_used(ctx, plan, [n for n in names if n not in wanted], composite)
    for name in names:
        ends = USAGE_ENDS.get(name)
        if ends is None or name in wanted:
            continue
        if ends[0] in wanted:
            continue
        if observed.exists(ends[0]) or _user_in_api(ctx, plan, name):
            carry.append(name)
    for name in carry:
        carried = observed.get(name)
        if carried is not None and ctx.flavour.orphan_releases and _is_release(carried):
            carried = ctx.flavour.orphaned_copy(carried)
        if name in USAGE_ENDS:
            readiness = Readiness.ALWAYS
        elif carried is not None and _is_release(carried):
            readiness = Readiness.RELEASE
        else:
            readiness = Readiness.CONDITION
        plan.resources.append(
            DesiredResource(name, observed.ready(name, readiness), carried=carried)
        )


def _users_leaving(ctx: CallContext, carried: list[str], kept: set[str]) -> list[str]:
    """The users of carried Usages that the API server still has, no longer observed.

    Crossplane drops a composed resource from the observed ones once it deleted it, while it
    may stay (a Release while helm uninstalls it, or cannot reach the cluster).
    """
    users = (USAGE_ENDS[n][0] for n in carried if n in USAGE_ENDS)
    return sorted({u for u in users if not ctx.observed.exists(u) and u not in kept})


def _still_used(ctx: CallContext, plan: Plan, unwanted: list[str], composite: str) -> list[str]:
    """Those of ``unwanted`` a Usage still uses: observed, or (REQ_USAGES) in the API server."""
    observed = ctx.observed
    used = {USAGE_ENDS[n][1] for n in observed.names() if n in USAGE_ENDS}
    out = []
    for name in unwanted:
        if name in used:
            out.append(name)
        elif name in MAY_BE_USED:
            plan.requirements[REQ_USAGES] = _usages_selector(ctx, composite)
            in_api = observed.used_in_api
            if in_api is None or observed.ref(name) in in_api:
                out.append(name)  # until the API server is seen to hold no Usage of it
    return out


def _user_in_api(ctx: CallContext, plan: Plan, usage: str) -> bool:
    """Whether the user of the observed Usage ``usage`` may still be in the API server.

    Asks for it by the name the Usage holds; True until Crossplane has answered.
    """
    obj = ctx.observed.get(usage)
    by = structs.struct_at(obj, "spec", "by") if obj is not None else None
    name = structs.str_at(by, "resourceRef", "name") if by is not None else None
    if by is None or name is None:
        return False  # a Usage that names no user holds nothing back
    return _in_api(
        ctx,
        plan,
        REQ_USER_OF + usage,
        (structs.str_at(by, "apiVersion") or "", structs.str_at(by, "kind") or "", name),
    )


def _in_api(ctx: CallContext, plan: Plan, requirement: str, ref: tuple[str, str, str]) -> bool:
    """Whether the API server may still have ``ref``, asked for by name under ``requirement``.

    True until Crossplane has answered.
    """
    plan.requirements[requirement] = Selector(
        *ref[:2],
        match_name=ref[2],
        namespace=ctx.facts.namespace if ctx.flavour.namespaced else None,
    )
    return ctx.observed.found_by_name.get(requirement, True)


def _usages_selector(ctx: CallContext, composite: str) -> Selector:
    """The XR's Usages, those Crossplane has forgotten and still deletes included."""
    return Selector(
        ctx.flavour.api_version("Usage"),
        "Usage",
        match_labels=((USAGE_COMPOSITE_LABEL, composite),),
        namespace=ctx.facts.namespace if ctx.flavour.namespaced else None,
    )


def _withdrawing(names: list[str]) -> str:
    """What PluginsReady adds while resources the spec no longer asks for are still there.

    A withdrawal can take as long as an uninstall does, or for ever while the workload
    cluster cannot be reached: the XR says so rather than nothing.
    """
    if not names:
        return ""
    usages = sum(1 for n in names if n.startswith("usage-"))
    parts = sorted(n for n in names if not n.startswith("usage-"))
    if usages:
        parts.append(f"{usages} Usage(s)")
    return "; still withdrawing what the spec no longer asks for, in Usage order: " + ", ".join(
        parts
    )


def _summary(plugins: list[PluginStatus], withdrawing: list[str]) -> ConditionOut:
    also = _withdrawing(withdrawing)
    if not plugins:
        return ConditionOut(
            "PluginsReady", "True", "NoPlugins", "the spec asks for no add-ons" + also
        )
    if all(p.phase == READY for p in plugins):
        return ConditionOut(
            "PluginsReady",
            "True",
            "AllPluginsReady",
            f"{len(plugins)} plugin(s) ready: " + ", ".join(p.name for p in plugins) + also,
        )
    blocked = [p for p in plugins if p.phase == BLOCKED]
    if blocked:
        msg = "; ".join(f"{p.name}: {p.message}" for p in blocked)
        return ConditionOut("PluginsReady", "False", "Blocked", msg + also)
    waiting = [p for p in plugins if p.phase != READY]
    msg = "; ".join(f"{p.name} waits for {p.waiting_for}" for p in waiting)
    return ConditionOut("PluginsReady", "False", "Waiting", msg + also)


def _status(
    ctx: CallContext, plugins: list[Plugin], statuses: list[PluginStatus]
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for write in STATUS_WRITERS:
        status.update(write(ctx))
    roles = {}
    for p in plugins:
        if p.role is not None:
            arn = ctx.observed.arn(p.role.node)
            if arn:
                roles[p.role.status_key] = arn
    # Left out when empty: Crossplane applies the XR status with server-side apply, which
    # turns an empty map it owned entries of into null, and the XRD's object type refuses
    # null (the XR would stay unsynced). Not applying the field removes it the same way.
    if roles:
        status["roleARNs"] = roles
    status["plugins"] = [s.as_dict() for s in statuses]
    if ctx.rollout is not None:  # which rollout, wave and revision, and how it runs here
        status["rollout"] = ctx.rollout.report(statuses)
    return status


def _transitions(xr: struct_pb2.Struct, plan: Plan) -> None:
    before = {
        structs.str_at(p, "name"): structs.str_at(p, "phase")
        for p in structs.structs_at(xr, "status", "plugins")
    }
    for p in plan.plugins:
        was = before.pop(p.name, None)
        if was == p.phase:
            continue
        if p.phase == BLOCKED:
            plan.results.append(
                ResultOut("Warning", "PluginBlocked", f"{p.name} is blocked: {p.message}")
            )
        else:
            detail = f" (waiting for {p.waiting_for})" if p.waiting_for else ""
            plan.results.append(
                ResultOut(
                    "Normal", f"Plugin{p.phase}", f"{p.name}: {was or 'new'} -> {p.phase}{detail}"
                )
            )
    for name in sorted(n for n in before if n):
        plan.results.append(ResultOut("Normal", "PluginRemoved", f"{name} removed from the spec"))
    previous = {
        structs.str_at(c, "type"): (structs.str_at(c, "status"), structs.str_at(c, "reason"))
        for c in structs.structs_at(xr, "status", "conditions")
    }
    for cond in plan.conditions:
        if previous.get(cond.type) == (cond.status, cond.reason):
            continue
        if cond.event:
            plan.results.append(ResultOut(cond.event, cond.reason, cond.message))
    _rollout_transition(xr, plan)


def _rollout_transition(xr: struct_pb2.Struct, plan: Plan) -> None:
    """An event when the XR starts keeping what a rollout gave it (``Held``), or stops."""
    now = plan.status.get("rollout", {})
    held = now.get("phase") == HELD
    was = structs.str_at(xr, "status", "rollout", "phase") == HELD
    if held and not was:
        plan.results.append(ResultOut("Warning", "RolloutHeld", now["reason"]))
    elif was and not held:
        message = (
            f"no longer held: follows rollout {now['name']} ({now.get('phase')})"
            if now
            else "no longer held: the XR and the Composition name what it runs"
        )
        plan.results.append(ResultOut("Normal", "RolloutReleased", message))


def _protect_cluster(ctx: CallContext, plan: Plan, hold_new: Wait | None, composite: str) -> None:
    """Input.protectCluster: the helm ProviderConfig uses the CAPI Cluster.

    See docs/architecture.md, "The cluster's own deletion".

    Crossplane's usage webhook then refuses to delete the Cluster until the
    ProviderConfig is gone, which is after every Release was uninstalled; with
    replayDeletion the refused deletion is sent again at that moment.
    """
    if not ctx.step.protect_cluster:
        return
    by, of = ctx.observed.ref(HELM_PROVIDER_CONFIG), ctx.facts.cluster_ref
    if by is not None and of is not None and of[0] and hold_new is None:
        plan.resources.append(
            DesiredResource(
                PROTECT_CLUSTER_USAGE,
                ready=True,
                body=ctx.flavour.usage(
                    ctx.flavour.usage_end(of),
                    ctx.flavour.usage_end(by),
                    "the add-ons are uninstalled through this ProviderConfig before the "
                    "cluster may go",
                    composite,
                ),
            )
        )
    elif ctx.observed.exists(PROTECT_CLUSTER_USAGE):
        plan.resources.append(
            DesiredResource(
                PROTECT_CLUSTER_USAGE,
                ready=True,
                carried=ctx.observed.get(PROTECT_CLUSTER_USAGE),
            )
        )


def _deleting_summary(ctx: CallContext, assessment: deletion.Assessment) -> ConditionOut:
    record = assessment.record
    what = ctx.facts.deleting or f"Cluster {ctx.facts.namespace}/{ctx.spec.cluster_name}"
    uid = f" (uid {record.uid})" if record is not None and record.uid else ""
    if assessment.stage is deletion.Stage.GONE:
        message = (
            f"Cluster {ctx.facts.namespace}/{ctx.spec.cluster_name}{uid} is gone: what was "
            "composed is deleted in Usage order once the next call finds it gone too and "
            "every Release is observed with the orphan policy"
        )
    else:
        message = (
            f"{what}{uid} is being deleted: the Releases take the orphan policy (nothing is "
            "uninstalled from a cluster going away), nothing new is installed, and the AWS "
            "resources stay until the cluster is gone"
        )
    return ConditionOut("PluginsReady", "False", CLUSTER_DELETING, message, event="Warning")


def _withdrawal_plan(
    ctx: CallContext, xr: struct_pb2.Struct, assessment: deletion.Assessment
) -> Plan:
    """Nothing wanted: what was composed is withdrawn in Usage order, then nothing is composed.

    PluginsReady says ClusterDeleting while anything composed is still observed, or still
    in the API server after the last layer (the record's ``finalizing``, asked for by name:
    Crossplane forgets what it deletes while its provider still deletes it), and
    ClusterDeleted once nothing is: then everything is gone, and the XR can go.
    """
    name = f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"
    uid = assessment.record.uid if assessment.record is not None else ""
    gone = f"Cluster {name}{f' (uid {uid})' if uid else ''} was deleted"
    plan = Plan(held_back=True)
    _withdraw_in_usage_order(ctx, plan, set(), _composite(xr))
    left = len(ctx.observed.names())
    finalizing = _finalizing(ctx, plan, assessment.record)
    plan.status = {"plugins": []}
    if assessment.record is not None:
        record = dataclasses.replace(assessment.record, finalizing=tuple(finalizing))
        plan.status[deletion.STATUS_FIELD] = record.as_dict()
    if left or finalizing:
        listed = ", ".join(f"{f.kind} {f.name}" for f in finalizing)
        done = (
            f"{left} composed resource(s) left: {left - len(plan.resources)} being deleted, "
            f"{len(plan.resources)} kept until what uses them is gone"
            if left
            else f"{len(finalizing)} still being deleted by their providers: {listed}"
        )
        reason = CLUSTER_DELETING
        summary = ConditionOut(
            "PluginsReady",
            "False",
            reason,
            f"{gone}: what this ClusterPlugin composed is being deleted in Usage order, one "
            f"layer at a time (the Releases without an uninstall); {done}",
            event="Warning",
        )
    else:
        reason = CLUSTER_DELETED
        summary = ConditionOut(
            "PluginsReady",
            "False",
            reason,
            f"{gone}: what this ClusterPlugin composed is deleted (the Releases without an "
            "uninstall); a new Cluster of that name starts it again",
            event="Normal",
        )
    plan.conditions = [summary, ConditionOut("SecurityGroupsReady", "Unknown", reason, gone)]
    # The add-ons' own conditions say the same, so none stays at its last value.
    plan.conditions += [
        ConditionOut(a.condition(ctx, {}).type, "Unknown", reason, gone)
        for a in ADDONS
        if a.condition is not None
    ]
    # Quiet once everything is gone: only a new cluster changes anything.
    plan.all_ready = not left and not finalizing
    _transitions(xr, plan)
    return plan


def _finalizing(
    ctx: CallContext, plan: Plan, record: deletion.Record | None
) -> list[deletion.Finalizing]:
    """What the withdrawal's last layer left that the API server may still have.

    The record's entries not yet seen gone, and, once this call keeps nothing, what it drops.
    """
    out = [
        f
        for f in (record.finalizing if record is not None else ())
        if _in_api(ctx, plan, f"{REQ_FINALIZING}{f.kind}/{f.name}", f)
    ]
    if not plan.resources:
        # By name: the map's order is upb's, seeded per process (replicas would disagree and
        # rewrite the status for nothing).
        for name in sorted(ctx.observed.names()):
            ref = ctx.observed.ref(name)
            if ref is not None and deletion.Finalizing(*ref) not in out:
                out.append(deletion.Finalizing(*ref))
    return out


def _composite(xr: struct_pb2.Struct) -> str:
    return structs.str_at(xr, "metadata", "name") or ""


def build_plan(ctx: CallContext, xr: struct_pb2.Struct) -> Plan:
    """Compute the desired state, status, conditions and results of one call."""
    assessment = deletion.assess(
        ctx.facts,
        ctx.spec.cluster_name,
        deletion.read_record(xr, ctx.spec.cluster_name),
        ctx.observed.resources,
        ctx.flavour,
    )
    if assessment.orphan_releases:
        ctx = dataclasses.replace(
            ctx, flavour=dataclasses.replace(ctx.flavour, orphan_releases=True)
        )
    if assessment.withdraw_all:
        return _withdrawal_plan(ctx, xr, assessment)
    hold_new = None
    if assessment.hold_new:
        hold_new = Wait(
            "cluster deletion",
            "the cluster is being deleted: nothing new is installed",
            reason=CLUSTER_DELETING,
        )

    plan = Plan()
    plugins = [p for p in (b(ctx) for b in PLUGIN_BUILDERS) if p is not None]
    readiness = {n.name: n.readiness for p in plugins for n in p.nodes}
    readiness[HELM_PROVIDER_CONFIG] = Readiness.EXISTS
    ctx = dataclasses.replace(ctx, readiness=readiness)
    upgrades = _upgrades(ctx, plugins, xr, assessment)
    ctx = dataclasses.replace(
        ctx,
        chart_versions={n: d.versions for n, d in upgrades.decisions.items()},
        moving=upgrades.moving,
    )

    emit = _Emitter(ctx, plan, hold_new, upgrades)
    emit.node(Node(HELM_PROVIDER_CONFIG, _helm_provider_config, readiness=Readiness.EXISTS))
    wanted = {HELM_PROVIDER_CONFIG}
    for plugin in plugins:
        held: list[tuple[Node, Wait]] = []
        for node in plugin.nodes:
            wanted.add(node.name)
            wait = emit.node(node)
            if wait is not None:
                held.append((node, wait))
        wanted.update(n for n in plugin.handed_over if _hand_over(ctx, plan, n))
        status = _plugin_status(ctx, plugin, held, emit.emitted, upgrades.decisions)
        waiting = bool(held) or (not plugin.nodes and status.phase != READY)
        plan.held_back = plan.held_back or waiting
        plan.plugins.append(status)
    composite = _composite(xr)
    _usages(ctx, plan, wanted, composite)
    kept = wanted | {r.name for r in plan.resources}
    carried_from = len(plan.resources)
    _withdraw_in_usage_order(ctx, plan, kept, composite)
    withdrawn_until = len(plan.resources)
    carried = [r.name for r in plan.resources[carried_from:withdrawn_until]]
    _protect_cluster(ctx, plan, hold_new, composite)
    kept.update(r.name for r in plan.resources[withdrawn_until:])
    withdrawing = [n for n in ctx.observed.names() if n not in kept]
    withdrawing += _users_leaving(ctx, carried, kept)

    summary = upgrades.summary
    _report(
        ctx,
        plan,
        plugins,
        assessment=assessment,
        upgrades=upgrades,
        summary=summary,
        emitted=emit.emitted,
        withdrawing=withdrawing,
    )
    # The XR is not ready while its cluster goes away, whatever its plugins say.
    plan.held_back = plan.held_back or assessment.hold_new
    plan.all_ready = (
        not plan.held_back
        and all(p.phase == READY for p in plan.plugins)
        and summary not in upgrade.IN_FLIGHT
    )
    _transitions(xr, plan)
    return plan


def _report(
    ctx: CallContext,
    plan: Plan,
    plugins: list[Plugin],
    *,
    assessment: deletion.Assessment,
    upgrades: upgrade.Upgrades,
    summary: upgrade.Phase | None,
    emitted: set[str],
    withdrawing: list[str],
) -> None:
    """The plan's conditions and status, from what the call decided."""
    sg = registry.ports_report(ctx, emitted)
    plan.conditions = [
        _deleting_summary(ctx, assessment)
        if assessment.hold_new
        else _summary(plan.plugins, withdrawing),
        ConditionOut(
            "SecurityGroupsReady",
            sg.status,
            sg.reason,
            sg.message,
            event=sg.event,
        ),
    ]
    phases = {p.name: p.phase for p in plan.plugins}
    plan.conditions += [a.condition(ctx, phases) for a in ADDONS if a.condition is not None]
    plan.conditions.append(_charts_healthy(upgrades, summary))
    plan.status = _status(ctx, plugins, plan.plugins)
    if summary is not None:
        plan.status["upgrade"] = str(summary)
    plan.due_in = _due_in(ctx, upgrades)
    record = deletion.status(assessment)
    if record is not None:
        plan.status[deletion.STATUS_FIELD] = record


def _due_in(ctx: CallContext, upgrades: upgrade.Upgrades) -> float | None:
    """When to be called again at the latest: a soak or deadline, or a rollout under way.

    Crossplane v2.4 does not watch required resources: a converged XR would see its rollout's
    next wave only after ``ttl.ready`` (10 minutes); while one is under way, ``ttl.waiting``.
    """
    due = upgrades.due_in
    if ctx.rollout is not None and ctx.rollout.under_way:
        due = min(due, ctx.step.ttl.waiting) if due is not None else float(ctx.step.ttl.waiting)
    return due


def _upgrades(
    ctx: CallContext, plugins: list[Plugin], xr: struct_pb2.Struct, assessment: deletion.Assessment
) -> upgrade.Upgrades:
    """The day-two decisions of this call (function/upgrade.py)."""
    policy = ctx.spec.upgrade_policy
    may_move = None
    if assessment.orphan_releases:
        # Nothing moves in a cluster going away, nor in one whose objects were not read.
        may_move = Wait(
            "cluster",
            "no chart moves while the cluster is being deleted or its objects are not read",
            reason="cluster not present",
        )
    return upgrade.decide(
        ctx,
        plugins,
        order=registry.UPGRADE_ORDER,
        policy=upgrade.Policy(
            policy.soak_seconds,
            policy.progress_deadline_seconds,
            rollback=policy.on_failure is OnFailure.ROLLBACK,
        ),
        retry=structs.str_at(xr, "metadata", "annotations", upgrade.RETRY_ANNOTATION) or "",
        may_move=may_move,
        iam=registry.IAM_CHECKS,
    )


CHARTS_HEALTHY = "ChartsHealthy"


def _charts_healthy(upgrades: upgrade.Upgrades, summary: upgrade.Phase | None) -> ConditionOut:
    """Whether every Release runs the spec it was given, healthy (function/upgrade.py).

    ``summary``: ``upgrades.summary``, read once per call.
    """
    moving = [
        d for d in upgrades.decisions.values() if d.phase not in (None, upgrade.Phase.HEALTHY)
    ]
    waiting = [d for d in upgrades.decisions.values() if d.wait is not None]
    if summary is None or (summary is upgrade.Phase.HEALTHY and not waiting):
        return ConditionOut(
            CHARTS_HEALTHY, "True", "Healthy", "every chart runs the version it was given"
        )
    if summary is upgrade.Phase.HEALTHY:
        message = "; ".join(d.message for d in waiting)
        return ConditionOut(CHARTS_HEALTHY, "False", "UpgradeWaiting", message)
    message = "; ".join(d.message or f"{d.node}: {d.phase}" for d in moving)
    event = (
        "Warning"
        if summary in (upgrade.Phase.FAILED, upgrade.Phase.ROLLING_BACK, upgrade.Phase.ROLLED_BACK)
        else "Normal"
    )
    return ConditionOut(CHARTS_HEALTHY, "False", str(summary), message, event=event)
