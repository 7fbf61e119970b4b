"""The vocabulary of the resource graph: nodes, gates, readiness, add-on declarations, context.

A node is one composed resource with a stable composition-resource-name, a
body builder, the gates that must hold before it is first emitted, and a
readiness rule. An add-on module declares its ``Addon``: its place in the spec,
its Helm release, its IAM role, the values it owns, its deletion order and its
nodes; ``function/registry.py`` lists the add-ons and ``plan.py`` decides, call
by call, which nodes are emitted. Nothing here names a particular add-on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, assert_never

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import compat, structs
from function.cluster import ClusterFacts
from function.flavour import Flavour
from function.names import Names, Partition, partition_of
from function.rollout.target import RolloutTarget
from function.spec_base import IRSAMode, spec_getter
from function.step_input import Charts, ChartSource, StepInput

if TYPE_CHECKING:  # the frame imports the add-ons' models: a type here, no import
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


_UNSET: Any = object()
_NO_FIELDS: Mapping[str, struct_pb2.Value] = {}


def fields_at(fields: Mapping[str, struct_pb2.Value], key: str) -> Mapping[str, struct_pb2.Value]:
    """The fields of the Struct under ``key`` (none when absent: ``in`` first, indexing inserts)."""
    return fields[key].struct_value.fields if key in fields else _NO_FIELDS


class Observed:
    """Read-only view of observed composed resources, straight from the protobuf.

    Lookups are memoized for the call: a node's readiness, ARN and reference are
    read by gates, builders, Usages and the status alike, several times per call.
    """

    def __init__(
        self,
        resources: Mapping[str, fnv1.Resource],
        used_in_api: frozenset[tuple[str, str, str]] | None = None,
        found_by_name: Mapping[str, bool] | None = None,
    ) -> None:
        self._resources = resources
        # (apiVersion, kind, name) of what the Usages that exist in the API server use,
        # Crossplane's forgotten ones included; None when the function did not ask for them.
        self.used_in_api = used_in_api
        # Requirement name -> whether the API server still has what the planner asked for by
        # name (cluster.REQ_USER_OF, REQ_FINALIZING): deleted, Crossplane no longer observes it.
        self.found_by_name: Mapping[str, bool] = found_by_name or {}
        self._objs: dict[str, struct_pb2.Struct | None] = {}
        self._ready: dict[str, bool] = {}
        self._upgraded: dict[str, bool] = {}
        self._arns: dict[str, str | None] = {}
        self._charts: dict[str, str | None] = {}
        self._deployed: dict[str, str | None] = {}
        self._refs: dict[str, tuple[str, str, str] | None] = {}

    def get(self, name: str) -> struct_pb2.Struct | None:
        """The observed object under composition-resource-name ``name``."""
        obj = self._objs.get(name, _UNSET)
        if obj is _UNSET:
            resources = self._resources
            obj = resources[name].resource if name in resources else None
            self._objs[name] = obj
        return obj

    def exists(self, name: str) -> bool:
        """Whether ``name`` is observed."""
        return self.get(name) is not None

    def names(self) -> list[str]:
        """Every observed composition-resource-name."""
        return list(self._resources)  # the map's own iteration, in C (keys() is Python's)

    @property
    def resources(self) -> Mapping[str, fnv1.Resource]:
        """The observed composed resources, as the request holds them."""
        return self._resources

    def ready(self, name: str, readiness: Readiness = Readiness.CONDITION) -> bool:
        """Whether ``name`` is observed and ready under ``readiness``."""
        if readiness is Readiness.CONDITION:  # the common rule, first
            verdict = self._ready.get(name)
            if verdict is None:
                obj = self.get(name)
                verdict = obj is not None and fresh(obj)
                self._ready[name] = verdict
            return verdict
        if readiness is Readiness.ALWAYS:
            return True
        if readiness is Readiness.EXISTS:
            return self.get(name) is not None
        if readiness is Readiness.RELEASE:
            verdict = self._upgraded.get(name)
            if verdict is None:
                obj = self.get(name)
                verdict = obj is not None and release_ready(obj, *self._versions(name))
                self._upgraded[name] = verdict
            return verdict
        assert_never(readiness)

    def arn(self, name: str) -> str | None:
        """``status.atProvider.arn`` of an observed AWS resource."""
        arn = self._arns.get(name, _UNSET)
        if arn is _UNSET:
            obj = self.get(name)
            arn = None if obj is None else structs.str_at(obj, "status", "atProvider", "arn")
            self._arns[name] = arn
        return arn

    def chart_version(self, name: str) -> str | None:
        """``spec.forProvider.chart.version`` of an observed Release: the chart it asks for.

        Read by the chart's default and by day two for every Release of every call.
        """
        version = self._charts.get(name, _UNSET)
        if version is _UNSET:
            version = self._read_versions(name)[0]
        return version

    def deployed_version(self, name: str) -> str | None:
        """``status.atProvider.version`` of an observed Release: the chart helm deployed.

        Read by its readiness and by day two for every Release of every call.
        """
        version = self._deployed.get(name, _UNSET)
        if version is _UNSET:
            version = self._read_versions(name)[1]
        return version

    def _versions(self, name: str) -> tuple[str | None, str | None]:
        """(chart_version, deployed_version) of ``name``."""
        asked = self._charts.get(name, _UNSET)
        if asked is _UNSET:
            return self._read_versions(name)
        return asked, self._deployed[name]

    def _read_versions(self, name: str) -> tuple[str | None, str | None]:
        """Both versions of a Release, read and kept at once (each is wanted for every Release).

        Two walks of ``structs.str_at`` as one (``fields_at``: a Value of another kind reads as
        an empty Struct, its ``string_value`` as "").
        """
        obj = self.get(name)
        asked = deployed = None
        if obj is not None:
            fields = obj.fields
            chart = fields_at(fields_at(fields_at(fields, "spec"), "forProvider"), "chart")
            asked = (chart["version"].string_value or None) if "version" in chart else None
            at = fields_at(fields_at(fields, "status"), "atProvider")
            deployed = (at["version"].string_value or None) if "version" in at else None
        self._charts[name] = asked
        self._deployed[name] = deployed
        return asked, deployed

    def ref(self, name: str) -> tuple[str, str, str] | None:
        """(apiVersion, kind, metadata.name) of an observed resource."""
        ref = self._refs.get(name, _UNSET)
        if ref is _UNSET:
            ref = self._ref(name)
            self._refs[name] = ref
        return ref

    def _ref(self, name: str) -> tuple[str, str, str] | None:
        obj = self.get(name)
        if obj is None:
            return None
        fields = obj.fields
        # string_value reads "" unless the Value holds a string: as structs.str_at,
        # unrolled (read for every Usage end).
        api = fields["apiVersion"].string_value if "apiVersion" in fields else ""
        kind = fields["kind"].string_value if "kind" in fields else ""
        meta = fields["metadata"].struct_value.fields if "metadata" in fields else None
        meta_name = meta["name"].string_value if meta is not None and "name" in meta else ""
        if not (api and kind and meta_name):
            return None
        return api, kind, meta_name


def _condition_facts(
    status: Mapping[str, struct_pb2.Value],
) -> tuple[bool, bool | None, float | None]:
    """What readiness reads of a composed resource's ``status`` fields, in one pass.

    (Ready=True, Synced=True or None without a Synced condition, Synced's observedGeneration
    when the provider wrote one). Unrolled and a plain tuple (read for every node of every
    call): every map is checked with ``in`` first (indexing would insert); a Value of another
    kind reads as an empty Struct or list. A type appears once (crossplane-runtime sets
    conditions by type): the reading stops once both are found (upjet adds
    LastAsyncOperation after them).
    """
    ready: bool | None = None
    synced: bool | None = None
    synced_generation = None
    if "conditions" not in status:
        return False, synced, synced_generation
    for item in status["conditions"].list_value.values:
        cond = item.struct_value.fields
        if "type" not in cond:
            continue
        kind = cond["type"].string_value
        if kind == "Ready":
            ready = "status" in cond and cond["status"].string_value == "True"
            if synced is not None:
                break
        elif kind == "Synced":
            synced = "status" in cond and cond["status"].string_value == "True"
            if "observedGeneration" in cond:
                synced_generation = cond["observedGeneration"].number_value
            if ready is not None:
                break
    return bool(ready), synced, synced_generation


def _generation(fields: Mapping[str, struct_pb2.Value]) -> float | None:
    """``metadata.generation`` of an object's top-level ``fields``."""
    if "metadata" not in fields:
        return None
    meta = fields["metadata"].struct_value.fields
    return meta["generation"].number_value if "generation" in meta else None


def _current(
    fields: Mapping[str, struct_pb2.Value],
    synced: bool | None,  # noqa: FBT001  # one of _condition_facts' three
    synced_generation: float | None,
) -> bool:
    """Whether the provider's conditions speak of the spec the object holds now.

    crossplane-runtime stamps the Synced condition with the ``metadata.generation`` it
    reconciled; until the provider has acted on a new spec, its Ready=True is the old
    spec's. Where nothing can be compared (no generation: not an API server's object; no
    Synced condition or no observedGeneration: a provider built before crossplane-runtime
    stamped it), the conditions are taken as they are.
    """
    if synced is None:
        return True  # checked first: the generation is not read for nothing
    # metadata.generation, unrolled (as _generation; read for every node of every call)
    if "metadata" not in fields:
        return True
    meta = fields["metadata"].struct_value.fields
    if "generation" not in meta:
        return True
    generation = meta["generation"].number_value
    if not synced:
        return False  # the provider failed to apply the current spec
    return synced_generation is None or synced_generation == generation


def upgraded_release(obj: struct_pb2.Struct) -> bool:
    """Whether provider-helm has upgraded this Release to its current spec, deployed.

    After a successful upgrade provider-helm writes Synced=True (ReconcileSuccess, at
    the generation it acted on) and the deployed release into ``status.atProvider``,
    but leaves Ready=False (the Unavailable of its Observe before the upgrade) until
    its next poll: crossplane-runtime requeues a successful update only after the
    poll interval, 10 minutes by default. That poll would find exactly this (deployed,
    up to date) and say Ready=True; with ``wait: true`` the upgrade itself already
    waited for the workloads. A Synced condition of an older generation (the spec
    changed since), a failed or pending release, or a failed upgrade (Synced=False)
    is not this.
    """
    fields = obj.fields
    generation = _generation(fields)
    if generation is None or generation <= 0:
        return False
    if structs.str_at(obj, "status", "atProvider", "state") != "deployed":
        return False
    _, synced, synced_generation = _condition_facts(fields["status"].struct_value.fields)
    return bool(synced) and synced_generation == generation


def fresh(obj: struct_pb2.Struct) -> bool:
    """Ready=True, reported for the spec the object holds now (see ``_current``)."""
    fields = obj.fields
    if "status" not in fields:
        return False
    ready, synced, synced_generation = _condition_facts(fields["status"].struct_value.fields)
    return ready and _current(fields, synced, synced_generation)


def release_ready(obj: struct_pb2.Struct, asked: str | None, deployed: str | None) -> bool:
    """Whether a provider-helm Release runs the spec the function wrote.

    Ready=True for its current generation, or upgraded to it (``upgraded_release``), and
    the chart version ``deployed`` (its ``status.atProvider.version``) the one its spec
    ``asked`` for (``spec.forProvider.chart.version``): a stale Ready=True of the revision
    before an upgrade never counts. (The two versions are given: ``Observed`` reads each once.)
    """
    fields = obj.fields
    if "status" not in fields:
        return False
    status = fields["status"].struct_value.fields
    ready, synced, synced_generation = _condition_facts(status)
    if ready:
        if not _current(fields, synced, synced_generation):
            return False
    elif not upgraded_release(obj):
        return False
    return deployed is None or asked is None or deployed == asked


def own_struct(_name: str) -> struct_pb2.Struct:
    """A new Struct for composed resource ``_name``: where a body is built if no response is."""
    return struct_pb2.Struct()


@dataclass
class CallContext:
    """Everything a builder or gate may read during one call (made by ``Accepted.context``)."""

    spec: ClusterPluginSpec
    step: StepInput
    flavour: Flavour
    names: Names
    facts: ClusterFacts
    observed: Observed
    # SelfHosted IRSA serving at least one add-on's role: the issuer is composed.
    hosts_issuer: bool = False
    # A wanted add-on has an IAM role (unless IRSA is Disabled, composed).
    wants_irsa: bool = False
    # The security-group ports every wanted add-on needs.
    port_needs: tuple[PortNeed, ...] = ()
    readiness: dict[str, Readiness] = field(default_factory=dict)
    # The call's clock, seconds since the epoch: the runner reads it once per call (the
    # in-memory Crossplane gives its own), so the plan is a function of the request and it.
    now: float = 0.0
    # Release node -> the chart versions whose permissions its add-on's IAM grants in this
    # call (function/upgrade.py decides them; absent: the version the release installs).
    chart_versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Releases given a new spec in this call: what is observed of them is the old one's, so
    # nothing gated on them may go ahead in this call.
    moving: frozenset[str] = frozenset()
    # The rollout that selects the XR (function/rollout/pull.py): an admitted cluster's chart
    # versions and values come from its target; the planner writes its report.
    rollout: RolloutTarget | None = None
    # Where a Release's body is built (``upgrade.decide``): the runner gives the response's own
    # Struct of that composed resource, so emitting it copies nothing; by default a new one.
    struct_for: Callable[[str], struct_pb2.Struct] = own_struct

    # --- facts that builders need, raising MissingFactError when unknown ----

    @property
    def region(self) -> str:
        """The AWS region: spec.region, else the AWSCluster's."""
        region = self.spec.region or self.facts.region
        if not region:
            raise MissingFactError(_no_region(self.facts))
        return region

    @property
    def partition(self) -> Partition:
        """The region's partition."""
        return partition_of(self.region)

    @property
    def irsa(self) -> IRSAMode:
        """The IRSA mode."""
        return self.spec.irsa.mode

    def issuer_url(self) -> str:
        """The service-account issuer URL (SelfHosted: derived; External: given or CAPA's)."""
        if self.irsa is IRSAMode.EXTERNAL:
            return self.external_issuer()[0]
        return issuer_url(self.spec, self.names, self.region)

    def external_issuer(self) -> tuple[str, str]:
        """External: (issuer URL, OIDC provider ARN), given or read from the EKS control plane."""
        found = external_issuer(self.spec, self.facts)
        if found is None:
            raise MissingFactError(_no_eks_issuer(self.facts))
        return found

    def issuer_host_path(self) -> str:
        """The issuer without its scheme, as IAM condition keys spell it."""
        return self.issuer_url().removeprefix("https://")

    def chart_default(self, chart: str, release: str) -> str:
        """The version of ``chart`` (of ``release``) when neither XR nor Composition pins one.

        The compatibility table's default for the minor the control plane runs and, while it
        moves to another, for that one too (function/compat.py); never older than what the
        Release runs (a default does not downgrade). Unknown until the control plane is read.
        """
        facts = self.facts
        minors = compat.cluster_minors(
            facts.kubernetes_version or "", facts.kubernetes_target_version or ""
        )
        if not minors:
            raise MissingFactError(
                Wait(
                    "control plane version",
                    "the control plane's Kubernetes version is not read yet: the chart versions "
                    "follow its minor",
                    reason="control plane version",
                )
            )
        runs = self.observed.chart_version(release) or ""
        version = compat.default_not_older(chart, minors, runs)
        if version is None:
            raise MissingFactError(
                Wait(f"{chart} version", f"no default version of {chart} is known", blocked=True)
            )
        return version

    def arn_of(self, node: str) -> str:
        """The observed ARN of ``node``."""
        arn = self.observed.arn(node)
        if not arn:
            raise MissingFactError(
                Wait(f"{node} ARN", f"{node} reports no status.atProvider.arn yet")
            )
        return arn

    def is_ready(self, node: str) -> bool:
        """Whether ``node`` is observed and ready under its own readiness rule, and stays so.

        A Release given a new spec in this call is not: its readiness is the old spec's.
        """
        if node in self.moving:
            return False
        return self.observed.ready(node, self.readiness.get(node, Readiness.CONDITION))


def issuer_url(
    spec: ClusterPluginSpec, names: Names, region: str, facts: ClusterFacts | None = None
) -> str:
    """The service-account issuer.

    External: the one given, else the EKS control plane's ("" while unknown);
    SelfHosted: the XR's own, in ``region``; PodIdentity: none ("").
    """
    if spec.irsa.mode is IRSAMode.EXTERNAL:
        found = external_issuer(spec, facts)
        return "" if found is None else found[0]
    if spec.irsa.mode is IRSAMode.POD_IDENTITY:
        return ""  # no issuer at all
    return names.issuer_url(region)


OIDC_PROVIDER_ARN_PREFIX = ":oidc-provider/"


def external_issuer(
    spec: ClusterPluginSpec, facts: ClusterFacts | None
) -> tuple[str, str] | None:
    """An External issuer: (URL, OIDC provider ARN); None while unknown.

    As given in ``spec.irsa``, else as CAPA reports it on the EKS control plane
    (``status.oidcProvider.arn``).

    An IAM OIDC provider's ARN ends with its issuer's host and path, so the URL follows.
    """
    irsa = spec.irsa
    if irsa.oidc_provider_arn:
        return irsa.issuer_url.rstrip("/"), irsa.oidc_provider_arn
    arn = None if facts is None else facts.oidc_provider_arn
    if not arn or OIDC_PROVIDER_ARN_PREFIX not in arn:
        return None
    return "https://" + arn.split(OIDC_PROVIDER_ARN_PREFIX, 1)[1].rstrip("/"), arn


def _no_eks_issuer(facts: ClusterFacts) -> Wait:
    if not facts.control_plane_found:
        return Wait(
            "control plane", "the EKS control plane, whose OIDC provider IRSA uses, is not read yet"
        )
    return Wait(
        "AWSManagedControlPlane status.oidcProvider.arn",
        "CAPA has not written the EKS cluster's OIDC provider (spec.associateOIDCProvider) yet",
        reason="EKS OIDC provider",
    )


def _no_region(facts: ClusterFacts) -> Wait:
    if facts.infrastructure_found or facts.control_plane_found:
        return Wait(
            "AWS region",
            "neither spec.region nor the AWSCluster's spec.region is set",
            blocked=True,
        )
    return Wait("AWSCluster", "the cluster's infrastructure object has not been read yet")


# --- gates -------------------------------------------------------------------


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
