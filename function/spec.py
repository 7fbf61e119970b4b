"""The ClusterPlugin XR spec and the step Input, as Pydantic models.

These models are the single source of the error messages a user sees for bad
input: every validation error becomes one FATAL result naming the field
(``spec.storage.ebs.values``) and what is allowed. The XRDs in ``apis/`` and the
Input CRD in ``package/input/`` describe the same shapes for the API server.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

# Fields Crossplane itself writes into an XR's spec (v1 legacy XRs keep them at
# the top of spec, v2 XRs under spec.crossplane). They are not ours to judge.
CROSSPLANE_SPEC_FIELDS = frozenset(
    {
        "crossplane",
        "compositionRef",
        "compositionRevisionRef",
        "compositionRevisionSelector",
        "compositionSelector",
        "compositionUpdatePolicy",
        "compositeDeletePolicy",
        "claimRef",
        "environmentConfigRefs",
        "publishConnectionDetailsTo",
        "resourceRefs",
        "writeConnectionSecretToRef",
    }
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CHART_VERSION = re.compile(r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d+$")
FILE_SYSTEM_ID = re.compile(r"^fs-[0-9a-f]{8,40}$")
CIDR_V4 = re.compile(r"^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$")
DURATION = re.compile(r"^(\d+h)?(\d+m)?(\d+s)?$")
# Route 53 hosted zone ids: "Z" and upper-case letters and digits, at most 32 characters
# (the API's HostedZone.Id length limit), e.g. Z0123456789ABC; without "/hostedzone/".
HOSTED_ZONE_ID = re.compile(r"^Z[A-Z0-9]{1,31}$")
# A domain external-dns may manage: lower-case DNS labels of at most 63 characters, no
# trailing dot; a leading dot limits it to subdomains (external-dns --domain-filter).
DNS_NAME_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DOMAIN_FILTER = re.compile(rf"^\.?({DNS_NAME_LABEL}\.)*{DNS_NAME_LABEL}$")
DOMAIN_FILTER_MAX = 253
# Zones one role may change: the policy lists each ARN and must fit a managed policy's
# 6,144 characters even for 32-character ids in aws-us-gov (about 70 characters each).
HOSTED_ZONES_MAX = 50


S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")


def s3_bucket_name_problem(name: str) -> str | None:
    """Why S3 (or the issuer's HTTPS endpoint) would reject ``name``, or None."""
    if not 3 <= len(name) <= 63:
        return f"{name!r} must be 3 to 63 characters long"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*[a-z0-9]", name):
        # S3 also allows dots, but a dotted bucket breaks the TLS certificate of
        # the virtual-hosted issuer URL, so STS could not fetch the documents.
        return (
            f"{name!r} may hold only lower-case letters, digits and '-' (no dots), "
            "starting and ending with a letter or digit"
        )
    if name.startswith(S3_RESERVED_PREFIXES) or name.endswith(
        ("-s3alias", "--ol-s3", "--x-s3", "--table-s3")
    ):
        return f"{name!r} uses a prefix or suffix S3 reserves"
    return None


class InvalidInputError(ValueError):
    """Bad XR spec or step input: one FATAL result naming each bad field.

    ``field`` and ``message`` are the first problem (the metrics label the field);
    ``problems`` holds every one, and ``str()`` says them all: "<field>: <message>; ...".
    """

    def __init__(self, field: str, message: str, *more: tuple[str, str]) -> None:
        self.problems: tuple[tuple[str, str], ...] = ((field, message), *more)
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.problems))
        self.field = field
        self.message = message

    @classmethod
    def of(cls, problems: Sequence[tuple[str, str]]) -> InvalidInputError:
        """One error for several (field, message) problems, in order; at least one."""
        (field, message), *more = problems
        return cls(field, message, *more)


def _values_object(v: Any) -> Any:
    # Helm values must be a map; a list or a string here is a user mistake
    # Helm would only report at install time, on the workload cluster.
    if v is None:
        return {}
    if not isinstance(v, dict):
        msg = f"must be an object of Helm values (got {type(v).__name__})"
        raise ValueError(msg)  # Pydantic wants ValueError here.
    return v


HelmValues = Annotated[dict[str, Any], BeforeValidator(_values_object)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _check_version(v: str | None) -> str | None:
    if v is not None and not CHART_VERSION.match(v):
        msg = f"{v!r} is not a chart version (e.g. 1.22.4 or v3.32.1)"
        raise ValueError(msg)
    return v


class AddonSpec(_Strict):
    """Fields every add-on shares: a chart version override and extra values."""

    version: str | None = None
    values: HelmValues = Field(default_factory=dict)

    _version = field_validator("version")(_check_version)


class AmazonVPCSpec(AddonSpec):
    """Amazon VPC CNI (aws-vpc-cni chart, IRSA role with AmazonEKS_CNI_Policy)."""


class CalicoEncapsulation(StrEnum):
    """Calico IP pool encapsulation."""

    IPIP = "IPIP"
    VXLAN = "VXLAN"
    NONE = "None"


class CalicoSpec(AddonSpec):
    """Calico through the tigera-operator chart (no IAM role)."""

    encapsulation: CalicoEncapsulation = CalicoEncapsulation.IPIP
    cidr: str | None = None

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is not None and not CIDR_V4.match(v):
            msg = f"{v!r} is not an IPv4 CIDR such as 192.168.0.0/16"
            raise ValueError(msg)
        return v


class NetworkingSpec(_Strict):
    """At most one CNI."""

    amazon_vpc: AmazonVPCSpec | None = Field(default=None, alias="amazonVPC")
    calico: CalicoSpec | None = None

    @model_validator(mode="after")
    def _one_cni(self) -> NetworkingSpec:
        if self.amazon_vpc is not None and self.calico is not None:
            msg = "set at most one of amazonVPC and calico: a cluster runs one CNI"
            raise ValueError(msg)
        return self


class EBSSpec(AddonSpec):
    """AWS EBS CSI driver."""

    default_storage_class: bool = Field(default=False, alias="defaultStorageClass")


class EFSSpec(AddonSpec):
    """AWS EFS CSI driver; a StorageClass is created when fileSystemId is given."""

    file_system_id: str | None = Field(default=None, alias="fileSystemId")

    @field_validator("file_system_id")
    @classmethod
    def _fs(cls, v: str | None) -> str | None:
        if v is not None and not FILE_SYSTEM_ID.match(v):
            msg = f"{v!r} is not an EFS file system id (fs- followed by hex digits)"
            raise ValueError(msg)
        return v


class StorageSpec(_Strict):
    """CSI drivers."""

    ebs: EBSSpec | None = None
    efs: EFSSpec | None = None


class LBCSpec(AddonSpec):
    """AWS Load Balancer Controller."""


class IngressSpec(_Strict):
    """Ingress controllers."""

    aws_load_balancer_controller: LBCSpec | None = Field(
        default=None, alias="awsLoadBalancerController"
    )


class AWSCloudProviderSpec(AddonSpec):
    """The AWS cloud-controller-manager (kubernetes/cloud-provider-aws chart). No IAM role."""


class CloudProviderSpec(_Strict):
    """The cloud controller manager a kubelet with ``cloud-provider: external`` waits for."""

    aws: AWSCloudProviderSpec | None = None


class ExternalDNSPolicy(StrEnum):
    """How external-dns synchronizes records (its --policy)."""

    CREATE_ONLY = "create-only"
    SYNC = "sync"
    UPSERT_ONLY = "upsert-only"


class HostedZoneType(StrEnum):
    """Whether the listed hosted zones are public or private (external-dns --aws-zone-type)."""

    PUBLIC = "public"
    PRIVATE = "private"


# Environment variables the function sets on external-dns: the AWS SDK reads the region
# from them (AWS_REGION first), and a user's value would silently win over the function's.
EXTERNAL_DNS_OWNED_ENV = ("AWS_DEFAULT_REGION", "AWS_REGION")


def _hosted_zone_id(v: str) -> str:
    if not HOSTED_ZONE_ID.match(v):
        hint = " (give the id alone, without /hostedzone/)" if "hostedzone" in v else ""
        msg = (
            f"{v[:64]!r} is not a Route 53 hosted zone id: Z followed by upper-case letters "
            f"and digits, at most 32 characters, e.g. Z0123456789ABC{hint}"
        )
        raise ValueError(msg)
    return v


def _domain_filter(v: str) -> str:
    if len(v) > DOMAIN_FILTER_MAX or not DOMAIN_FILTER.match(v):
        msg = (
            f"{v[:64]!r} is not a DNS name such as example.com or .example.com (lower-case "
            "letters, digits and '-' in labels of at most 63 characters, no trailing dot, at "
            f"most {DOMAIN_FILTER_MAX} characters)"
        )
        raise ValueError(msg)
    return v


HostedZoneID = Annotated[str, AfterValidator(_hosted_zone_id)]
DomainFilter = Annotated[str, AfterValidator(_domain_filter)]


def _first_duplicate(items: list[str]) -> int | None:
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item in seen:
            return i
        seen.add(item)
    return None


class ExternalDNSSpec(AddonSpec):
    """external-dns (kubernetes-sigs chart), with an IRSA role for the listed hosted zones only."""

    hosted_zone_ids: list[HostedZoneID] = Field(alias="hostedZoneIDs", max_length=HOSTED_ZONES_MAX)
    domain_filters: list[DomainFilter] = Field(default_factory=list, alias="domainFilters")
    policy: ExternalDNSPolicy = ExternalDNSPolicy.UPSERT_ONLY
    zone_type: HostedZoneType | None = Field(default=None, alias="zoneType")

    @model_validator(mode="after")
    def _lists_and_env(self) -> ExternalDNSSpec:
        # "<field>: <message>" names the exact field (see _first_error).
        if not self.hosted_zone_ids:
            msg = (
                "hostedZoneIDs: must list at least one hosted zone: the role may change records "
                "in the listed zones only (there is no grant on every zone)"
            )
            raise ValueError(msg)
        for name, items in (
            ("hostedZoneIDs", self.hosted_zone_ids),
            ("domainFilters", self.domain_filters),
        ):
            dup = _first_duplicate(items)
            if dup is not None:
                msg = f"{name}[{dup}]: {items[dup]!r} is listed twice"
                raise ValueError(msg)
        env = self.values.get("env")
        if env is None:
            return self
        if not isinstance(env, list):
            msg = "values.env: must be a list of environment variables ({name, value})"
            raise ValueError(msg)
        for i, var in enumerate(env):
            var_name = var.get("name") if isinstance(var, dict) else None
            if var_name in EXTERNAL_DNS_OWNED_ENV:
                msg = (
                    f"values.env[{i}].name: {var_name} is set by the function (the cluster's "
                    "region) and cannot be overridden in values; remove it"
                )
                raise ValueError(msg)
        return self


class DNSSpec(_Strict):
    """DNS records for what the cluster exposes."""

    external_dns: ExternalDNSSpec | None = Field(default=None, alias="externalDNS")


class IRSAMode(StrEnum):
    """Where the OIDC issuer for IAM Roles for Service Accounts comes from."""

    SELF_HOSTED = "SelfHosted"
    EXTERNAL = "External"
    DISABLED = "Disabled"


class CertManagerMode(StrEnum):
    """Whether the function installs cert-manager for the pod identity webhook."""

    INSTALL = "Install"
    EXISTING = "Existing"


class PodIdentityWebhookSpec(_Strict):
    """The amazon-eks-pod-identity-webhook (needed on non-EKS clusters)."""

    install: bool = True
    cert_manager: CertManagerMode = Field(default=CertManagerMode.INSTALL, alias="certManager")


class IRSASpec(_Strict):
    """IAM Roles for Service Accounts."""

    mode: IRSAMode = IRSAMode.SELF_HOSTED
    bucket_name: str = Field(default="", alias="bucketName")
    issuer_url: str = Field(default="", alias="issuerURL")
    oidc_provider_arn: str = Field(default="", alias="oidcProviderARN")
    pod_identity_webhook: PodIdentityWebhookSpec = Field(
        default_factory=PodIdentityWebhookSpec, alias="podIdentityWebhook"
    )

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if v:
            problem = s3_bucket_name_problem(v)
            if problem:
                raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _mode_fields(self) -> IRSASpec:
        # "<field>: <message>" names the exact field (see _first_error).
        external = self.mode is IRSAMode.EXTERNAL
        for name, value in (
            ("issuerURL", self.issuer_url),
            ("oidcProviderARN", self.oidc_provider_arn),
        ):
            if external and not value:
                msg = f"{name}: is required when mode is External"
                raise ValueError(msg)
            if not external and value:
                msg = f"{name}: is only allowed when mode is External (mode is {self.mode.value})"
                raise ValueError(msg)
        if self.bucket_name and self.mode is not IRSAMode.SELF_HOSTED:
            msg = f"bucketName: is only allowed when mode is SelfHosted (mode is {self.mode.value})"
            raise ValueError(msg)
        return self


class SecurityGroupMode(StrEnum):
    """How the function handles the ports add-ons need."""

    AUTO = "Auto"
    ALWAYS = "Always"
    NEVER = "Never"


class SecurityGroupsSpec(_Strict):
    """Security-group handling."""

    manage: SecurityGroupMode = SecurityGroupMode.AUTO


class ClusterPluginSpec(_Strict):
    """The spec shared by ClusterPlugin (v2, namespaced) and XClusterPlugin (legacy)."""

    # Crossplane's own machinery fields (compositionRef, resourceRefs...) are
    # dropped before validation, see parse_spec.
    cluster_name: str = Field(alias="clusterName", min_length=1, max_length=63)
    cluster_namespace: str | None = Field(default=None, alias="clusterNamespace")
    region: str | None = None
    networking: NetworkingSpec = Field(default_factory=NetworkingSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    ingress: IngressSpec = Field(default_factory=IngressSpec)
    irsa: IRSASpec = Field(default_factory=IRSASpec)
    security_groups: SecurityGroupsSpec = Field(
        default_factory=SecurityGroupsSpec, alias="securityGroups"
    )
    cloud_provider: CloudProviderSpec = Field(
        default_factory=CloudProviderSpec, alias="cloudProvider"
    )
    dns: DNSSpec = Field(default_factory=DNSSpec)

    @field_validator("cluster_name", "cluster_namespace")
    @classmethod
    def _dns(cls, v: str | None) -> str | None:
        if v is not None and not DNS_LABEL.match(v):
            msg = f"{v!r} is not a Kubernetes name (lower-case letters, digits and '-')"
            raise ValueError(msg)
        return v

    @field_validator("region")
    @classmethod
    def _region(cls, v: str | None) -> str | None:
        if v is not None and not REGION.match(v):
            msg = f"{v!r} is not an AWS region such as us-east-1, cn-north-1 or us-gov-west-1"
            raise ValueError(msg)
        return v


# --- step input ------------------------------------------------------------


class SecretRef(_Strict):
    """A reference to a Secret (registry credentials for a chart)."""

    name: str = Field(min_length=1)
    namespace: str | None = None


class ChartSource(_Strict):
    """Where a chart comes from. ``repository`` may be an https or oci:// URL."""

    repository: str = Field(min_length=1)
    name: str = Field(min_length=1)
    version: str
    pull_secret_ref: SecretRef | None = Field(default=None, alias="pullSecretRef")

    _version = field_validator("version")(_check_version)

    @field_validator("repository")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not v.startswith(("https://", "http://", "oci://")):
            msg = f"{v!r} must be an https://, http:// or oci:// chart repository URL"
            raise ValueError(msg)
        return v.rstrip("/")


EKS_CHARTS = "https://aws.github.io/eks-charts"
CALICO_CHARTS = "https://docs.tigera.io/calico/charts"


class Charts(_Strict):
    """Chart source per add-on; defaults are the versions this release was tested with."""

    vpc_cni: ChartSource = Field(
        default=ChartSource(repository=EKS_CHARTS, name="aws-vpc-cni", version="1.22.4"),
        alias="vpcCni",
    )
    calico_crds: ChartSource = Field(
        default=ChartSource(
            repository=CALICO_CHARTS, name="crd.projectcalico.org.v1", version="v3.32.1"
        ),
        alias="calicoCrds",
    )
    calico: ChartSource = Field(
        default=ChartSource(repository=CALICO_CHARTS, name="tigera-operator", version="v3.32.1")
    )
    ebs: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/aws-ebs-csi-driver",
            name="aws-ebs-csi-driver",
            version="2.64.0",
        )
    )
    efs: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/aws-efs-csi-driver",
            name="aws-efs-csi-driver",
            version="4.4.1",
        )
    )
    load_balancer_controller: ChartSource = Field(
        default=ChartSource(
            repository=EKS_CHARTS, name="aws-load-balancer-controller", version="3.5.0"
        ),
        alias="loadBalancerController",
    )
    cert_manager: ChartSource = Field(
        default=ChartSource(
            repository="https://charts.jetstack.io", name="cert-manager", version="v1.21.1"
        ),
        alias="certManager",
    )
    pod_identity_webhook: ChartSource = Field(
        default=ChartSource(
            repository="https://jkroepke.github.io/helm-charts",
            name="amazon-eks-pod-identity-webhook",
            version="2.6.5",
        ),
        alias="podIdentityWebhook",
    )
    cloud_controller_manager: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes.github.io/cloud-provider-aws",
            name="aws-cloud-controller-manager",
            version="0.0.11",
        ),
        alias="cloudControllerManager",
    )
    external_dns: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/external-dns",
            name="external-dns",
            version="1.21.1",
        ),
        alias="externalDNS",
    )


def _seconds(v: Any) -> Any:
    # Accept Go-style durations ("30s", "10m", "1h30m") as well as plain seconds.
    if isinstance(v, str):
        m = DURATION.match(v)
        if not v or not m:
            msg = f"{v!r} is not a duration such as 30s, 10m or 1h"
            raise ValueError(msg)
        h, mi, s = (int(g[:-1]) if g else 0 for g in m.groups())
        return h * 3600 + mi * 60 + s
    return v


Seconds = Annotated[int, BeforeValidator(_seconds), Field(ge=1, le=86400)]


class TTL(_Strict):
    """How soon Crossplane calls the function again."""

    waiting: Seconds = 30
    ready: Seconds = 600

    @model_validator(mode="after")
    def _order(self) -> TTL:
        if self.waiting > self.ready:
            msg = f"waiting: must not be longer than ready ({self.waiting}s > {self.ready}s)"
            raise ValueError(msg)
        return self


class ProviderConfigRef(_Strict):
    """A provider config reference for composed AWS resources."""

    name: str = "default"
    # Namespaced managed resources name the kind; legacy ones ignore it.
    kind: Literal["ProviderConfig", "ClusterProviderConfig"] = "ClusterProviderConfig"


class ClusterAPIVersions(_Strict):
    """API versions used to ask Crossplane for the Cluster API objects."""

    cluster: str = "cluster.x-k8s.io/v1beta2"
    kubeadm_control_plane: str = Field(
        default="controlplane.cluster.x-k8s.io/v1beta2", alias="kubeadmControlPlane"
    )
    aws_managed_control_plane: str = Field(
        default="controlplane.cluster.x-k8s.io/v1beta2", alias="awsManagedControlPlane"
    )
    aws_cluster: str = Field(default="infrastructure.cluster.x-k8s.io/v1beta2", alias="awsCluster")
    aws_managed_cluster: str = Field(
        default="infrastructure.cluster.x-k8s.io/v1beta2", alias="awsManagedCluster"
    )
    # Crossplane 1.x selects by label only and does not know the Cluster's refs,
    # so it needs to be told which control-plane kind to list.
    legacy_control_plane_kind: Literal["KubeadmControlPlane", "AWSManagedControlPlane"] = Field(
        default="KubeadmControlPlane", alias="legacyControlPlaneKind"
    )


class StepInput(_Strict):
    """The function's step input (``fn.clusterplugin.dev/v1alpha1``, kind ``Input``)."""

    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    metadata: dict[str, Any] | None = None
    name_prefix: str = Field(default="", alias="namePrefix", max_length=20)
    charts: Charts = Field(default_factory=Charts)
    ttl: TTL = Field(default_factory=TTL)
    aws_provider_config: ProviderConfigRef = Field(
        default_factory=ProviderConfigRef, alias="awsProviderConfig"
    )
    cluster_api: ClusterAPIVersions = Field(default_factory=ClusterAPIVersions, alias="clusterAPI")
    # Namespaced XRs: a Usage of the CAPI Cluster by the helm ProviderConfig, so that
    # deleting the Cluster first waits until the add-ons are uninstalled (docs/architecture.md,
    # "The cluster's own deletion").
    protect_cluster: bool = Field(default=False, alias="protectCluster")

    @field_validator("name_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v and not re.match(r"^[a-z0-9][a-z0-9-]*$", v):
            msg = (
                f"{v!r} may hold only lower-case letters, digits and '-' "
                "(it starts bucket and role names)"
            )
            raise ValueError(msg)
        # Derived bucket names start with the prefix, so S3's reserved prefixes
        # would make every bucket this Composition derives unusable.
        if v.startswith(S3_RESERVED_PREFIXES):
            msg = f"{v!r} starts with a prefix S3 reserves ({', '.join(S3_RESERVED_PREFIXES)})"
            raise ValueError(msg)
        return v


# --- parsing ---------------------------------------------------------------


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or inside ``X | None``, ``list[X]``, ``Annotated``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _field_named(model: type[BaseModel], key: str) -> tuple[str, type[BaseModel] | None] | None:
    """(attribute name, the model it holds) of ``model``'s field spelled ``key`` in the API."""
    for name, info in model.model_fields.items():
        if key in (info.alias, name):
            return name, _model_in(info.annotation)
    return None


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model whose field is at ``loc`` (an error's location, API spelling)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int) or part in {"function-after", "function-before"}:
            continue
        if model is None:
            return None
        found = _field_named(model, str(part))
        if found is None:
            return None
        model = found[1]
    return model


def spec_getter(path: str) -> Callable[[ClusterPluginSpec], Any]:
    """A reader of the spec at ``path`` (API spelling, e.g. ``spec.storage.ebs``).

    An add-on names its place in the spec once, as the user spells it: the reader
    follows the model's aliases, and a path the model does not have fails at import.
    """
    model: type[BaseModel] | None = ClusterPluginSpec
    head, *keys = path.split(".")
    attrs = []
    for key in keys:
        found = None if model is None else _field_named(model, key)
        if head != "spec" or found is None:
            msg = f"{path!r} is not a field of the ClusterPlugin spec"
            raise ValueError(msg)
        attrs.append(found[0])
        model = found[1]
    return operator.attrgetter(".".join(attrs))


def _field_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in {"function-after", "function-before"} or "[" in str(part):
            continue
        else:
            path += f".{part}"
    return path


_SCHEMAS = {"spec": "the ClusterPlugin schema", "input": "the Input schema"}


def _unknown_field(prefix: str, root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    model = _model_at(root, loc[:-1])
    known = (
        [info.alias or name for name, info in model.model_fields.items()]
        if model is not None
        else []
    )
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"unknown field (did you mean {close[0]}?)"
    return f"unknown field (check the spelling against {_SCHEMAS[prefix]})"


def _problem(prefix: str, root: type[BaseModel], e: ErrorDetails) -> tuple[str, str]:
    field = _field_path(prefix, e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    # Model-level checks name their sub-field as "<field>: <message>".
    sub = re.match(r"^([A-Za-z][A-Za-z0-9]*(?:\[\d+\]|\.[A-Za-z][A-Za-z0-9]*)*): (.*)$", msg)
    if e["type"] == "value_error" and sub:
        field, msg = f"{field}.{sub.group(1)}", sub.group(2)
    if e["type"] == "extra_forbidden":
        msg = _unknown_field(prefix, root, e["loc"])
    elif e["type"] == "missing":
        msg = "is required"
    elif e["type"] == "enum":
        msg = f"must be one of {e.get('ctx', {}).get('expected', '')}; got {e.get('input')!r}"
    return field, msg


def _invalid(prefix: str, root: type[BaseModel], err: ValidationError) -> InvalidInputError:
    """Every problem pydantic found, in its order, each naming its field."""
    problems: list[tuple[str, str]] = []
    for e in err.errors(include_url=False):
        problem = _problem(prefix, root, e)
        if problem not in problems:
            problems.append(problem)
    return InvalidInputError.of(problems)


def parse_spec(spec: dict[str, Any]) -> ClusterPluginSpec:
    """Validate an XR spec; raise InvalidInputError naming every bad field."""
    ours = {k: v for k, v in spec.items() if k not in CROSSPLANE_SPEC_FIELDS}
    try:
        return ClusterPluginSpec.model_validate(ours)
    except ValidationError as err:
        raise _invalid("spec", ClusterPluginSpec, err) from None


def parse_input(raw: dict[str, Any] | None) -> StepInput:
    """Validate the step input; raise InvalidInputError naming every bad field."""
    try:
        return StepInput.model_validate(raw or {})
    except ValidationError as err:
        raise _invalid("input", StepInput, err) from None
