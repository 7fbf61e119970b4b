"""Whether a ClusterPlugin and its step input are acceptable, and what follows from them.

The one path every command takes: the function's runner (``fn.py``, and so
``render`` and ``simulate``), ``issuer``, ``aws preflight`` and
``aws provider-policy``. A refusal is an ``InvalidInputError`` naming each bad
field; the function turns it into one FATAL result, the commands into one
message and a non-zero exit, all with the same words.

Two stages, as the function meets them: ``accept_xr`` judges the XR and its input
alone (validity, the owned Helm values, an External issuer, the cluster's
namespace, a bucket name override) and derives the namespace, flavour, names, the
wanted add-ons and what to look for (``cluster.Lookup``); ``refuse_for_cluster``
judges them against the cluster's facts, once read. The commands enter through
``accept_xr_object`` (the XR as a file gives it) or ``accept_step_input`` (the input
alone), and ``function_tools/resolve.py`` reads their cluster objects as Crossplane
would hand them over.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from function import cluster, compat, registry, structs
from function.addons import pod_identity
from function.addons.oidc_issuer import DistributionMode
from function.cluster import SERVED_CONTROL_PLANES, ClusterFacts, Lookup, Requirements
from function.compat import minor_of
from function.context import CallContext, issuer_url, own_struct
from function.flavour import XR_TYPES, Flavour
from function.following.target import RolloutTarget
from function.graph import Addon, PortNeed
from function.names import OIDC_PROVIDER_URL_MAX, CloudFrontIssuer, Names, partition_of
from function.observed import Observed
from function.spec import ClusterPluginSpec, parse_input, parse_spec
from function.spec_base import CROSSPLANE_SPEC_FIELDS, REGION, InvalidInputError, IRSAMode
from function.step_input import ChartSource, StepInput

CLAIM_NAMESPACE_LABEL = "crossplane.io/claim-namespace"
OIDC_ARN = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):iam::\d{12}:oidc-provider/(.+)$")
_EMPTY = struct_pb2.Struct()


@dataclass(frozen=True, eq=False)
class Accepted:
    """An acceptable XR and step input, and everything derived from them alone."""

    spec: ClusterPluginSpec
    step: StepInput
    namespace: str  # the CAPI cluster's
    namespaced: bool  # the XR is (Crossplane v2 ClusterPlugin)
    names: Names
    flavour: Flavour
    wanted: tuple[Addon, ...]  # the add-ons the spec asks for
    wants_irsa: bool  # one of them has an IRSA role
    hosts_issuer: bool  # SelfHosted IRSA: the issuer is composed
    port_needs: tuple[PortNeed, ...]
    lookup: Lookup  # what to ask Crossplane for and read: the cluster's objects, its key

    def context(
        self,
        facts: ClusterFacts,
        observed: Observed,
        now: float = 0.0,
        rollout: RolloutTarget | None = None,
        struct_for: Callable[[str], struct_pb2.Struct] = own_struct,
    ) -> CallContext:
        """What the add-ons' builders and gates read during one call (``now``: its clock).

        ``rollout``: the rollout that selects the XR (``function/following/pull.py``);
        ``struct_for``: where a Release is built (``CallContext.struct_for``).
        """
        return CallContext(
            self.spec,
            self.step,
            self.flavour,
            self.names,
            facts,
            observed,
            hosts_issuer=self.hosts_issuer,
            wants_irsa=self.wants_irsa,
            port_needs=self.port_needs,
            now=now,
            rollout=rollout,
            struct_for=struct_for,
        )


# --- the XR and its input alone ------------------------------------------------------


def _spec_key(spec: struct_pb2.Struct) -> bytes:
    """The spec without the fields Crossplane owns, serialized deterministically.

    ``parse_spec`` ignores those fields, and a Crossplane v2 XR carries every
    composed resource's reference in ``spec.crossplane.resourceRefs``: keeping
    them out of the key saves converting them on a miss (most of a miss's cost)
    and keeps the key stable while resources come and go.
    """
    fields = spec.fields
    if not any(k in CROSSPLANE_SPEC_FIELDS for k in fields):
        return spec.SerializeToString(deterministic=True)
    ours = struct_pb2.Struct()
    for k, v in fields.items():
        if k not in CROSSPLANE_SPEC_FIELDS:
            ours.fields[k].CopyFrom(v)
    return ours.SerializeToString(deterministic=True)


def _to_dict(serialized: bytes) -> dict[str, Any]:
    s = struct_pb2.Struct()
    s.ParseFromString(serialized)
    return resource.struct_to_dict(s)


# Validating is the most expensive part of a small request, and neither changes
# often: cached by serialized bytes. The step input is the Composition's, shared
# by every XR, so it is cached apart from the per-XR spec.
@functools.lru_cache(maxsize=4096)
def _parse_spec(spec_key: bytes) -> ClusterPluginSpec:
    return parse_spec(_to_dict(spec_key))


@functools.lru_cache(maxsize=64)
def _parse_input(input_bytes: bytes) -> StepInput:
    return parse_input(_to_dict(input_bytes))


@functools.lru_cache(maxsize=64)
def _shared_input(input_bytes: bytes) -> bytes:
    """The first bytes object equal to ``input_bytes``, shared.

    Every ``_accept_parts`` entry of one Composition's XRs then holds the same step input,
    not a copy of its own per XR (1.9 KB each for the shipped Composition).
    """
    return input_bytes


def _external_problems(spec: ClusterPluginSpec) -> list[tuple[str, str]]:
    irsa = spec.irsa
    if irsa.mode is not IRSAMode.EXTERNAL or not irsa.oidc_provider_arn:
        return []  # none given: read from the EKS control plane (refuse judges it)
    problems = []
    url = irsa.issuer_url.rstrip("/")
    if not re.match(r"^https://[a-z0-9.-]+(/[A-Za-z0-9._~/-]*)?$", url):
        problems.append(
            (
                "spec.irsa.issuerURL",
                f"{irsa.issuer_url!r} must be an https:// URL without port, query or fragment",
            )
        )
    m = OIDC_ARN.match(irsa.oidc_provider_arn)
    if not m:
        problems.append(
            (
                "spec.irsa.oidcProviderARN",
                (
                    f"{irsa.oidc_provider_arn!r} is not an IAM OIDC provider ARN "
                    "(arn:<partition>:iam::<account>:oidc-provider/<issuer host and path>)"
                ),
            )
        )
    # Roles trust the provider named here for tokens of the issuer named here:
    # the two must be the same issuer, or no token could ever match.
    elif not problems and m.group(2) != url.removeprefix("https://"):
        problems.append(
            (
                "spec.irsa.oidcProviderARN",
                f"names provider {m.group(2)!r}, which is not the issuer {url!r}",
            )
        )
    return problems


def _cloudfront(spec: ClusterPluginSpec) -> CloudFrontIssuer | None:
    given = spec.irsa.cloud_front
    if given is None or spec.irsa.mode is not IRSAMode.SELF_HOSTED:
        return None
    return CloudFrontIssuer(
        domain=given.domain,
        path_prefix=given.path_prefix,
        shared=given.distribution is DistributionMode.SHARED,
        bucket=given.bucket_name,
        bucket_region=given.bucket_region,
    )


def _cloudfront_problems(names: Names) -> list[tuple[str, str]]:
    problems = []
    path = names.shared_path_problem()
    if path:
        problems.append(("spec.irsa.hosting.cloudFront.pathPrefix", path))
    url = names.issuer_url("")
    if len(url) > OIDC_PROVIDER_URL_MAX:
        problems.append(
            (
                "spec.irsa.hosting.cloudFront",
                (
                    f"the issuer {url[:64]}... is {len(url)} characters; IAM takes OIDC "
                    f"provider URLs of at most {OIDC_PROVIDER_URL_MAX}: choose a shorter domain "
                    "or path"
                ),
            )
        )
    return problems


def _namespace(
    xr_namespace: str | None, claim_namespace: str | None, spec: ClusterPluginSpec
) -> tuple[str, bool]:
    """(the CAPI cluster's namespace, whether the XR is namespaced); InvalidInputError if unusable.

    The XR's own namespace, else its claim's, else ``spec.clusterNamespace``; a
    claim or a namespaced XR may not name another namespace.
    """
    if xr_namespace:
        if spec.cluster_namespace and spec.cluster_namespace != xr_namespace:
            raise InvalidInputError(
                "spec.clusterNamespace",
                f"a namespaced ClusterPlugin can only use a Cluster in its own namespace "
                f"{xr_namespace!r}",
            )
        return xr_namespace, True
    if claim_namespace:
        # A claim must not reach a cluster (and its Secrets) in another namespace.
        if spec.cluster_namespace and spec.cluster_namespace != claim_namespace:
            raise InvalidInputError(
                "spec.clusterNamespace",
                f"a claim can only use a Cluster in its own namespace {claim_namespace!r}",
            )
        return claim_namespace, False
    if spec.cluster_namespace:
        return spec.cluster_namespace, False
    raise InvalidInputError(
        "spec.clusterNamespace",
        "is required for a cluster-scoped XClusterPlugin without a claim (the Cluster's namespace)",
    )


# What a ClusterPlugin is: the apiVersion and kinds of flavour.XR_TYPES (its XRDs).
_XR_API_VERSIONS: Any = Literal[tuple(sorted({t.api_version for t in XR_TYPES}))]
_XR_KINDS: Any = Literal[tuple(t.kind for t in XR_TYPES)]
_XRType = create_model(
    "XRType",
    __config__=ConfigDict(extra="ignore"),
    apiVersion=(_XR_API_VERSIONS, ...),
    kind=(_XR_KINDS, ...),
)


def xr_type_problems(api_version: Any, kind: Any) -> list[tuple[str, str]]:
    """(field, message) for an XR whose apiVersion or kind is not a ClusterPlugin's."""
    try:
        _XRType.model_validate({"apiVersion": api_version, "kind": kind})
    except ValidationError as err:
        return [
            (
                str(e["loc"][0]),
                (
                    f"not a ClusterPlugin: {e['msg']}, got "
                    f"{'none' if e['input'] is None else repr(e['input'])}"
                ),
            )
            for e in err.errors(include_url=False)
        ]
    return []


class _KubernetesObject(BaseModel):
    model_config = ConfigDict(extra="allow")
    api_version: str = Field(alias="apiVersion", min_length=1)
    kind: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)


def kubernetes_object_problem(doc: Any) -> str | None:
    """Why ``doc`` (one document of a file) is not a Kubernetes object, or None."""
    if not isinstance(doc, Mapping):
        return f"not a Kubernetes object (got a {type(doc).__name__}, not a mapping)"
    try:
        _KubernetesObject.model_validate(doc)
    except ValidationError as err:
        found = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: "
            f"{'is required' if e['type'] == 'missing' else e['msg']}"
            for e in err.errors(include_url=False)
        )
        return f"not a Kubernetes object ({found})"
    return None


@functools.lru_cache(maxsize=4096)
def _accept_parts(
    spec_key: bytes,
    input_bytes: bytes,
    xr_namespace: str | None,
    claim_namespace: str | None,
    xr_type: tuple[str | None, str | None],  # (apiVersion, kind)
) -> Accepted:
    # Anything but a ClusterPlugin: its spec's problems would only mislead.
    problems = xr_type_problems(*xr_type)
    if problems:
        raise InvalidInputError.of(problems)
    spec = step = None
    try:
        spec = _parse_spec(spec_key)
    except InvalidInputError as err:
        problems += err.problems
    try:
        step = _parse_input(input_bytes)
    except InvalidInputError as err:
        problems += err.problems
    if spec is None or step is None:
        raise InvalidInputError.of(problems)
    problems += registry.owned_values_problems(spec)
    problems += _external_problems(spec)
    try:
        namespace, namespaced = _namespace(xr_namespace, claim_namespace, spec)
    except InvalidInputError as err:
        raise InvalidInputError.of([*problems, *err.problems]) from None
    names = Names(
        step.name_prefix,
        namespace,
        spec.cluster_name,
        spec.irsa.bucket_name,
        _cloudfront(spec),
    )
    bucket = names.bucket_override_problem()
    if bucket:
        problems.append(("spec.irsa.bucketName", bucket))
    if names.cloudfront is not None:
        problems += _cloudfront_problems(names)
    if problems:
        raise InvalidInputError.of(problems)
    wants_irsa = registry.wants_irsa(spec)
    hosts_issuer = wants_irsa and spec.irsa.mode is IRSAMode.SELF_HOSTED
    return Accepted(
        spec=spec,
        step=step,
        namespace=namespace,
        namespaced=namespaced,
        names=names,
        flavour=Flavour(
            namespaced=namespaced,
            aws_provider_config=step.aws_provider_config.name,
            aws_provider_config_kind=step.aws_provider_config.kind,
            helm_provider_config=names.helm_provider_config(namespaced=namespaced),
        ),
        wanted=registry.wanted(spec),
        wants_irsa=wants_irsa,
        hosts_issuer=hosts_issuer,
        port_needs=registry.port_needs(spec),
        lookup=Lookup(
            cluster_name=spec.cluster_name,
            namespace=namespace,
            want_sa_secret=hosts_issuer,
            versions=step.cluster_api,
        ),
    )


def accept_xr(xr: struct_pb2.Struct, step_input: struct_pb2.Struct) -> Accepted:
    """The accepted XR (observed composite) and step input; InvalidInputError otherwise."""
    return _accept_parts(
        _spec_key(structs.struct_at(xr, "spec") or _EMPTY),
        _shared_input(step_input.SerializeToString(deterministic=True)),
        structs.str_at(xr, "metadata", "namespace"),
        structs.str_at(xr, "metadata", "labels", CLAIM_NAMESPACE_LABEL),
        _xr_type(xr),
    )


def _xr_type(xr: struct_pb2.Struct) -> tuple[str | None, str | None]:
    """(apiVersion, kind): read on every call, so without structs' path walk (1 us, not 3)."""
    fields = xr.fields
    api_version = fields["apiVersion"].string_value if "apiVersion" in fields else ""
    kind = fields["kind"].string_value if "kind" in fields else ""
    return api_version or None, kind or None


def accept_xr_object(xr: Mapping[str, Any], step_input: Mapping[str, Any] | None) -> Accepted:
    """``accept_xr`` for the XR and step input as a command reads them from files."""
    return accept_xr(
        resource.dict_to_struct(dict(xr)), resource.dict_to_struct(dict(step_input or {}))
    )


def accept_step_input(step_input: Mapping[str, Any] | None) -> StepInput:
    """The step input alone, judged as the function judges it (``aws provider-policy``)."""
    return _parse_input(
        resource.dict_to_struct(dict(step_input or {})).SerializeToString(deterministic=True)
    )


def accept_step_input_struct(step_input: struct_pb2.Struct) -> StepInput:
    """The step input of a request, judged (cached as for an XR's)."""
    return _parse_input(step_input.SerializeToString(deterministic=True))


def cache_clear() -> None:
    """Forget every accepted XR and input (tests: no answer may depend on the caches)."""
    _accept_parts.cache_clear()
    _pin_problems.cache_clear()
    _parse_spec.cache_clear()
    _parse_input.cache_clear()


# --- against the cluster -----------------------------------------------------------


class RecordedIssuer(NamedTuple):
    """The issuer an XR's status records: its URL, and the OIDC provider once it exists.

    ``pod_identity``: the status records Pod Identity associations in use
    (``podIdentityCluster``).
    """

    url: str = ""
    oidc_provider_arn: str = ""
    pod_identity: bool = False


NO_RECORDED_ISSUER = RecordedIssuer()


def recorded_issuer(xr: struct_pb2.Struct) -> RecordedIssuer:
    """What the XR's status (the function's own, from earlier calls) says of its issuer."""
    # structs.str_at twice, unrolled: read on every call. ``in`` first (indexing would
    # insert); a Value of another kind reads as "".
    fields = xr.fields
    if "status" not in fields:
        return NO_RECORDED_ISSUER
    status = fields["status"].struct_value.fields
    if "oidcProviderARN" not in status:
        # No provider: nothing of IRSA in use (the only case refuse judges), maybe Pod Identity.
        in_use = "podIdentityCluster" in status
        return RecordedIssuer(pod_identity=True) if in_use else NO_RECORDED_ISSUER
    url = status["issuerURL"].string_value if "issuerURL" in status else ""
    return RecordedIssuer(url, status["oidcProviderARN"].string_value)


def refuse_for_cluster(
    accepted: Accepted,
    facts: ClusterFacts,
    recorded: RecordedIssuer = NO_RECORDED_ISSUER,
    observed: Mapping[str, fnv1.Resource] | None = None,
) -> None:
    """Raise InvalidInputError for a spec or input this cluster cannot have.

    ``observed``: the composed resources (a pinned chart version a Release already runs is
    not refused: refusing would change nothing but stop the XR).
    """
    _refuse_the_flavour(accepted, facts)
    if accepted.step.protect_cluster and not accepted.namespaced:
        raise InvalidInputError(
            "input.protectCluster",
            "is only for namespaced ClusterPlugins (Crossplane v2): a cluster-scoped Usage "
            "cannot reference the namespaced CAPI Cluster",
        )
    for addon in accepted.wanted:
        if addon.cluster_problem is not None:
            problem = addon.cluster_problem(accepted.spec, facts)
            if problem:
                raise InvalidInputError(addon.spec_path, problem)
    region = accepted.spec.region or facts.region
    found = _pin_problem(accepted, facts, observed or {}) or _credentials_problem(
        accepted, facts, recorded, region or ""
    )
    if found is None and accepted.names.cloudfront is not None:
        found = cloudfront_region_problem(accepted, region or "")
    if found:
        raise InvalidInputError(*found)
    if recorded.oidc_provider_arn and accepted.hosts_issuer:
        change = _issuer_change(accepted, recorded, region)
        if change:
            raise InvalidInputError("spec.irsa.hosting", change)


def _refuse_the_flavour(accepted: Accepted, facts: ClusterFacts) -> None:
    """A control plane the function does not serve, or an add-on EKS already manages."""
    name = f"{facts.namespace}/{accepted.spec.cluster_name}"
    kind = facts.control_plane_kind
    if kind and kind not in SERVED_CONTROL_PLANES:
        raise InvalidInputError(
            "spec.clusterName",
            f"Cluster {name}'s control plane is a {kind}; the function serves "
            f"{' and '.join(SERVED_CONTROL_PLANES)} clusters (CAPA's kubeadm and EKS flavours): "
            "nothing is composed for this one",
        )
    for addon in accepted.wanted:
        if addon.eks_addon and addon.eks_addon in facts.eks_addons:
            raise InvalidInputError(
                addon.spec_path,
                f"the AWSManagedControlPlane of {name} lists {addon.eks_addon} in spec.addons: "
                f"EKS installs and manages {addon.title}, and a Release of it would fight EKS's; "
                f"remove {addon.spec_path}, or remove {addon.eks_addon} from spec.addons",
            )


def _runs(observed: Mapping[str, fnv1.Resource], node: str, version: str) -> bool:
    """Whether the observed Release ``node`` holds chart ``version``."""
    release = observed[node].resource if node in observed else None
    held = structs.str_at(release, "spec", "forProvider", "chart", "version") if release else None
    return held == version


def _pin_problem(
    accepted: Accepted, facts: ClusterFacts, observed: Mapping[str, fnv1.Resource]
) -> tuple[str, str] | None:
    """(field, message) for a pinned chart version its add-on documents not for this cluster.

    Pinned: the XR's ``version`` of the add-on, else its chart's in the Composition's input.
    Judged against the minor the control plane runs and, during its upgrade, the one it
    moves to; a version the table does not know is not refused (nothing documented). A
    version the Release already runs is not refused (``_runs``).
    """
    for pin in _pin_problems(
        accepted,
        facts.kubernetes_version or "",
        facts.kubernetes_target_version or "",
        facts.control_plane_kind or "",
    ):
        if pin.node is None or not _runs(observed, pin.node, pin.version):
            return pin.field, pin.message
    return None


class _PinProblem(NamedTuple):
    node: str | None  # the Release, when it is not refused while it runs ``version``
    version: str
    field: str
    message: str


@functools.lru_cache(maxsize=1024)
def _pin_problems(
    accepted: Accepted, running: str, target: str, control_plane_kind: str
) -> tuple[_PinProblem, ...]:
    """Every pin ``_pin_problem`` may refuse, in order: judged once per spec and versions.

    ``accepted`` is the cached one of its spec and input (hashed by identity): a call of a
    converged XR reads the answer, not the add-ons' tables again.
    """
    minors = [m for m in dict.fromkeys((minor_of(running), minor_of(target))) if m is not None]
    found: list[_PinProblem] = []
    for addon in accepted.wanted:
        spec = addon.spec(accepted.spec)
        for decl in addon.releases:
            source = decl.chart(accepted.step.charts)
            if spec is not None and spec.version:
                version, field = spec.version, f"{addon.spec_path}.version"
            elif source.version:
                version = source.version
                field = f"input.charts.{_chart_field(accepted, source)}.version"
            else:
                continue
            unusable = addon.version_problem(version) if addon.version_problem else None
            if unusable and decl is addon.release:
                found.append(_PinProblem(None, version, field, unusable))
                return tuple(found)  # refused whatever runs: nothing after it is read
            supported = compat.supported(source.name, version) if minors else None
            if supported is None or all(m in supported for m in minors):
                continue
            moving = f", moving to {compat.minor_text(minors[-1])}" if len(minors) > 1 else ""
            message = (
                f"{source.name} {version} supports Kubernetes {supported.describe()}, and the "
                f"cluster runs {compat.minor_text(minors[0])}{moving} (its "
                f"{control_plane_kind or 'control plane'}): pin a version for it, or "
                "leave the version out to follow the cluster's minor"
            )
            found.append(_PinProblem(decl.node, version, field, message))
    return tuple(found)


def _chart_field(accepted: Accepted, source: ChartSource) -> str:
    """The step input's name for a chart source (charts.vpcCni)."""
    charts = accepted.step.charts
    fields = type(charts).model_fields.items()
    return next((f.alias or name for name, f in fields if getattr(charts, name) is source), "?")


def _external_cluster_problem(
    spec: ClusterPluginSpec, facts: ClusterFacts
) -> tuple[str, str] | None:
    """(field, message) when an External issuer cannot be the cluster's, or None.

    Left out, it is read from the EKS control plane, which must associate an OIDC
    provider; given, it must be the one CAPA reports there.
    """
    irsa = spec.irsa
    if irsa.mode is not IRSAMode.EXTERNAL:
        return None
    where = cluster.control_plane_name(facts)
    if not irsa.oidc_provider_arn:
        if facts.control_plane_kind and not facts.eks:
            return (
                "spec.irsa",
                (
                    "mode External without issuerURL and oidcProviderARN reads them from an EKS "
                    "control plane (AWSManagedControlPlane), but the control plane is a "
                    f"{facts.control_plane_kind}: give both, or use mode SelfHosted"
                ),
            )
        if facts.eks and facts.control_plane_found and not facts.associates_oidc_provider:
            return (
                "spec.irsa",
                (
                    "mode External without issuerURL and oidcProviderARN reads them from the "
                    f"EKS control plane, but AWSManagedControlPlane {where} does not associate "
                    "an OIDC provider: set its spec.associateOIDCProvider: true, or give "
                    "issuerURL and oidcProviderARN"
                ),
            )
        return None
    observed = facts.oidc_provider_arn if facts.eks else None
    if observed and observed != irsa.oidc_provider_arn:
        return (
            "spec.irsa.oidcProviderARN",
            (
                f"{irsa.oidc_provider_arn} is not the cluster's OIDC provider: "
                f"AWSManagedControlPlane {where} reports {observed} (status.oidcProvider.arn); "
                "give that one, or leave issuerURL and oidcProviderARN out to use it"
            ),
        )
    return None


def _credentials_problem(
    accepted: Accepted, facts: ClusterFacts, recorded: RecordedIssuer, region: str
) -> tuple[str, str] | None:
    """(field, message) when the add-ons' credentials (spec.irsa) do not fit the cluster."""
    mode = accepted.spec.irsa.mode
    change = _credentials_change(mode, recorded)
    if change:
        return "spec.irsa.mode", change
    external = _external_cluster_problem(accepted.spec, facts)
    if external:
        return external
    if accepted.wants_irsa:
        problem = pod_identity.cluster_problem(mode, facts, region, accepted.step.charts)
        if problem:
            return "spec.irsa.mode", problem
        if mode is IRSAMode.POD_IDENTITY:
            problem = pod_identity.registry_problem(accepted.step, facts, region)
            if problem:
                return pod_identity.REGISTRY_FIELD, problem
    return None


def _credentials_change(mode: IRSAMode, recorded: RecordedIssuer) -> str | None:
    """Why the spec may not move add-on roles in use between IRSA and Pod Identity, or None.

    As with the issuer's hosting: the running pods hold credentials of the one, every
    role trusts it, and a move (both trusts per role, every add-on restarted after its
    association) is not supported on a cluster in use.
    """
    irsa_modes = (IRSAMode.SELF_HOSTED, IRSAMode.EXTERNAL)
    if mode is IRSAMode.POD_IDENTITY and recorded.oidc_provider_arn:
        return (
            f"would move the add-on roles from IRSA to EKS Pod Identity, but IRSA is in use "
            f"(status.oidcProviderARN {recorded.oidc_provider_arn}): every add-on role trusts "
            "that provider and the running add-ons hold its credentials. Moving a running "
            "cluster's add-ons is not supported: put spec.irsa back as it was, or give a new "
            "cluster mode PodIdentity"
        )
    if mode in irsa_modes and recorded.pod_identity:
        return (
            f"would move the add-on roles from EKS Pod Identity to IRSA ({mode.value}), but "
            "Pod Identity is in use (status.podIdentityCluster): every add-on "
            "role trusts pods.eks.amazonaws.com and the running add-ons hold its credentials. "
            "Moving a running cluster's add-ons is not supported: put spec.irsa.mode back to "
            "PodIdentity, or give a new cluster IRSA"
        )
    return None


# Why CloudFront cannot serve an issuer in these partitions, and what to do instead.
_NO_CLOUDFRONT = {
    "aws-us-gov": (
        "CloudFront is not in the aws-us-gov partition (it runs from commercial accounts, "
        "outside GovCloud, and its origin access control cannot read a GovCloud bucket)"
    ),
    "aws-cn": (
        "CloudFront in aws-cn serves only ICP-recorded domains with certificates uploaded to "
        "IAM (ACM is not supported there), which this function does not compose"
    ),
}
_NO_CLOUDFRONT_INSTEAD = (
    "keep hosting type S3Public in an account (or bucket) whose Block Public Access allows "
    "public bucket policies, or use spec.irsa.mode: External with an issuer hosted elsewhere"
)


def cloudfront_region_problem(accepted: Accepted, region: str) -> tuple[str, str] | None:
    """(field, message) when CloudFront hosting is impossible in a partition, or None.

    Judged: ``region`` (the cluster's, "" when unknown) and the Shared bucket's region.
    """
    cloudfront = accepted.names.cloudfront
    if cloudfront is None:
        return None
    for field, where in (
        ("spec.irsa.hosting", region),
        ("spec.irsa.hosting.cloudFront.bucketRegion", cloudfront.bucket_region),
    ):
        partition = partition_of(where).name if where else "aws"
        if partition in _NO_CLOUDFRONT:
            reason = _NO_CLOUDFRONT[partition]
            return field, f"{where} is in {partition}: {reason}; {_NO_CLOUDFRONT_INSTEAD}"
    return None


# The issuer of an S3Public XR: its bucket's regional virtual-hosted endpoint.
_S3_ISSUER = re.compile(r"^https://[a-z0-9-]+\.s3\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$")


def _issuer_change(accepted: Accepted, recorded: RecordedIssuer, region: str | None) -> str | None:
    """Why the spec may not move the issuer the XR's status records as in use, or None.

    The cluster's service-account tokens carry the recorded issuer and every role
    trusts its OIDC provider: moving to another one takes both issuers on the API
    server for a day, two providers and two trust statements per role. Only moves
    that involve CloudFront hosting are judged here (a renamed S3Public bucket is not).
    """
    if accepted.names.cloudfront is None and _S3_ISSUER.match(recorded.url):
        return None
    if accepted.names.cloudfront is None and not region:
        return None  # the S3Public issuer needs the region: judged once it is known
    would_be = issuer_url(accepted.spec, accepted.names, region or "")
    if not recorded.url or recorded.url == would_be:
        return None
    return (
        f"would move the issuer from {recorded.url} to {would_be}, but {recorded.url} is in "
        f"use (status.oidcProviderARN {recorded.oidc_provider_arn}): the cluster's "
        "service-account tokens carry it and every add-on role trusts it. Moving a running "
        "cluster to another issuer (both issuers on the API server for a day, two OIDC "
        "providers, two trust statements per role) is not supported: put spec.irsa back as it "
        "was, or give a new cluster the new hosting"
    )


class RegionError(ValueError):
    """The commands cannot tell the region the function would use."""


def region(accepted: Accepted, facts: ClusterFacts, flag: str | None = None) -> tuple[str, str]:
    """(region, where it came from): the function's (spec.region, else the AWSCluster's).

    ``flag`` (``--region``) only stands in when neither says it, and may not disagree:
    the issuer URL is fixed at the cluster's first boot.
    """
    if flag and not REGION.match(flag):
        msg = (
            f"--region {flag!r} is not an AWS region such as us-east-1, cn-north-1 or us-gov-west-1"
        )
        raise RegionError(msg)
    for value, source in (
        (accepted.spec.region, "spec.region"),
        (facts.region, "AWSCluster spec.region"),
    ):
        if value:
            if flag and flag != value:
                msg = f"--region {flag} disagrees with {source} {value}, which the function uses"
                raise RegionError(msg)
            return value, source
    if flag:
        return flag, "--region"
    msg = (
        "the region is unknown: set spec.region, pass --region, "
        "or pass the AWSCluster with --required"
    )
    raise RegionError(msg)


# --- the cluster objects a command is given ----------------------------------------


def _object_name(obj: Mapping[str, Any]) -> str:
    found = obj.get("metadata")
    meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    where = f"{meta['namespace']}/" if isinstance(meta.get("namespace"), str) else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def given_object_problem(
    accepted: Accepted, objs: Sequence[Mapping[str, Any]], asked: Requirements
) -> tuple[int, str] | None:
    """(index, why) of the first object the function would not read as the XR's cluster's.

    Crossplane hands the function only what it asks for; a command is handed files.
    Refused: an object of another cluster (the XR's would not be found, and the
    function would compose for a cluster that does not exist), and an object of this
    cluster in an apiVersion other than the one the function asks for (an API server
    would convert it; a file is read as it is, so it would be missing).
    """
    ours = (accepted.namespace, accepted.spec.cluster_name)
    for i, obj in enumerate(objs):
        found = cluster.cluster_of(obj)
        if found is None:
            continue
        namespace, name = found
        if (namespace or accepted.namespace, name) != ours:
            return i, (
                f"{_object_name(obj)} belongs to cluster {namespace or accepted.namespace}/"
                f"{name}, not to the XR's {ours[0]}/{ours[1]} (spec.clusterName): give only the "
                f"objects of {ours[0]}/{ours[1]}, or correct spec.clusterName"
            )
    for i, obj in enumerate(objs):
        if cluster.cluster_of(obj) is None:
            continue
        wanted = cluster.version_asked(obj, asked)
        if wanted is not None:
            kind = str(obj.get("kind"))
            field = cluster.VERSION_FIELDS.get(kind)
            instead = f", or set input.clusterAPI.{field}: {obj.get('apiVersion')}" if field else ""
            return i, (
                f"{_object_name(obj)} is {obj.get('apiVersion')}, but the function asks for "
                f"{wanted}, which an API server would convert it to and a file cannot be: "
                f"give it as {wanted} (kubectl get -o yaml from a cluster that serves it)"
                f"{instead}"
            )
    return None
