"""The vocabulary of the resource graph: nodes, gates, readiness and the call context.

A node is one composed resource with a stable composition-resource-name, a
body builder, the gates that must hold before it is first emitted, and a
readiness rule. Add-on modules declare nodes; ``plan.py`` decides, call by
call, which are emitted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import structs
from function.cluster import ClusterFacts
from function.flavour import Flavour
from function.names import Names, Partition, partition_of
from function.spec import ClusterPluginSpec, IRSAMode, StepInput


class Readiness(Enum):
    """When a composed resource counts as ready."""

    CONDITION = "condition"  # observed with condition Ready=True
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


Gate = Callable[["Ctx"], Wait | None]
Builder = Callable[["Ctx"], dict[str, Any]]


@dataclass(frozen=True)
class Node:
    """One composed resource of the graph."""

    name: str
    build: Builder
    gates: tuple[Gate, ...] = ()
    readiness: Readiness = Readiness.CONDITION


@dataclass(frozen=True)
class Plugin:
    """A user-visible unit in ``status.plugins[]``: the nodes it owns."""

    name: str
    nodes: tuple[Node, ...]
    # status.roleARNs key and the node whose ARN fills it
    role_key: str | None = None
    role_node: str | None = None
    # Said in the plugin's status message even when it is Ready (e.g. a fallback taken).
    note: str = ""


ValuesPath = tuple[str, ...]


@dataclass(frozen=True)
class OwnedValues:
    """Helm values keys the function sets for an add-on: user values may not override them."""

    field: str  # where the user's values are, e.g. spec.storage.ebs.values
    spec: Callable[[ClusterPluginSpec], Any]  # the add-on's spec (with .values), or None
    paths: tuple[ValuesPath, ...]


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


@dataclass(frozen=True)
class Addon:
    """What an add-on module declares: its plugin, the values it owns, its deletion order.

    ``usages`` are (by, of, reason): ``by`` is deleted before ``of``. A Usage is
    emitted only when both ends are nodes of wanted plugins and both are observed.
    """

    plugin: Callable[[Ctx], Plugin | None]
    owned_values: tuple[OwnedValues, ...] = ()
    usages: tuple[tuple[str, str, str], ...] = ()
    # An XR condition of the add-on's own, given each wanted plugin's phase by name.
    condition: Callable[[Ctx, Mapping[str, str]], ConditionOut] | None = None


_UNSET: Any = object()


class Observed:
    """Read-only view of observed composed resources, straight from the protobuf.

    Lookups are memoized for the call: a node's readiness, ARN and reference are
    read by gates, builders, Usages and the status alike (issue 5).
    """

    def __init__(self, resources: Mapping[str, fnv1.Resource]) -> None:
        self._resources = resources
        self._objs: dict[str, struct_pb2.Struct | None] = {}
        self._ready: dict[str, bool] = {}
        self._arns: dict[str, str | None] = {}
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
        return list(self._resources.keys())

    @property
    def resources(self) -> Mapping[str, fnv1.Resource]:
        """The observed composed resources, as the request holds them."""
        return self._resources

    def ready(self, name: str, readiness: Readiness = Readiness.CONDITION) -> bool:
        """Whether ``name`` is observed and ready under ``readiness``."""
        if readiness is Readiness.ALWAYS:
            return True
        if readiness is Readiness.EXISTS:
            return self.get(name) is not None
        cached = self._ready.get(name)
        if cached is None:
            obj = self.get(name)
            cached = obj is not None and _ready_condition_true(obj)
            self._ready[name] = cached
        return cached

    def arn(self, name: str) -> str | None:
        """``status.atProvider.arn`` of an observed AWS resource."""
        arn = self._arns.get(name, _UNSET)
        if arn is _UNSET:
            obj = self.get(name)
            arn = None if obj is None else structs.str_at(obj, "status", "atProvider", "arn")
            self._arns[name] = arn
        return arn

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


def _ready_condition_true(obj: struct_pb2.Struct) -> bool:
    """``structs.condition_status(obj, "Ready") == "True"``, unrolled: read for every node."""
    # Every map is checked with ``in`` first (indexing would insert); a Value of
    # another kind reads as an empty Struct or list.
    fields = obj.fields
    if "status" not in fields:
        return False
    fields = fields["status"].struct_value.fields
    if "conditions" not in fields:
        return False
    for item in fields["conditions"].list_value.values:
        cond = item.struct_value.fields
        if "type" in cond and cond["type"].string_value == "Ready":
            return "status" in cond and cond["status"].string_value == "True"
    return False


@dataclass
class Ctx:
    """Everything a builder or gate may read during one call."""

    spec: ClusterPluginSpec
    step: StepInput
    flavour: Flavour
    names: Names
    facts: ClusterFacts
    observed: Observed
    readiness: dict[str, Readiness] = field(default_factory=dict)

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
        """The service-account issuer URL (SelfHosted: derived; External: given)."""
        if self.irsa is IRSAMode.EXTERNAL:
            return self.spec.irsa.issuer_url.rstrip("/")
        return self.names.issuer_url(self.region)

    def issuer_host_path(self) -> str:
        """The issuer without its scheme, as IAM condition keys spell it."""
        return self.issuer_url().removeprefix("https://")

    def oidc_provider_arn(self) -> str:
        """The IAM OIDC provider's ARN (SelfHosted: observed; External: given)."""
        if self.irsa is IRSAMode.EXTERNAL:
            return self.spec.irsa.oidc_provider_arn
        arn = self.observed.arn("irsa-oidc-provider")
        if not arn:
            raise MissingFactError(
                Wait("irsa-oidc-provider ARN", "the OIDC provider has no ARN yet")
            )
        return arn

    def arn_of(self, node: str) -> str:
        """The observed ARN of ``node``."""
        arn = self.observed.arn(node)
        if not arn:
            raise MissingFactError(
                Wait(f"{node} ARN", f"{node} reports no status.atProvider.arn yet")
            )
        return arn

    def is_ready(self, node: str) -> bool:
        """Whether ``node`` is observed and ready under its own readiness rule."""
        return self.observed.ready(node, self.readiness.get(node, Readiness.CONDITION))


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
# the gates are made once per process instead of once per call (issue 5).
@functools.cache
def after(*nodes: str) -> Gate:
    """Gate: every node in ``nodes`` is observed and ready."""

    def gate(ctx: Ctx) -> Wait | None:
        for n in nodes:
            if not ctx.is_ready(n):
                return Wait(f"{n} Ready", f"waiting for {n} to become Ready")
        return None

    gate.__name__ = f"after({', '.join(nodes)})"
    return gate


def control_plane_initialized(ctx: Ctx) -> Wait | None:
    """Gate: the workload control plane is initialized (its API server answers)."""
    if ctx.facts.initialized:
        return None
    return _control_plane_wait(ctx, "initialized")


def control_plane_available(ctx: Ctx) -> Wait | None:
    """Gate: the workload control plane is available."""
    if ctx.facts.available:
        return None
    return _control_plane_wait(ctx, "available")


def _control_plane_wait(ctx: Ctx, state: str) -> Wait:
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


def cni_ready(ctx: Ctx) -> Wait | None:
    """Gate: the CNI this XR installs is ready; without one, the control plane is available.

    With no networking plugin in the spec the user brings their own CNI; the
    best signal we have that pods can run is an available control plane.
    """
    n = ctx.spec.networking
    if n.amazon_vpc is None and n.calico is None:
        return control_plane_available(ctx)
    return after("cni-release")(ctx)


def ccm_ready(ctx: Ctx) -> Wait | None:
    """Gate: the cloud controller manager is ready, when this XR installs it.

    Until it runs, nodes keep the uninitialized taint and no ordinary pod schedules.
    """
    if ctx.spec.cloud_provider.aws is None:
        return None
    return after("ccm-release")(ctx)


def webhook_installed(ctx: Ctx) -> bool:
    """Whether this XR installs the pod identity webhook."""
    return (
        ctx.irsa is IRSAMode.SELF_HOSTED
        and ctx.spec.wants_aws
        and ctx.spec.irsa.pod_identity_webhook.install
    )


def webhook_ready(ctx: Ctx) -> Wait | None:
    """Gate: the pod identity webhook is ready, when this XR installs it.

    Pods only get IRSA credentials if the webhook mutates them at creation, so an
    add-on started before it would silently run on the node's role.
    """
    if not webhook_installed(ctx):
        return None
    return after("pod-identity-webhook-release")(ctx)


@functools.cache
def role_ready(role_node: str) -> Gate:
    """Gate: an add-on's role and its policy attachment are ready (unless IRSA is Disabled)."""

    def gate(ctx: Ctx) -> Wait | None:
        if ctx.irsa is IRSAMode.DISABLED:
            return None
        return after(role_node, f"{role_node}-attachment")(ctx)

    return gate


@functools.cache
def addon_release_gates(role_node: str) -> tuple[Gate, ...]:
    """The gates of an IRSA add-on's Release (DESIGN sections 4, 8, 10).

    The control plane is available, the CNI runs, the CCM (when wanted) has initialized
    the nodes, the add-on's role is ready, and the webhook that injects its credentials
    runs (SelfHosted): started before any of these, its pods would not schedule, have
    no network, or silently run on the node's role.
    """
    return (control_plane_available, cni_ready, ccm_ready, role_ready(role_node), webhook_ready)
