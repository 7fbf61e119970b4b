"""Cluster facts: what the Cluster API objects say, read from the request.

The function asks Crossplane for the CAPI ``Cluster``, its control plane, its
infrastructure object and (SelfHosted IRSA) the ``<cluster>-sa`` Secret. It
writes both the v2 ``requirements.resources`` and the deprecated
``requirements.extra_resources`` field (Crossplane 1.x reads only the latter)
and reads ``required_resources`` first, then ``extra_resources``.

Crossplane 1.x selectors carry no namespace, so the deprecated field selects
by the ``cluster.x-k8s.io/cluster-name`` label (which CAPI puts on the control
plane, the infrastructure object and the cluster's Secrets, not on the Cluster)
and only objects of the cluster's namespace are kept.

The local tools (``issuer``, ``aws preflight``) read the same facts the same way:
``function_tools/resolve.py`` assembles, from the objects a user gives, the request
Crossplane would send, and ``read_facts`` reads it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import structs
from function.step_input import ClusterAPIVersions

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

# Requirement names, shared by both requirement fields.
REQ_CLUSTER = "cluster"
REQ_CONTROL_PLANE = "control-plane"
REQ_INFRASTRUCTURE = "infrastructure"
REQ_SA_SECRET = "sa-secret"  # noqa: S105  # a requirement name, not a secret
# The XR's Usages, asked for by the planner while one may still hold a withdrawn resource.
REQ_USAGES = "usages"
# The user of a withdrawn Usage, asked for by name (this prefix and the Usage's
# composition-resource-name) while the Usage is kept until its user is gone.
REQ_USER_OF = "user-of/"
# What the last layer of a withdrawal dropped, asked for by name (this prefix, then
# <kind>/<name>) until the API server no longer has it.
REQ_FINALIZING = "finalizing/"

EKS_CONTROL_PLANE = "AWSManagedControlPlane"
KUBEADM_CONTROL_PLANE = "KubeadmControlPlane"
# The control planes the function serves: any other (CAPA's ROSAControlPlane, another
# provider's) is refused, not waited for.
SERVED_CONTROL_PLANES = (KUBEADM_CONTROL_PLANE, EKS_CONTROL_PLANE)
# CAPA's annotation on the AWSCluster or AWSManagedControlPlane: "false" turns its
# garbage collection of the load balancers (and security groups) others made off.
EXTERNAL_RESOURCE_GC = "aws.cluster.x-k8s.io/external-resource-gc"


@dataclass(frozen=True)
class Selector:
    """One required resource the function asks for."""

    api_version: str
    kind: str
    match_name: str | None = None
    match_labels: tuple[tuple[str, str], ...] = ()
    namespace: str | None = None

    def write(self, sel: fnv1.ResourceSelector) -> None:
        """Fill a protobuf ResourceSelector."""
        sel.api_version = self.api_version
        sel.kind = self.kind
        if self.match_name is not None:
            sel.match_name = self.match_name
        elif self.match_labels:
            sel.match_labels.labels.update(dict(self.match_labels))
        else:
            # No label: every object of the kind (an empty label selector lists them all).
            sel.match_labels.SetInParent()
        if self.namespace is not None:
            sel.namespace = self.namespace


@dataclass(frozen=True)
class Requirements:
    """Selectors for the v2 field and for the deprecated 1.x field."""

    resources: dict[str, Selector]
    extra_resources: dict[str, Selector]
    # Crossplane does not say it resolves the v2 field: what else is asked goes in both.
    both_fields: bool = True

    def asks(self, name: str) -> bool:
        """Whether either field asks for requirement ``name``."""
        return name in self.resources or name in self.extra_resources

    def adding(self, selectors: Mapping[str, Selector]) -> Requirements:
        """These and ``selectors`` (the planner's), in the field(s) this Crossplane reads."""
        if not selectors:
            return self
        extra = {**self.extra_resources, **selectors} if self.both_fields else self.extra_resources
        return Requirements({**self.resources, **selectors}, extra, self.both_fields)

    def write(self, out: fnv1.Requirements) -> None:
        """Fill a response's requirements: the one place they are written."""
        for name, sel in self.resources.items():
            sel.write(out.resources[name])
        for name, sel in self.extra_resources.items():
            sel.write(out.extra_resources[name])


@dataclass(frozen=True)
class SecurityGroup:
    """A security group as CAPA reports or is told about it."""

    id: str
    # Ingress rules CAPA reports: (protocol, fromPort, toPort, source ids, source roles, cidrs)
    rules: tuple[IngressRule, ...] = ()


class IngressRule(NamedTuple):
    """One ingress rule from ``status.networkStatus.securityGroups.<role>.ingressRule``.

    A NamedTuple (cheaper to make than a dataclass): read for every rule of every group on
    every call.
    """

    protocol: str
    from_port: int
    to_port: int
    source_ids: frozenset[str] = frozenset()
    source_roles: frozenset[str] = frozenset()
    cidrs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ClusterFacts:
    """What the function knows about the workload cluster in one call."""

    namespace: str
    cluster_found: bool = False
    control_plane_kind: str | None = None
    control_plane_found: bool = False
    infrastructure_found: bool = False
    initialized: bool = False
    available: bool = False
    region: str | None = None
    vpc_id: str | None = None
    pod_cidr: str | None = None
    # The ClusterClass the Cluster is made from (spec.topology), if any: its control plane and
    # infrastructure objects are then generated and owned by the topology controller, which
    # reverts a direct edit (a fix belongs in the ClusterClass's templates or variables).
    topology_class: str | None = None
    # role -> id of groups given in AWSCluster.spec.network.securityGroupOverrides
    sg_overrides: dict[str, str] = field(default_factory=dict)
    # role -> group CAPA manages and reports in status.networkStatus.securityGroups
    sg_managed: dict[str, SecurityGroup] = field(default_factory=dict)
    # The name AWS knows the cluster by (EKS: spec.eksClusterName), used in subnet tags.
    kubernetes_cluster_name: str | None = None
    # EKS: whether the AWSManagedControlPlane asks CAPA for the cluster's IAM OIDC provider
    # (spec.associateOIDCProvider), and its ARN once CAPA wrote it (status.oidcProvider.arn).
    associates_oidc_provider: bool = False
    oidc_provider_arn: str | None = None
    # EKS: spec.eksClusterName as read (None when unset), and the EKS managed add-ons CAPA
    # installs: name -> status (status.addons[].status, "" until CAPA reports it) of each one
    # spec.addons lists.
    eks_cluster_name: str | None = None
    eks_addons: dict[str, str] = field(default_factory=dict)
    sa_public_pem: bytes | None = None
    sa_problem: str | None = None
    # The control plane's Kubernetes version the cluster runs: the lower minor of
    # spec.version and status.version (the oldest control-plane machine) while a
    # rollout is under way, so nothing is started newer than the API server it talks to.
    kubernetes_version: str | None = None
    # The version the control plane is asked to run (spec.version): ahead of
    # kubernetes_version while an upgrade of the control plane is under way.
    kubernetes_target_version: str | None = None
    # The KubeadmControlPlane runs kubelets / the controller manager with
    # ``cloud-provider: external``: nodes stay tainted until a CCM runs.
    external_cloud_provider: bool = False
    # The KubeadmControlPlane's --service-account-issuer (the first: the one the API server
    # signs tokens with), None when it sets none or the control plane is not kubeadm's.
    service_account_issuer: str | None = None
    # The Cluster's uid: its own, or (Crossplane 1.x, which never reads the Cluster)
    # from the ownerReferences CAPI puts on the control plane and infrastructure.
    cluster_uid: str | None = None
    # (apiVersion, kind, name) of the Cluster as read, for a Usage of it.
    cluster_ref: tuple[str, str, str] | None = None
    # "<Kind> <namespace>/<name>" of the first of the cluster's objects being deleted.
    deleting: str | None = None
    # Cluster.spec.paused: Cluster API reconciles nothing of it (a rollout skips it).
    paused: bool = False
    # The objects as read, for what only the local tools ask (external_resource_gc).
    control_plane: struct_pb2.Struct | None = None
    infrastructure: struct_pb2.Struct | None = None

    @property
    def eks(self) -> bool:
        """Whether the control plane is EKS (AWSManagedControlPlane)."""
        return self.control_plane_kind == EKS_CONTROL_PLANE

    @property
    def found(self) -> bool:
        """Whether any object of the cluster (Cluster, control plane, infrastructure) was read."""
        return self.cluster_found or self.control_plane_found or self.infrastructure_found


def _version_for(kind: str, capi: ClusterAPIVersions) -> str | None:
    return {
        "KubeadmControlPlane": capi.kubeadm_control_plane,
        "AWSManagedControlPlane": capi.aws_managed_control_plane,
        "AWSCluster": capi.aws_cluster,
        "AWSManagedCluster": capi.aws_managed_cluster,
    }.get(kind)


def _ref_selector(
    ref: struct_pb2.Struct | None, namespace: str, capi: ClusterAPIVersions
) -> Selector | None:
    """A selector for a CAPI object reference, v1beta1 or v1beta2 shaped."""
    if ref is None:
        return None
    kind = structs.str_at(ref, "kind")
    name = structs.str_at(ref, "name")
    if not kind or not name:
        return None
    # v1beta1 refs carry apiVersion; v1beta2 refs carry only apiGroup.
    api_version = structs.str_at(ref, "apiVersion")
    if api_version is None:
        group = structs.str_at(ref, "apiGroup")
        known = _version_for(kind, capi)
        if known and (group is None or known.startswith(group + "/")):
            api_version = known
        elif group:
            return None  # a kind we have no version for: nothing we can use
    if api_version is None:
        return None
    # Always the XR's namespace: a ref naming another namespace (CAPI's webhook
    # forbids it) must not make Crossplane read objects there on our behalf.
    return Selector(api_version, kind, match_name=name, namespace=namespace)


def _items(req: fnv1.RunFunctionRequest, name: str) -> tuple[list[struct_pb2.Struct], bool]:
    """Required resources under ``name``: (items, whether any field resolved it)."""
    if name in req.required_resources:
        items = [r.resource for r in req.required_resources[name].items]
        if items:
            return items, True
    if name in req.extra_resources:
        return [r.resource for r in req.extra_resources[name].items], True
    return [], name in req.required_resources


def required_objects(
    req: fnv1.RunFunctionRequest, name: str, namespace: str | None
) -> list[struct_pb2.Struct] | None:
    """The objects Crossplane resolved for requirement ``name``; None if not resolved (yet).

    Either field; only the objects of ``namespace`` (None: cluster-scoped objects), as
    label-selected lists of Crossplane 1.x span namespaces.
    """
    items, resolved = _items(req, name)
    if not resolved:
        return None
    return [i for i in items if structs.str_at(i, "metadata", "namespace") == namespace]


def _pick(
    items: Iterable[struct_pb2.Struct], namespace: str, name: str | None = None
) -> struct_pb2.Struct | None:
    # Label-selected lists (Crossplane 1.x) span namespaces: keep only ours.
    for item in items:
        ns = structs.str_at(item, "metadata", "namespace")
        if ns is not None and ns != namespace:
            continue
        if name is not None and structs.str_at(item, "metadata", "name") != name:
            continue
        return item
    return None


@dataclass(frozen=True)
class Lookup:
    """What the function looks for: the XR's cluster, its objects and (SelfHosted) its key."""

    cluster_name: str
    namespace: str  # the CAPI cluster's
    want_sa_secret: bool  # the issuer is composed: its JWKS needs <cluster>-sa's public key
    versions: ClusterAPIVersions  # input.clusterAPI: the apiVersion asked per kind


def requirements(req: fnv1.RunFunctionRequest, lookup: Lookup) -> Requirements:
    """The required resources to ask for, given what the request already holds."""
    capi = lookup.versions
    cluster_name, namespace = lookup.cluster_name, lookup.namespace
    label = ((CLUSTER_NAME_LABEL, cluster_name),)
    resources: dict[str, Selector] = {
        REQ_CLUSTER: Selector(
            capi.cluster, "Cluster", match_name=cluster_name, namespace=namespace
        ),
    }
    cluster_items, _ = _items(req, REQ_CLUSTER)
    cluster = _pick(cluster_items, namespace, cluster_name)
    if cluster is not None:
        cp = _ref_selector(structs.struct_at(cluster, "spec", "controlPlaneRef"), namespace, capi)
        infra = _ref_selector(
            structs.struct_at(cluster, "spec", "infrastructureRef"), namespace, capi
        )
        if cp is not None:
            resources[REQ_CONTROL_PLANE] = cp
        if infra is not None:
            resources[REQ_INFRASTRUCTURE] = infra
    if lookup.want_sa_secret:
        resources[REQ_SA_SECRET] = Selector(
            "v1", "Secret", match_name=f"{cluster_name}-sa", namespace=namespace
        )

    extra: dict[str, Selector] = {}
    # Crossplane >= 2.2 says what it supports; once it advertises required
    # resources there is no need to also list by label in the deprecated field.
    if not supports_required_resources(req):
        eks = capi.legacy_control_plane_kind == EKS_CONTROL_PLANE
        cp_kind = capi.legacy_control_plane_kind
        infra_kind = "AWSManagedCluster" if eks else "AWSCluster"
        extra[REQ_CONTROL_PLANE] = Selector(
            _version_for(cp_kind, capi) or "", cp_kind, match_labels=label
        )
        extra[REQ_INFRASTRUCTURE] = Selector(
            _version_for(infra_kind, capi) or "", infra_kind, match_labels=label
        )
        if lookup.want_sa_secret:
            extra[REQ_SA_SECRET] = Selector("v1", "Secret", match_labels=label)
    return Requirements(resources, extra, both_fields=not supports_required_resources(req))


def usages_in_api(
    req: fnv1.RunFunctionRequest, namespace: str | None
) -> frozenset[tuple[str, str, str]] | None:
    """(apiVersion, kind, name) of what the Usages Crossplane resolved for REQ_USAGES use.

    ``namespace``: the XR's (its Usages are namespaced), None for a legacy XR. None when
    Crossplane has not resolved the requirement.
    """
    usages = required_objects(req, REQ_USAGES, namespace)
    if usages is None:
        return None
    return frozenset(
        (
            structs.str_at(u, "spec", "of", "apiVersion") or "",
            structs.str_at(u, "spec", "of", "kind") or "",
            structs.str_at(u, "spec", "of", "resourceRef", "name") or "",
        )
        for u in usages
    )


def found_by_name(req: fnv1.RunFunctionRequest, namespace: str | None) -> dict[str, bool]:
    """Requirement name -> whether the API server still has what was asked for by name.

    For each REQ_USER_OF or REQ_FINALIZING requirement Crossplane resolved.

    ``namespace`` as for ``usages_in_api`` (every composed resource is in the XR's).
    """
    out: dict[str, bool] = {}
    for resolved in (req.required_resources, req.extra_resources):
        for name in resolved:
            if name.startswith((REQ_USER_OF, REQ_FINALIZING)) and name not in out:
                found = required_objects(req, name, namespace)
                if found is not None:
                    out[name] = bool(found)
    return out


def supports_required_resources(req: fnv1.RunFunctionRequest) -> bool:
    """Whether Crossplane says it resolves ``requirements.resources`` (>= 2.2)."""
    caps = req.meta.capabilities
    return fnv1.CAPABILITY_CAPABILITIES in caps and fnv1.CAPABILITY_REQUIRED_RESOURCES in caps


def _condition_true(obj: struct_pb2.Struct, typ: str) -> bool:
    # v1beta2 conditions live in status.conditions; a v1beta1 object that
    # already carries new-style conditions has them in status.v1beta2.conditions.
    return (
        structs.condition_status(obj, typ) == "True"
        or structs.condition_status(obj, typ, "status", "v1beta2", "conditions") == "True"
    )


def control_plane_state(cp: struct_pb2.Struct) -> tuple[bool, bool]:
    """(initialized, available) of a control plane, under either CAPI contract."""
    initialized = bool(
        structs.bool_at(cp, "status", "initialization", "controlPlaneInitialized")
        or _condition_true(cp, "Initialized")
        or structs.bool_at(cp, "status", "initialized")
    )
    available = bool(_condition_true(cp, "Available") or structs.bool_at(cp, "status", "ready"))
    # Available implies initialized, whatever a partial status says.
    return initialized or available, available


def _pod_cidr(cluster: struct_pb2.Struct | None, cp: struct_pb2.Struct | None) -> str | None:
    if cluster is not None:
        blocks = structs.strings_at(cluster, "spec", "clusterNetwork", "pods", "cidrBlocks")
        if blocks:
            return blocks[0]
    if cp is not None:
        subnet = structs.str_at(
            cp, "spec", "kubeadmConfigSpec", "clusterConfiguration", "networking", "podSubnet"
        )
        if subnet:
            return subnet.split(",")[0].strip()
    return None


def _int(v: struct_pb2.Value | None, default: int) -> int:
    if v is None or v.WhichOneof("kind") != "number_value":
        return default
    return int(v.number_value)


_NONE: frozenset[str] = frozenset()


def _strings(v: struct_pb2.Value) -> frozenset[str]:
    # A Value of another kind reads as an empty list.
    return frozenset(i.string_value for i in v.list_value.values if i.HasField("string_value"))


def _ingress_rule(r: struct_pb2.Struct) -> IngressRule:
    # One pass over the rule's keys instead of a lookup per field: it runs for every rule.
    protocol, from_port, to_port = "", -1, -1
    ids = roles = cidrs = _NONE
    for key, v in r.fields.items():
        if key == "protocol":
            protocol = v.string_value
        elif key == "fromPort":
            from_port = _int(v, -1)
        elif key == "toPort":
            to_port = _int(v, -1)
        elif key == "sourceSecurityGroupIds":
            ids = _strings(v)
        elif key == "sourceSecurityGroupRoles":
            roles = _strings(v)
        elif key == "cidrBlocks":
            cidrs = _strings(v)
    return IngressRule(protocol, from_port, to_port, ids, roles, cidrs)


def _security_groups(obj: struct_pb2.Struct) -> tuple[tuple[str, SecurityGroup], ...]:
    sgs = structs.struct_at(obj, "status", "networkStatus", "securityGroups")
    if sgs is None:
        return ()
    return _parse_security_groups(sgs.SerializeToString(deterministic=True))


# CAPA's rules change only when the cluster's groups do, and reading them rule by
# rule was a tenth of a call: cached by their bytes (a few KB per XR).
@functools.lru_cache(maxsize=1024)
def _parse_security_groups(serialized: bytes) -> tuple[tuple[str, SecurityGroup], ...]:
    sgs = struct_pb2.Struct.FromString(serialized)
    groups = []
    for role, v in sgs.fields.items():
        if v.WhichOneof("kind") != "struct_value":
            continue
        sg = v.struct_value
        sg_id = structs.str_at(sg, "id")
        if not sg_id:
            continue
        rules = tuple(_ingress_rule(r) for r in structs.structs_at(sg, "ingressRule"))
        groups.append((role, SecurityGroup(sg_id, rules)))
    return tuple(groups)


_VERSION = re.compile(r"^v?(\d+)\.(\d+)(\.\d+)?")


def minor_of(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a Kubernetes version such as v1.33.2, or None."""
    m = _VERSION.match(version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _kubernetes_version(cp: struct_pb2.Struct) -> str | None:
    wanted = structs.str_at(cp, "spec", "version")
    running = structs.str_at(cp, "status", "version")
    if running is None:
        entries = structs.structs_at(cp, "status", "versions")
        versions = [v for v in (structs.str_at(e, "version") for e in entries) if v]
        running = min(versions, key=lambda v: minor_of(v) or (0, 0)) if versions else None
    lo, hi = minor_of(running), minor_of(wanted)
    if lo is not None and (hi is None or lo < hi):
        return running
    return wanted


def _arg(obj: struct_pb2.Struct, name: str, *path: str) -> str | None:
    """A kubeadm extra argument: a v1beta1 map or a v1beta2 ``[{name, value}]`` list."""
    v = structs.value_at(obj, *path)
    if v is None:
        return None
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        args = v.struct_value.fields
        return args[name].string_value if name in args else None
    if kind == "list_value":
        for item in v.list_value.values:
            entry = item.struct_value.fields
            if "name" in entry and entry["name"].string_value == name:
                return entry["value"].string_value if "value" in entry else ""
    return None


_CLOUD_PROVIDER_ARGS = (
    ("clusterConfiguration", "controllerManager", "extraArgs"),
    ("initConfiguration", "nodeRegistration", "kubeletExtraArgs"),
    ("joinConfiguration", "nodeRegistration", "kubeletExtraArgs"),
)


def external_cloud_provider(cp: struct_pb2.Struct) -> bool:
    """Whether a KubeadmControlPlane sets cloud-provider: external (kubelet, controller manager)."""
    return any(
        _arg(cp, "cloud-provider", "spec", "kubeadmConfigSpec", *path) == "external"
        for path in _CLOUD_PROVIDER_ARGS
    )


_API_SERVER_ARGS = ("spec", "kubeadmConfigSpec", "clusterConfiguration", "apiServer", "extraArgs")


def service_account_issuer(cp: struct_pb2.Struct) -> str | None:
    """A KubeadmControlPlane's --service-account-issuer (the first, which signs), or None.

    None too for another kind of control plane: only kubeadm's is read.
    """
    if structs.str_at(cp, "kind") != KUBEADM_CONTROL_PLANE:
        return None
    return _arg(cp, "service-account-issuer", *_API_SERVER_ARGS) or None


def _topology_class(cluster: struct_pb2.Struct | None) -> str | None:
    """The Cluster's ClusterClass: spec.topology.classRef.name (v1beta2) or .class (v1beta1)."""
    if cluster is None:
        return None
    return (
        structs.str_at(cluster, "spec", "topology", "classRef", "name")
        or structs.str_at(cluster, "spec", "topology", "class")
        or None
    )


def _eks_addons(cp: struct_pb2.Struct) -> dict[str, str]:
    """Name -> status of each add-on an AWSManagedControlPlane's spec.addons lists."""
    reported = {
        structs.str_at(a, "name"): structs.str_at(a, "status") or ""
        for a in structs.structs_at(cp, "status", "addons")
    }
    names = (structs.str_at(a, "name") for a in structs.structs_at(cp, "spec", "addons"))
    return {name: reported.get(name, "") for name in names if name}


def _deleting(objs: Iterable[struct_pb2.Struct | None]) -> str | None:
    for obj in objs:
        if obj is not None and structs.str_at(obj, "metadata", "deletionTimestamp"):
            kind = structs.str_at(obj, "kind") or "object"
            ns = structs.str_at(obj, "metadata", "namespace") or ""
            return f"{kind} {ns}/{structs.str_at(obj, 'metadata', 'name') or ''}"
    return None


def _cluster_uid(
    cluster: struct_pb2.Struct | None, others: Iterable[struct_pb2.Struct | None], name: str
) -> str | None:
    if cluster is not None:
        return structs.str_at(cluster, "metadata", "uid")
    for obj in others:
        if obj is None:
            continue
        for ref in structs.structs_at(obj, "metadata", "ownerReferences"):
            if structs.str_at(ref, "kind") == "Cluster" and structs.str_at(ref, "name") == name:
                return structs.str_at(ref, "uid")
    return None


def _sa_public_key(secret: struct_pb2.Struct | None) -> tuple[bytes | None, str | None]:
    """The PEM public key from ``data["tls.crt"]``; ``tls.key`` is never touched."""
    if secret is None:
        return None, None
    encoded = structs.str_at(secret, "data", "tls.crt")
    if not encoded:
        return None, "the Secret has no data key tls.crt"
    try:
        pem = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None, "data[tls.crt] is not valid base64"
    if b"-----BEGIN " not in pem:
        return None, "data[tls.crt] is not PEM"
    return pem, None


def _network(
    infra: struct_pb2.Struct | None, cp: struct_pb2.Struct | None
) -> tuple[str | None, str | None, dict[str, str], dict[str, SecurityGroup]]:
    """(region, VPC id, group overrides, CAPA's groups): the infrastructure object's first."""
    region = vpc_id = None
    overrides: dict[str, str] = {}
    managed: dict[str, SecurityGroup] = {}
    for obj in (infra, cp):
        if obj is None:
            continue
        region = region or structs.str_at(obj, "spec", "region")
        vpc_id = vpc_id or structs.str_at(obj, "spec", "network", "vpc", "id")
        ov = structs.struct_at(obj, "spec", "network", "securityGroupOverrides")
        if ov is not None:
            for role, v in ov.fields.items():
                if v.WhichOneof("kind") == "string_value" and v.string_value:
                    overrides.setdefault(role, v.string_value)
        for role, sg in _security_groups(obj):
            managed.setdefault(role, sg)
    # A group named in securityGroupOverrides is the user's, not CAPA's.
    managed = {role: sg for role, sg in managed.items() if role not in overrides}
    return region, vpc_id, overrides, managed


def read_facts(
    req: fnv1.RunFunctionRequest, lookup: Lookup, asked: Requirements | None = None
) -> ClusterFacts:
    """Gather the cluster facts from the request's required/extra resources.

    With ``asked`` (what this call asks for), only those: Crossplane v2.4 also sends
    again what the previous reconcile resolved, so once the Cluster is gone its control
    plane and infrastructure object, no longer asked for, would still be read as they
    were, not being deleted.
    """

    def items(name: str) -> list[struct_pb2.Struct]:
        return [] if asked is not None and not asked.asks(name) else _items(req, name)[0]

    cluster_name, namespace = lookup.cluster_name, lookup.namespace
    cluster = _pick(items(REQ_CLUSTER), namespace, cluster_name)
    cp = _pick(items(REQ_CONTROL_PLANE), namespace)
    infra = _pick(items(REQ_INFRASTRUCTURE), namespace)
    secret = _pick(items(REQ_SA_SECRET), namespace, f"{cluster_name}-sa")

    initialized = available = False
    cp_kind = None
    if cp is not None:
        cp_kind = structs.str_at(cp, "kind")
        initialized, available = control_plane_state(cp)
    elif cluster is not None:
        ref_kind = structs.str_at(cluster, "spec", "controlPlaneRef", "kind")
        cp_kind = ref_kind

    region, vpc_id, overrides, managed = _network(infra, cp)

    eks_name = oidc_arn = None
    associates = False
    eks_addons: dict[str, str] = {}
    if cp is not None and cp_kind == EKS_CONTROL_PLANE:
        eks_name = structs.str_at(cp, "spec", "eksClusterName")
        associates = bool(structs.bool_at(cp, "spec", "associateOIDCProvider"))
        oidc_arn = structs.str_at(cp, "status", "oidcProvider", "arn") or None
        eks_addons = _eks_addons(cp)
    pem, problem = _sa_public_key(secret)
    cluster_ref = None
    if cluster is not None:
        cluster_ref = (structs.str_at(cluster, "apiVersion") or "", "Cluster", cluster_name)
    return ClusterFacts(
        namespace=namespace,
        cluster_found=cluster is not None,
        control_plane_kind=cp_kind,
        control_plane_found=cp is not None,
        infrastructure_found=infra is not None,
        initialized=initialized,
        available=available,
        region=region,
        vpc_id=vpc_id,
        pod_cidr=_pod_cidr(cluster, cp),
        topology_class=_topology_class(cluster),
        sg_overrides=overrides,
        sg_managed=managed,
        kubernetes_cluster_name=eks_name or cluster_name,
        associates_oidc_provider=associates,
        oidc_provider_arn=oidc_arn,
        eks_cluster_name=eks_name or None,
        eks_addons=eks_addons,
        sa_public_pem=pem,
        sa_problem=problem,
        kubernetes_version=_kubernetes_version(cp) if cp is not None else None,
        kubernetes_target_version=structs.str_at(cp, "spec", "version") if cp is not None else None,
        external_cloud_provider=cp is not None and external_cloud_provider(cp),
        service_account_issuer=service_account_issuer(cp) if cp is not None else None,
        cluster_uid=_cluster_uid(cluster, (cp, infra), cluster_name),
        cluster_ref=cluster_ref,
        deleting=_deleting((cluster, cp, infra)),
        paused=cluster is not None and bool(structs.bool_at(cluster, "spec", "paused")),
        control_plane=cp,
        infrastructure=infra,
    )


def external_resource_gc(facts: ClusterFacts) -> str | None:
    """CAPA's external-resource-gc annotation ("" when unset); None without the object."""
    # On EKS CAPA reads it from the AWSManagedControlPlane, else from the AWSCluster.
    obj = facts.control_plane if facts.eks else facts.infrastructure
    if obj is None:
        return None
    return structs.str_at(obj, "metadata", "annotations", EXTERNAL_RESOURCE_GC) or ""


def control_plane_name(facts: ClusterFacts) -> str:
    """``<namespace>/<name>`` of the control plane as read, for messages."""
    cp = facts.control_plane
    name = None if cp is None else structs.str_at(cp, "metadata", "name")
    return f"{facts.namespace}/{name}" if name else f"of {facts.namespace}"


def infrastructure_name(facts: ClusterFacts) -> str | None:
    """The infrastructure object's name (an AWSCluster's, say), when read."""
    if facts.infrastructure is None:
        return None
    return structs.str_at(facts.infrastructure, "metadata", "name")


# --- the objects a user gives the local tools ------------------------------------------

CAPI_GROUP = "cluster.x-k8s.io"
# Where the step input names each kind's apiVersion (input.clusterAPI.<field>).
VERSION_FIELDS = {
    "Cluster": "cluster",
    "KubeadmControlPlane": "kubeadmControlPlane",
    "AWSManagedControlPlane": "awsManagedControlPlane",
    "AWSCluster": "awsCluster",
    "AWSManagedCluster": "awsManagedCluster",
}


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _is_cluster(api_version: Any, kind: Any) -> bool:
    return kind == "Cluster" and str(api_version or "").split("/", maxsplit=1)[0] == CAPI_GROUP


def cluster_of(obj: Mapping[str, Any]) -> tuple[str | None, str] | None:
    """(namespace, name) of the CAPI cluster ``obj`` is part of, as CAPI marks it, or None.

    The Cluster itself; else the ``cluster.x-k8s.io/cluster-name`` label CAPI puts on a
    cluster's objects and Secrets; else an ownerReference to a Cluster.
    """
    meta = _mapping(obj.get("metadata"))
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    if _is_cluster(obj.get("apiVersion"), obj.get("kind")) and isinstance(meta.get("name"), str):
        return namespace, meta["name"]
    label = _mapping(meta.get("labels")).get(CLUSTER_NAME_LABEL)
    if isinstance(label, str) and label:
        return namespace, label
    for item in meta.get("ownerReferences") or ():
        ref = _mapping(item)
        if _is_cluster(ref.get("apiVersion"), ref.get("kind")) and isinstance(ref.get("name"), str):
            return namespace, ref["name"]
    return None


# The role of an AWSManagedMachinePool without spec.roleName: clusterawsadm's default for EKS
# managed node groups (CAPA v2.13 pkg/cloud/services/eks/roles.go; with its EKSEnableIAM feature
# CAPA makes a role per node group instead, and writes its name into spec.roleName).
EKS_NODEGROUP_ROLE = "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io"
# Node groups (CAPI) and what of their AWS objects names the IAM identity their nodes run with.
_NODE_GROUPS = ("MachineDeployment", "MachinePool")
_NODE_IDENTITY_PATHS = {
    "AWSManagedMachinePool": ("spec", "roleName"),  # a role (EKS managed node group)
    "AWSMachinePool": ("spec", "awsLaunchTemplate", "iamInstanceProfile"),  # an instance profile
    "AWSMachineTemplate": ("spec", "template", "spec", "iamInstanceProfile"),  # an instance profile
}


@dataclass(frozen=True)
class NodeIdentity:
    """The IAM identity one group of the cluster's nodes runs with, as its AWS object names it."""

    source: str  # "<Kind> <namespace>/<name>"
    role: str = ""  # an IAM role's name (AWSManagedMachinePool)
    # An instance profile's name or ARN (self-managed nodes), "" when the object names none.
    instance_profile: str = ""


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for key in path:
        value = _mapping(value).get(key)
    return value


def node_identities(
    objs: Iterable[Mapping[str, Any]], namespace: str, cluster_name: str
) -> tuple[NodeIdentity, ...]:
    """What the cluster's node groups run with, read from the objects a user gives.

    The AWS objects the cluster's MachineDeployments and MachinePools name as their
    infrastructure (a template is counted only so), and the machine pools CAPI marks as the
    cluster's. An AWSManagedMachinePool runs with its spec.roleName (CAPA's default role when
    unset); self-managed nodes with the instance profile their AWSMachinePool or
    AWSMachineTemplate names.
    """
    objs = [o for o in objs if _mapping(o.get("metadata")).get("namespace") == namespace]
    referenced = set()
    for obj in objs:
        if obj.get("kind") in _NODE_GROUPS and _at(obj, ("spec", "clusterName")) == cluster_name:
            ref = _at(obj, ("spec", "template", "spec", "infrastructureRef"))
            referenced.add((_mapping(ref).get("kind"), _mapping(ref).get("name")))
    found = {}
    for obj in objs:
        kind, name = obj.get("kind"), _mapping(obj.get("metadata")).get("name")
        if kind not in _NODE_IDENTITY_PATHS or not isinstance(name, str):
            continue
        marked = kind != "AWSMachineTemplate" and cluster_of(obj) == (namespace, cluster_name)
        if (kind, name) not in referenced and not marked:
            continue
        named = _at(obj, _NODE_IDENTITY_PATHS[kind])
        named = named if isinstance(named, str) else ""
        source = f"{kind} {namespace}/{name}"
        if kind == "AWSManagedMachinePool":
            found[source] = NodeIdentity(source, role=named or EKS_NODEGROUP_ROLE)
        else:
            found[source] = NodeIdentity(source, instance_profile=named)
    return tuple(found[k] for k in sorted(found))


def version_asked(obj: Mapping[str, Any], asked: Requirements) -> str | None:
    """The apiVersion the function asks for ``obj``'s kind in, when not ``obj``'s own; else None.

    An API server answers in the version asked for, converting the object; a file is
    read as it is, so an object in another version of the same group is not read at all.
    """
    api_version, kind = str(obj.get("apiVersion") or ""), obj.get("kind")
    group = api_version.split("/", maxsplit=1)[0]
    wanted = {
        sel.api_version
        for sel in (*asked.resources.values(), *asked.extra_resources.values())
        if sel.kind == kind and sel.api_version.split("/", maxsplit=1)[0] == group
    }
    if not wanted or api_version in wanted:
        return None
    return sorted(wanted)[0]
