"""The planning core: spec + observed state + cluster facts -> desired state.

Pure: no I/O, no clock, no randomness, so the same request always yields the
same plan. ``fn.py`` (the gRPC runner), ``render`` and ``simulate`` all call it
through ``fn.run``.

The rules (DESIGN section 4):
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

from function import structs
from function.addons import calico, ccm, csi, irsa, lbc, security_groups, vpc_cni
from function.addons.helm import check_owned
from function.flavour import StructWriter
from function.graph import (
    Addon,
    ConditionOut,
    Ctx,
    MissingFactError,
    Node,
    Plugin,
    Readiness,
    Wait,
)
from function.spec import ClusterPluginSpec, IRSAMode

HELM_PROVIDER_CONFIG = "helm-provider-config"

# The add-ons, in status.plugins[] order. A new add-on is a module declaring an
# ``Addon`` and one line here.
ADDONS: tuple[Addon, ...] = (
    ccm.ADDON,
    irsa.ADDON,
    vpc_cni.ADDON,
    calico.ADDON,
    csi.EBS,
    csi.EFS,
    lbc.ADDON,
)

PLUGIN_BUILDERS: tuple[Callable[[Ctx], Plugin | None], ...] = tuple(a.plugin for a in ADDONS)

# Deletion order, as Usages: ``by`` is deleted before ``of`` (DESIGN section 4).
USAGES: tuple[tuple[str, str, str], ...] = tuple(u for a in ADDONS for u in a.usages)

PENDING, INSTALLING, READY, BLOCKED = "Pending", "Installing", "Ready", "Blocked"


class DesiredResource(NamedTuple):
    """One composed resource to emit: a fresh body, or the observed spec carried over.

    A NamedTuple: up to ~45 are made per call (issue 5).
    """

    name: str
    ready: bool
    body: dict[str, Any] | StructWriter | None = None
    carried: struct_pb2.Struct | None = None


@dataclass(frozen=True)
class PluginStatus:
    """One entry of ``status.plugins[]``."""

    name: str
    phase: str
    waiting_for: str = ""
    message: str = ""
    # What it waits for as a label of bounded cardinality (metrics); not in the status.
    reason: str = ""

    def as_dict(self) -> dict[str, str]:
        """The status entry (empty fields left out)."""
        d = {"name": self.name, "phase": self.phase}
        if self.waiting_for:
            d["waitingFor"] = self.waiting_for
        if self.message:
            d["message"] = self.message
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


def check_values(spec: ClusterPluginSpec) -> None:
    """Reject user values that fight keys the function owns (InvalidInputError)."""
    for addon in ADDONS:
        for owned in addon.owned_values:
            addon_spec = owned.spec(spec)
            if addon_spec is not None:
                check_owned(addon_spec.values, owned.paths, owned.field)


def _helm_provider_config(ctx: Ctx) -> dict[str, Any]:
    return ctx.flavour.helm_provider_config_resource(
        namespace=ctx.facts.namespace, kubeconfig_secret=ctx.names.kubeconfig_secret
    )


def _first_wait(ctx: Ctx, node: Node) -> Wait | None:
    for gate in node.gates:
        wait = gate(ctx)
        if wait is not None:
            return wait
    return None


class _Emitter:
    """Decides emit / carry over / hold back for nodes, and records the outcome."""

    def __init__(self, ctx: Ctx, plan: Plan) -> None:
        self.ctx = ctx
        self.plan = plan
        self.emitted: set[str] = set()

    def node(self, node: Node) -> Wait | None:
        """Emit ``node`` if it may be; return why not otherwise."""
        ctx = self.ctx
        observed = ctx.observed.exists(node.name)
        # Gates decide only the first emission: an observed node is emitted again
        # whatever they say, so they are not even asked (issue 5).
        wait = None if observed else _first_wait(ctx, node)
        body = None
        if wait is None:
            try:
                body = node.build(ctx)
            except MissingFactError as err:
                wait = err.wait
        if body is None and not observed:
            return wait or Wait("unknown")
        carried = ctx.observed.get(node.name) if body is None else None
        self.plan.resources.append(
            DesiredResource(node.name, ctx.observed.ready(node.name, node.readiness), body, carried)
        )
        self.emitted.add(node.name)
        return None


def _plugin_status(
    ctx: Ctx, plugin: Plugin, held: list[tuple[Node, Wait]], emitted: set[str]
) -> PluginStatus:
    names = [n.name for n in plugin.nodes]
    emitted_here = [n for n in names if n in emitted]
    not_ready = [
        n.name
        for n in plugin.nodes
        if n.name in emitted and not ctx.observed.ready(n.name, n.readiness)
    ]
    status = _plugin_phase(plugin, held, emitted_here, not_ready)
    if plugin.note:
        message = f"{status.message}; {plugin.note}" if status.message else plugin.note
        status = dataclasses.replace(status, message=message)
    return status


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
        return PluginStatus(
            plugin.name, phase, wait.waiting_for, f"{node.name}: {msg}", wait.label
        )
    waiting_for = f"{not_ready[0]} Ready"
    return PluginStatus(
        plugin.name,
        INSTALLING,
        waiting_for,
        f"waiting for {', '.join(not_ready)} to become Ready",
        waiting_for,
    )


def _usages(ctx: Ctx, plan: Plan, wanted: set[str]) -> None:
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
            body = ctx.flavour.usage(end(of, of_ref), end(by, by_ref), reason)
            plan.resources.append(DesiredResource(name, ready=True, body=body))
        elif ctx.observed.exists(name):
            # An end is briefly unobserved: keep the Usage exactly as it was.
            plan.resources.append(DesiredResource(name, ready=True, carried=ctx.observed.get(name)))


def _summary(plugins: list[PluginStatus]) -> ConditionOut:
    if not plugins:
        return ConditionOut("PluginsReady", "True", "NoPlugins", "the spec asks for no add-ons")
    if all(p.phase == READY for p in plugins):
        return ConditionOut(
            "PluginsReady",
            "True",
            "AllPluginsReady",
            f"{len(plugins)} plugin(s) ready: " + ", ".join(p.name for p in plugins),
        )
    blocked = [p for p in plugins if p.phase == BLOCKED]
    if blocked:
        msg = "; ".join(f"{p.name}: {p.message}" for p in blocked)
        return ConditionOut("PluginsReady", "False", "Blocked", msg)
    waiting = [p for p in plugins if p.phase != READY]
    msg = "; ".join(f"{p.name} waits for {p.waiting_for}" for p in waiting)
    return ConditionOut("PluginsReady", "False", "Waiting", msg)


def _status(ctx: Ctx, plugins: list[Plugin], statuses: list[PluginStatus]) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if ctx.irsa is IRSAMode.EXTERNAL:
        status["issuerURL"] = ctx.spec.irsa.issuer_url.rstrip("/")
        status["oidcProviderARN"] = ctx.spec.irsa.oidc_provider_arn
    elif ctx.irsa is IRSAMode.SELF_HOSTED and ctx.spec.wants_aws:
        region = ctx.spec.region or ctx.facts.region
        if region:
            status["issuerURL"] = ctx.names.issuer_url(region)
        arn = ctx.observed.arn("irsa-oidc-provider")
        if arn:
            status["oidcProviderARN"] = arn
    roles = {}
    for p in plugins:
        if p.role_key and p.role_node:
            arn = ctx.observed.arn(p.role_node)
            if arn:
                roles[p.role_key] = arn
    # Always written, so a removed plugin's ARN disappears with it.
    status["roleARNs"] = roles
    status["plugins"] = [s.as_dict() for s in statuses]
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
    for cond in plan.conditions:
        prev = None
        for c in structs.structs_at(xr, "status", "conditions"):
            if structs.str_at(c, "type") == cond.type:
                prev = (structs.str_at(c, "status"), structs.str_at(c, "reason"))
        if prev == (cond.status, cond.reason):
            continue
        if cond.warn:
            plan.results.append(ResultOut("Warning", cond.reason, cond.message))


def build_plan(ctx: Ctx, xr: struct_pb2.Struct) -> Plan:
    """Compute the desired state, status, conditions and results of one call."""
    plan = Plan()
    plugins = [p for p in (b(ctx) for b in PLUGIN_BUILDERS) if p is not None]
    ctx.readiness = {n.name: n.readiness for p in plugins for n in p.nodes}
    ctx.readiness[HELM_PROVIDER_CONFIG] = Readiness.EXISTS

    emit = _Emitter(ctx, plan)
    emit.node(Node(HELM_PROVIDER_CONFIG, _helm_provider_config, readiness=Readiness.EXISTS))
    wanted = {HELM_PROVIDER_CONFIG}
    for plugin in plugins:
        held: list[tuple[Node, Wait]] = []
        for node in plugin.nodes:
            wanted.add(node.name)
            wait = emit.node(node)
            if wait is not None:
                held.append((node, wait))
        plan.held_back = plan.held_back or bool(held)
        plan.plugins.append(_plugin_status(ctx, plugin, held, emit.emitted))
    _usages(ctx, plan, wanted)

    sg = security_groups.report(ctx, emit.emitted)
    plan.conditions = [
        _summary(plan.plugins),
        ConditionOut(
            "SecurityGroupsReady",
            sg.status,
            sg.reason,
            sg.message,
            warn=sg.status == "False" and sg.reason == "IngressRulesMissing",
        ),
    ]
    phases = {p.name: p.phase for p in plan.plugins}
    plan.conditions += [a.condition(ctx, phases) for a in ADDONS if a.condition is not None]
    plan.status = _status(ctx, plugins, plan.plugins)
    plan.all_ready = not plan.held_back and all(p.phase == READY for p in plan.plugins)
    _transitions(xr, plan)
    return plan
