"""The vocabulary of the resource graph: nodes, gates, readiness, add-on declarations.

A node is one composed resource with a stable composition-resource-name, a
body builder, the gates that must hold before it is first emitted, and a
readiness rule. An add-on module declares its ``Addon``: its place in the spec,
its Helm release, its IAM role, the values it owns, its deletion order and its
nodes; ``function/registry.py`` lists the add-ons and ``plan.py`` decides, call
by call, which nodes are emitted. Nothing here names a particular add-on. What a builder
or a gate reads during a call is ``function/context.py``'s ``CallContext``; what is observed,
``function/observed.py``'s ``Observed``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from google.protobuf import struct_pb2

from function.cluster import ClusterFacts
from function.spec_base import spec_getter
from function.step_input import Charts, ChartSource

if TYPE_CHECKING:  # the frame imports the add-ons' models: a type here, no import
    from function.context import CallContext
    from function.spec import ClusterPluginSpec


class Readiness(Enum):
    """When a composed resource counts as ready.

    CONDITION and RELEASE count only for the spec the function wrote: a Ready=True that
    the provider reported for an older ``metadata.generation`` (its Synced condition's
    ``observedGeneration``) is stale, and nothing gated on it may go ahead (``fresh``).
    """

    CONDITION = "condition"  # observed with condition Ready=True, for its current generation
    # A provider-helm Release: Ready=True or upgraded, for its current generation and with the
    # asked chart version deployed (see ``release_ready``).
    RELEASE = "release"
    EXISTS = "exists"  # observed at all (ProviderConfigs have no Ready condition)
    ALWAYS = "always"  # Usages: ready as soon as desired


@dataclass(frozen=True)
class Wait:
    """Why something is held back. ``blocked`` means a person must act."""

    waiting_for: str
    message: str = ""
    blocked: bool = False
    # A label of bounded cardinality for metrics when ``waiting_for`` names an object
    # of the user's (it then holds a namespace or name); otherwise ``waiting_for`` is one.
    reason: str = ""

    @property
    def label(self) -> str:
        """What is waited for, without names of the user's objects."""
        return self.reason or self.waiting_for


class MissingFactError(Exception):
    """A body cannot be built yet because a fact is not known."""

    def __init__(self, wait: Wait) -> None:
        super().__init__(wait.waiting_for)
        self.wait = wait


Gate = Callable[["CallContext"], Wait | None]
Builder = Callable[["CallContext"], dict[str, Any]]


@dataclass(frozen=True)
class Node:
    """One composed resource of the graph."""

    name: str
    build: Builder
    gates: tuple[Gate, ...] = ()
    readiness: Readiness = Readiness.CONDITION
    # Why it may take long to turn Ready (said in the status while it is not), or "".
    slow: str = ""
    # What its provider reports that waiting will not fix, with what to do, read from the
    # observed resource while it is not Ready ("" when nothing known): its plugin is Blocked.
    diagnose: Callable[[struct_pb2.Struct], str] | None = None

# Every Release's rollbackLimit: provider-helm retries a failed install (uninstall, install) or
# upgrade (rollback) this many times; upgrade.INSTALL_TRY_ANNOTATION has it retry an install at
# once.
ROLLBACK_LIMIT = 3


@dataclass(frozen=True, eq=False)
class Release:
    """A Helm release an add-on installs into the workload cluster (provider-helm Release).

    The chart's ServiceAccount is named explicitly: several charts derive it from the
    release name, and an IRSA trust policy must name exactly that account.
    """

    node: str  # composition-resource-name
    chart: Callable[[Charts], ChartSource]  # the step input's chart source of it
    namespace: str
    name: str  # the Helm release name (crossplane.io/external-name)
    service_account: str = ""
    # Readiness then means the workloads run, not only "helm says deployed".
    wait: bool = False
    # Adopt what exists of its objects that no helm release owns (provider-helm's
    # takeOwnership, once): Calico's CRDs, left by a tigera-operator before v3.32.
    take_ownership: bool = False

    def as_node(self, build: Builder, gates: tuple[Gate, ...] = ()) -> Node:
        """The node that composes this release, with a Release's readiness rule."""
        return Node(self.node, build, gates, readiness=Readiness.RELEASE)


@dataclass(frozen=True, eq=False)
class CustomPolicy:
    """A customer-managed IAM policy an add-on's role gets (instead of an AWS-managed one).

    ``document`` is given the chart versions of the add-on's release whose permissions the
    policy must grant in this call (one, or two while an upgrade moves: the old and the
    new, see function/upgrade.py); ``versioned`` says the document depends on them, so an
    upgrade waits until the policy grants both, and the policy narrows once it is over.
    """

    node: str
    # The policy document, compact JSON, for the given chart versions.
    document: Callable[[CallContext, tuple[str, ...]], str]
    description: str
    versioned: bool = False


# What a role's PodIdentityAssociation node is named after it (``Role.association``).
ASSOCIATION_SUFFIX = "-association"


@dataclass(frozen=True, eq=False)
class Role:
    """An add-on's IRSA role, trusting its release's ServiceAccount; one policy attached.

    Composed as ``node`` and ``<node>-attachment`` (and the custom policy's node),
    checked by ``aws preflight``, reported in ``status.roleARNs.<status_key>``.
    """

    node: str
    iam_name: str  # the add-on's part of its IAM names and tags (Names.role, Names.policy)
    status_key: str
    # The AWS-managed policy, e.g. policy/AmazonEKS_CNI_Policy (under arn:<partition>:iam::aws:)
    managed_policy: str = ""
    policy: CustomPolicy | None = None

    @property
    def attachment(self) -> str:
        """The RolePolicyAttachment's node."""
        return f"{self.node}-attachment"

    @property
    def association(self) -> str:
        """The PodIdentityAssociation's node (irsa.mode PodIdentity)."""
        return f"{self.node}{ASSOCIATION_SUFFIX}"


@dataclass(frozen=True)
class Plugin:
    """A user-visible unit in ``status.plugins[]``: the nodes it owns."""

    name: str
    nodes: tuple[Node, ...]
    # Its IRSA role, whose observed ARN goes to status.roleARNs.
    role: Role | None = None
    # Said in the plugin's status message even when it is Ready (e.g. a fallback taken).
    note: str = ""
    # What a plugin without nodes of its own waits for (something another controller
    # installs): its phase follows this gate, never Ready while it waits.
    waits_for: Gate | None = None
    # Releases it installed that another installer now runs (composition-resource-names):
    # withdrawn without a helm uninstall, which would delete what the other one runs.
    handed_over: tuple[str, ...] = ()


ValuesPath = tuple[str, ...]


class Usage(NamedTuple):
    """Deletion order: ``by`` is deleted before ``of`` (both nodes of wanted plugins)."""

    by: str
    of: str
    reason: str


CONTROL_PLANE = "controlplane"
NODE = "node"
BOTH = (CONTROL_PLANE, NODE)


@dataclass(frozen=True)
class PortNeed:
    """Traffic an add-on needs between CAPA security-group roles (CONTROL_PLANE, NODE)."""

    purpose: str  # names its rule nodes (sg-<purpose>-...) and preflight's check
    protocol: str  # CAPA's spelling: tcp, udp, "4" (IP-in-IP), "-1" (all)
    from_port: int
    to_port: int
    targets: tuple[str, ...]
    sources: tuple[str, ...]
    # Which AWSCluster list CAPA takes it in: cniIngressRules apply to both
    # roles from both roles; additionalNodeIngressRules name their sources.
    capa_list: str
    description: str

    def capa_entry(self) -> dict[str, Any]:
        """The entry to put in the AWSCluster spec list."""
        entry: dict[str, Any] = {
            "description": self.description,
            "protocol": self.protocol,
            "fromPort": self.from_port,
            "toPort": self.to_port,
        }
        if self.capa_list != "cniIngressRules":
            entry["sourceSecurityGroupRoles"] = list(self.sources)
        return entry


@dataclass(frozen=True)
class ConditionOut:
    """An XR condition the function sets."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    # Entering this state also emits a result of this severity ("Warning" or
    # "Normal"), once, on the transition; "" for none.
    event: str = ""


def eks_or_unread(
    condition: str, facts: ClusterFacts, on_eks: tuple[str, str]
) -> ConditionOut | None:
    """An add-on's condition before its own judgement, or None.

    True on EKS, which provides what it checks (``on_eks``: reason, message); Unknown before
    the control plane is read.
    """
    if facts.eks:
        return ConditionOut(condition, "True", *on_eks)
    if not facts.control_plane_found:
        return ConditionOut(
            condition, "Unknown", "ControlPlaneNotRead", "the control plane has not been read yet"
        )
    return None


def _no_ports(_: Any) -> tuple[PortNeed, ...]:
    return ()


@dataclass(frozen=True, eq=False)
class Addon:
    """Everything about one add-on, declared once in its module.

    ``spec_path`` is where the user asks for it (``spec.storage.ebs``; the issuer,
    wanted when another add-on needs it, has none); the add-on's Helm values are
    at ``<spec_path>.values``, where ``owned_values`` may not be set. ``usages`` are
    its deletion order, naming other add-ons' nodes through their modules' constants.
    ``plugin`` builds its nodes for one call (None when not wanted).
    """

    name: str  # status.plugins[].name and the metrics' plugin label
    plugin: Callable[[CallContext], Plugin | None]
    spec_path: str = ""
    # How messages name it ("the AWS Load Balancer Controller").
    title: str = ""
    release: Release | None = None
    # Its other Releases (Calico's CRDs, cert-manager beside the webhook), with ``release``
    # in ``releases``: whose chart versions are judged against the cluster's Kubernetes minor.
    extra_releases: tuple[Release, ...] = ()
    role: Role | None = None
    owned_values: tuple[ValuesPath, ...] = ()
    usages: tuple[Usage, ...] = ()
    # The security-group ports it needs, given its spec.
    ports: Callable[[Any], tuple[PortNeed, ...]] = _no_ports
    # An XR condition of its own, given each wanted plugin's phase by name.
    condition: Callable[[CallContext, Mapping[str, str]], ConditionOut] | None = None
    # Fields of the XR status it writes (asked on every call, wanted or not).
    status: Callable[[CallContext], Mapping[str, Any]] | None = None
    # Why the cluster the facts describe cannot have it (a FATAL on its spec_path), or None.
    cluster_problem: Callable[[ClusterPluginSpec, ClusterFacts], str | None] | None = None
    # The EKS add-on (AWSManagedControlPlane.spec.addons[].name) that installs the same thing:
    # listed there, EKS owns it, and a Release of it would fight EKS's (refused).
    eks_addon: str = ""
    # Its controller makes load balancers, which CAPA must clean up when the cluster goes.
    makes_load_balancers: bool = False
    # Why a chart version of its release cannot be installed by the function (e.g. no IAM
    # policy known for it), or None: a pinned version it names is refused (FATAL).
    version_problem: Callable[[str], str | None] | None = None
    # Its spec, or None when not asked for (from spec_path).
    spec: Callable[[ClusterPluginSpec], Any] = field(init=False)

    def __post_init__(self) -> None:
        getter = spec_getter(self.spec_path) if self.spec_path else _no_spec
        object.__setattr__(self, "spec", getter)

    @property
    def releases(self) -> tuple[Release, ...]:
        """Every Release it may install, ``release`` first."""
        return (*((self.release,) if self.release is not None else ()), *self.extra_releases)

    @property
    def values_field(self) -> str:
        """Where the user's Helm values for it are."""
        return f"{self.spec_path}.values"


def _no_spec(_: ClusterPluginSpec) -> None:
    return None


# Gate factories are cached: their arguments are the code's own node names, so
# the gates are made once per process instead of once per call.
@functools.cache
def after(*nodes: str) -> Gate:
    """Gate: every node in ``nodes`` is observed and ready."""

    def gate(ctx: CallContext) -> Wait | None:
        for n in nodes:
            if not ctx.is_ready(n):
                return Wait(f"{n} Ready", f"waiting for {n} to become Ready")
        return None

    gate.__name__ = f"after({', '.join(nodes)})"
    return gate


def control_plane_initialized(ctx: CallContext) -> Wait | None:
    """Gate: the workload control plane is initialized (its API server answers)."""
    if ctx.facts.initialized:
        return None
    return _control_plane_wait(ctx, "initialized")


def control_plane_available(ctx: CallContext) -> Wait | None:
    """Gate: the workload control plane is available."""
    if ctx.facts.available:
        return None
    return _control_plane_wait(ctx, "available")


def _control_plane_wait(ctx: CallContext, state: str) -> Wait:
    ns, name = ctx.facts.namespace, ctx.spec.cluster_name
    if not ctx.facts.cluster_found and not ctx.facts.control_plane_found:
        kind = ctx.step.cluster_api.legacy_control_plane_kind
        # Crossplane 1.x never reads the Cluster: it lists the control plane by
        # label, as the kind the step input names (an EKS cluster needs a change).
        return Wait(
            "Cluster",
            f"Cluster API Cluster {ns}/{name} has not been read yet (does it exist? On "
            f"Crossplane 1.x the control plane is listed as input.clusterAPI."
            f"legacyControlPlaneKind={kind}; use AWSManagedControlPlane for EKS)",
        )
    if not ctx.facts.control_plane_found:
        return Wait(
            "control plane", f"the control plane of Cluster {ns}/{name} has not been read yet"
        )
    return Wait(f"control plane {state}", f"the control plane of {ns}/{name} is not {state} yet")
