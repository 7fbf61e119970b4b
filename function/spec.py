"""The ClusterPlugin XR spec and the step Input, as Pydantic models.

These models are the single source of the error messages a user sees for bad
input: every validation error becomes one FATAL result naming the field
(``spec.storage.ebs.values``) and what is allowed. They are also the source of the
XRDs in ``apis/`` and the Input CRD in ``package/input/`` (``make generate``,
function_tools/apigen.py): each field's description is what ``kubectl explain`` shows, and
``json_schema_extra`` carries what only the API server needs (patterns of checks done
here in validators, CEL rules).
"""

from __future__ import annotations

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
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3", "--table-s3")


def _cel_refuse_affixes(prefixes: tuple[str, ...], suffixes: tuple[str, ...] = ()) -> str:
    """A CEL rule (for the generated schemas) refusing a string with one of these affixes."""
    tests = [f"self.startsWith('{p}')" for p in prefixes]
    tests += [f"self.endsWith('{s}')" for s in suffixes]
    return f"!({' || '.join(tests)})"


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
    if name.startswith(S3_RESERVED_PREFIXES) or name.endswith(S3_RESERVED_SUFFIXES):
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

    version: str | None = Field(
        default=None,
        description=(
            "Chart version to install instead of the Composition's default for this add-on "
            "(its step input's charts entry), e.g. 1.22.4 or v3.32.1. Unset: that default."
        ),
        json_schema_extra={"pattern": CHART_VERSION.pattern},
    )
    values: HelmValues = Field(
        default_factory=dict,
        description=(
            "Helm values merged over the ones the function computes, e.g. "
            "{resources: {requests: {cpu: 50m}}}. A key the function sets itself cannot be "
            "overridden: the ClusterPlugin is refused with an error naming it."
        ),
    )

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

    encapsulation: CalicoEncapsulation = Field(
        default=CalicoEncapsulation.IPIP,
        description=(
            "Encapsulation of the default IP pool: IPIP or VXLAN between nodes, or None for a "
            "flat network (every node in one subnet)."
        ),
    )
    cidr: str | None = Field(
        default=None,
        description=(
            "IPv4 pod CIDR of the default IP pool, e.g. 192.168.0.0/16. Unset: the Cluster's "
            "spec.clusterNetwork.pods.cidrBlocks[0], or the KubeadmControlPlane's "
            "networking.podSubnet. On Crossplane 1.x, which cannot read those for the "
            "function, set it here."
        ),
        json_schema_extra={"pattern": CIDR_V4.pattern},
    )

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is not None and not CIDR_V4.match(v):
            msg = f"{v!r} is not an IPv4 CIDR such as 192.168.0.0/16"
            raise ValueError(msg)
        return v


class NetworkingSpec(_Strict):
    """At most one CNI."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.amazonVPC) && has(self.calico))",
                    "message": "set at most one of amazonVPC and calico: a cluster runs one CNI",
                }
            ]
        }
    )

    amazon_vpc: AmazonVPCSpec | None = Field(
        default=None,
        alias="amazonVPC",
        description=(
            "Install the Amazon VPC CNI (aws-vpc-cni chart, the step input's charts.vpcCni), "
            "with an IRSA role holding AmazonEKS_CNI_Policy: pods get VPC addresses. "
            "Example: amazonVPC: {}."
        ),
    )
    calico: CalicoSpec | None = Field(
        default=None,
        description=(
            "Install Calico through the tigera-operator chart (charts.calico, and its CRDs from "
            "charts.calicoCrds); no IAM role. Example: calico: {encapsulation: VXLAN}."
        ),
    )

    @model_validator(mode="after")
    def _one_cni(self) -> NetworkingSpec:
        if self.amazon_vpc is not None and self.calico is not None:
            msg = "set at most one of amazonVPC and calico: a cluster runs one CNI"
            raise ValueError(msg)
        return self


class EBSSpec(AddonSpec):
    """AWS EBS CSI driver."""

    default_storage_class: bool = Field(
        default=False,
        alias="defaultStorageClass",
        description="Create a gp3 StorageClass and mark it as the cluster's default.",
    )


class EFSSpec(AddonSpec):
    """AWS EFS CSI driver; a StorageClass is created when fileSystemId is given."""

    file_system_id: str | None = Field(
        default=None,
        alias="fileSystemId",
        description=(
            "An existing EFS file system (fs- followed by hex digits, e.g. fs-0123456789abcdef0): "
            "a StorageClass provisioning access points on it is created. Unset: no StorageClass."
        ),
        json_schema_extra={"pattern": FILE_SYSTEM_ID.pattern},
    )

    @field_validator("file_system_id")
    @classmethod
    def _fs(cls, v: str | None) -> str | None:
        if v is not None and not FILE_SYSTEM_ID.match(v):
            msg = f"{v!r} is not an EFS file system id (fs- followed by hex digits)"
            raise ValueError(msg)
        return v


class StorageSpec(_Strict):
    """CSI drivers."""

    ebs: EBSSpec | None = Field(
        default=None,
        description=(
            "Install the AWS EBS CSI driver (charts.ebs) with an IRSA role holding "
            "AmazonEBSCSIDriverPolicy. Example: ebs: {defaultStorageClass: true}."
        ),
    )
    efs: EFSSpec | None = Field(
        default=None,
        description=(
            "Install the AWS EFS CSI driver (charts.efs) with an IRSA role holding "
            "AmazonEFSCSIDriverPolicy. Example: efs: {fileSystemId: fs-0123456789abcdef0}."
        ),
    )


class LBCSpec(AddonSpec):
    """AWS Load Balancer Controller."""


class IngressSpec(_Strict):
    """Ingress controllers."""

    aws_load_balancer_controller: LBCSpec | None = Field(
        default=None,
        alias="awsLoadBalancerController",
        description=(
            "Install the AWS Load Balancer Controller (charts.loadBalancerController) with an "
            "IRSA role holding its upstream IAM policy: Services of type LoadBalancer and "
            "Ingresses get NLBs and ALBs. Example: awsLoadBalancerController: {}."
        ),
    )


class AWSCloudProviderSpec(AddonSpec):
    """The AWS cloud-controller-manager (kubernetes/cloud-provider-aws chart). No IAM role."""


class CloudProviderSpec(_Strict):
    """The cloud controller manager a kubelet with ``cloud-provider: external`` waits for."""

    aws: AWSCloudProviderSpec | None = Field(
        default=None,
        description=(
            "Install the AWS cloud-controller-manager (charts.cloudControllerManager) once the "
            "control plane is initialized, on the control-plane nodes' host network, before "
            "every other add-on but the CNI. No IAM role: it uses the control-plane instance "
            "profile. Its image tag follows the control plane's Kubernetes minor; "
            "values.image.tag pins it instead. Refused on EKS, which runs its own. "
            "Example: aws: {}."
        ),
    )


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


HostedZoneID = Annotated[
    str,
    AfterValidator(_hosted_zone_id),
    Field(json_schema_extra={"maxLength": 32, "pattern": HOSTED_ZONE_ID.pattern}),
]
DomainFilter = Annotated[
    str,
    AfterValidator(_domain_filter),
    Field(json_schema_extra={"maxLength": DOMAIN_FILTER_MAX, "pattern": DOMAIN_FILTER.pattern}),
]


def _first_duplicate(items: list[str]) -> int | None:
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item in seen:
            return i
        seen.add(item)
    return None


class ExternalDNSSpec(AddonSpec):
    """external-dns (kubernetes-sigs chart), with an IRSA role for the listed hosted zones only."""

    hosted_zone_ids: list[HostedZoneID] = Field(
        alias="hostedZoneIDs",
        max_length=HOSTED_ZONES_MAX,
        description=(
            "The Route 53 hosted zones external-dns may change, by id without /hostedzone/, "
            f"e.g. [Z0123456789ABC]; 1 to {HOSTED_ZONES_MAX}, each once. The role may change "
            "records in exactly these (ChangeResourceRecordSets, ListResourceRecordSets, "
            "ListTagsForResources), and external-dns is limited to them (--zone-id-filter)."
        ),
        json_schema_extra={"minItems": 1, "x-kubernetes-list-type": "set"},
    )
    domain_filters: list[DomainFilter] = Field(
        default_factory=list,
        alias="domainFilters",
        description=(
            "Domains external-dns manages records for (--domain-filter), each once, e.g. "
            "[example.com]; a leading dot (.example.com) means subdomains only. Empty: every "
            "name in the listed zones."
        ),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    policy: ExternalDNSPolicy = Field(
        default=ExternalDNSPolicy.UPSERT_ONLY,
        description=(
            "How records are synchronized (--policy): upsert-only never deletes, sync also "
            "deletes the records it owns when their source goes away, create-only never updates."
        ),
    )
    zone_type: HostedZoneType | None = Field(
        default=None,
        alias="zoneType",
        description=(
            "Whether the listed zones are public or private: external-dns then uses only zones "
            "of that type (--aws-zone-type), and `aws preflight` fails a listed zone of the "
            "other type. Unset: the zones may be of either type."
        ),
    )

    @model_validator(mode="after")
    def _lists_and_env(self) -> ExternalDNSSpec:
        # "<field>: <message>" names the exact field (see _problem).
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

    external_dns: ExternalDNSSpec | None = Field(
        default=None,
        alias="externalDNS",
        description=(
            "Install external-dns (charts.externalDNS) in kube-system, with an IRSA role that "
            "may change records in the listed hosted zones only (no hostedzone/* grant), and a "
            "TXT owner id derived from this ClusterPlugin's namespace and cluster, so that "
            "clusters sharing a zone never take over each other's records. In values, extraArgs "
            "must be the map form, and env entries are added after the function's "
            "AWS_DEFAULT_REGION (AWS_REGION and AWS_DEFAULT_REGION are refused). "
            "Example: externalDNS: {hostedZoneIDs: [Z0123456789ABC], domainFilters: [example.com]}."
        ),
    )


class IRSAMode(StrEnum):
    """Where the OIDC issuer for IAM Roles for Service Accounts comes from."""

    SELF_HOSTED = "SelfHosted"
    EXTERNAL = "External"
    # EKS Pod Identity instead of IRSA: no issuer, an association per add-on role.
    POD_IDENTITY = "PodIdentity"
    DISABLED = "Disabled"


class CertManagerMode(StrEnum):
    """Whether the function installs cert-manager for the pod identity webhook."""

    INSTALL = "Install"
    EXISTING = "Existing"


class PodIdentityWebhookSpec(_Strict):
    """The amazon-eks-pod-identity-webhook (needed on non-EKS clusters)."""

    install: bool = Field(
        default=True,
        description=(
            "Install the webhook (charts.podIdentityWebhook), which injects the role's "
            "credentials into pods; false if the cluster already runs one."
        ),
    )
    cert_manager: CertManagerMode = Field(
        default=CertManagerMode.INSTALL,
        alias="certManager",
        description=(
            "Where the webhook's certificate issuer comes from: Install cert-manager "
            "(charts.certManager), or use the cert-manager that is Existing in the cluster."
        ),
    )


class HostingType(StrEnum):
    """Where a SelfHosted issuer's two discovery documents are served from."""

    S3_PUBLIC = "S3Public"
    CLOUD_FRONT = "CloudFront"


class DistributionMode(StrEnum):
    """Whose CloudFront distribution serves the documents."""

    SHARED = "Shared"
    MANAGED = "Managed"


class PriceClass(StrEnum):
    """A CloudFront price class (which edge locations serve the distribution)."""

    PRICE_CLASS_100 = "PriceClass_100"
    PRICE_CLASS_200 = "PriceClass_200"
    PRICE_CLASS_ALL = "PriceClass_All"


# A host name CloudFront can serve as an alias: lower-case DNS labels, at least two.
ISSUER_DOMAIN = re.compile(rf"^({DNS_NAME_LABEL}\.)+{DNS_NAME_LABEL}$")
ISSUER_DOMAIN_MAX = 253
# Path segments of URL-safe characters; none may start with '.', so '.', '..' and
# hidden names (which S3, CloudFront and IAM would each normalize their own way) are out.
PATH_SEGMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
PATH_PREFIX = re.compile(rf"^{PATH_SEGMENT}(/{PATH_SEGMENT})*$")
PATH_PREFIX_MAX = 128
ACM_CERTIFICATE_ARN = re.compile(
    r"^arn:(aws|aws-cn|aws-us-gov):acm:([a-z0-9-]+):(\d{12}):certificate/([0-9a-f-]{1,64})$"
)
# CloudFront reads viewer certificates from ACM in us-east-1 only (whatever the origin's region).
CLOUDFRONT_CERTIFICATE_REGION = "us-east-1"
_CEL_CERTIFICATE = (
    "self == '' || self.matches('^arn:aws:acm:us-east-1:[0-9]{12}:certificate/[0-9a-f-]{1,64}$')"
)


def _unset(field: str) -> str:
    """CEL: ``field`` is absent or empty."""
    return f"(!has(self.{field}) || self.{field} == '')"


def _set(field: str) -> str:
    """CEL: ``field`` is present and not empty."""
    return f"(has(self.{field}) && self.{field} != '')"


class CloudFrontSpec(_Strict):
    """The issuer's documents behind CloudFront, in a private bucket."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.distribution != 'Shared' || {_set('bucketName')}",
                    "message": "bucketName is required when distribution is Shared",
                },
                {
                    "rule": f"self.distribution != 'Managed' || {_set('certificateArn')}",
                    "message": "certificateArn is required when distribution is Managed",
                },
                {
                    "rule": f"self.distribution == 'Managed' || ({_unset('certificateArn')} && "
                    f"{_unset('hostedZoneId')} && !has(self.priceClass))",
                    "message": (
                        "certificateArn, hostedZoneId and priceClass are only allowed when "
                        "distribution is Managed"
                    ),
                },
                {
                    "rule": f"self.distribution == 'Shared' || ({_unset('bucketName')} && "
                    f"{_unset('bucketRegion')})",
                    "message": (
                        "bucketName and bucketRegion are only allowed when distribution is Shared"
                    ),
                },
            ]
        }
    )

    distribution: DistributionMode = Field(
        description=(
            "Shared: one distribution for many clusters, set up once by the platform team; the "
            "function writes only this cluster's two documents, under its own path, into the "
            "distribution's bucket (bucketName). Managed: this ClusterPlugin composes a private "
            "bucket, an origin access control and a distribution of its own (certificateArn; "
            "CloudFront takes about 15 minutes to deploy it)."
        ),
    )
    domain: str = Field(
        description=(
            "The host name the distribution serves, e.g. oidc.example.com: the issuer is "
            "https://<domain>[/<pathPrefix>]."
        ),
        json_schema_extra={
            "minLength": 1,
            "maxLength": ISSUER_DOMAIN_MAX,
            "pattern": ISSUER_DOMAIN.pattern,
        },
    )
    path_prefix: str = Field(
        default="",
        alias="pathPrefix",
        description=(
            "The issuer's path under the domain, without leading or trailing '/'. Shared: "
            "<namespace>/<cluster> of this ClusterPlugin, the only prefix it may write under "
            "(empty means that). Managed: empty (the issuer is https://<domain>), or any path."
        ),
        json_schema_extra={
            "maxLength": PATH_PREFIX_MAX,
            "pattern": f"^({PATH_SEGMENT}(/{PATH_SEGMENT})*)?$",
        },
    )
    bucket_name: str = Field(
        default="",
        alias="bucketName",
        description=(
            "Shared only (and required there): the platform team's private S3 bucket that is "
            "the distribution's origin, e.g. acme-oidc."
        ),
        json_schema_extra={"maxLength": 63, "pattern": "^([a-z0-9][a-z0-9-]{1,61}[a-z0-9])?$"},
    )
    bucket_region: str = Field(
        default="",
        alias="bucketRegion",
        description=(
            "Shared only: the region of bucketName, e.g. us-east-1. Empty: the cluster's region."
        ),
        json_schema_extra={"pattern": f"^({REGION.pattern.strip('^$')})?$"},
    )
    certificate_arn: str = Field(
        default="",
        alias="certificateArn",
        description=(
            "Managed only (and required there): an ACM certificate for domain, in us-east-1 "
            "(where CloudFront reads certificates), e.g. "
            "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f."
        ),
        json_schema_extra={
            # Bounds the cost the API server estimates for the rule's regular expression.
            "maxLength": 128,
            "x-kubernetes-validations": [
                {
                    "rule": _CEL_CERTIFICATE,
                    "message": "certificateArn must be an ACM certificate ARN in us-east-1",
                }
            ]
        },
    )
    hosted_zone_id: str = Field(
        default="",
        alias="hostedZoneId",
        description=(
            "Managed only: a Route 53 hosted zone holding domain, e.g. Z0123456789ABC; the "
            "function then composes the alias record to the distribution. Empty: create the "
            "DNS record yourself (status.plugins says the distribution's domain name)."
        ),
        json_schema_extra={
            "maxLength": 32,
            "pattern": f"^({HOSTED_ZONE_ID.pattern.strip('^$')})?$",
        },
    )
    price_class: PriceClass | None = Field(
        default=None,
        alias="priceClass",
        description="Managed only: the distribution's price class. Unset: PriceClass_100.",
    )

    @field_validator("domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        if len(v) > ISSUER_DOMAIN_MAX or not ISSUER_DOMAIN.match(v):
            msg = (
                f"{v[:64]!r} is not a host name such as oidc.example.com (lower-case letters, "
                f"digits and '-' in dot-separated labels, at most {ISSUER_DOMAIN_MAX} characters)"
            )
            raise ValueError(msg)
        return v

    @field_validator("path_prefix")
    @classmethod
    def _path_prefix(cls, v: str) -> str:
        if v and (len(v) > PATH_PREFIX_MAX or not PATH_PREFIX.match(v)):
            msg = (
                f"{v[:64]!r} is not a path such as team-a/demo: segments of letters, digits, "
                "'-', '_', '~' and '.' separated by single '/', none starting with '.', no "
                f"leading or trailing '/', at most {PATH_PREFIX_MAX} characters"
            )
            raise ValueError(msg)
        return v

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, v: str) -> str:
        problem = s3_bucket_name_problem(v) if v else None
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("bucket_region")
    @classmethod
    def _bucket_region(cls, v: str) -> str:
        if v and not REGION.match(v):
            msg = f"{v!r} is not an AWS region such as us-east-1"
            raise ValueError(msg)
        return v

    @field_validator("certificate_arn")
    @classmethod
    def _certificate(cls, v: str) -> str:
        if not v:
            return v
        m = ACM_CERTIFICATE_ARN.match(v)
        if not m:
            msg = (
                f"{v[:96]!r} is not an ACM certificate ARN "
                "(arn:aws:acm:us-east-1:<account>:certificate/<id>)"
            )
            raise ValueError(msg)
        partition, region = m.group(1), m.group(2)
        if partition != "aws" or region != CLOUDFRONT_CERTIFICATE_REGION:
            where = region if partition == "aws" else f"partition {partition}"
            msg = (
                f"{v!r} is in {where}: CloudFront uses ACM certificates in "
                f"{CLOUDFRONT_CERTIFICATE_REGION} only; request or import the certificate for "
                "the domain there"
            )
            raise ValueError(msg)
        return v

    @field_validator("hosted_zone_id")
    @classmethod
    def _zone(cls, v: str) -> str:
        return _hosted_zone_id(v) if v else v

    @model_validator(mode="after")
    def _distribution_fields(self) -> CloudFrontSpec:
        # "<field>: <message>" names the exact field (see _problem).
        shared = self.distribution is DistributionMode.SHARED
        if shared and not self.bucket_name:
            msg = (
                "bucketName: is required when distribution is Shared (the platform team's "
                "private bucket behind the distribution)"
            )
            raise ValueError(msg)
        if not shared and not self.certificate_arn:
            msg = (
                "certificateArn: is required when distribution is Managed (an ACM certificate "
                f"for {self.domain} in {CLOUDFRONT_CERTIFICATE_REGION})"
            )
            raise ValueError(msg)
        only = {
            DistributionMode.MANAGED: (
                ("certificateArn", self.certificate_arn),
                ("hostedZoneId", self.hosted_zone_id),
                ("priceClass", self.price_class),
            ),
            DistributionMode.SHARED: (
                ("bucketName", self.bucket_name),
                ("bucketRegion", self.bucket_region),
            ),
        }
        for mode, fields in only.items():
            for name, value in fields:
                if value and self.distribution is not mode:
                    msg = (
                        f"{name}: is only allowed when distribution is {mode.value} "
                        f"(distribution is {self.distribution.value})"
                    )
                    raise ValueError(msg)
        return self


class HostingSpec(_Strict):
    """Where a SelfHosted issuer's discovery documents are served from."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.type) || self.type != 'CloudFront' || has(self.cloudFront)",
                    "message": "cloudFront is required when type is CloudFront",
                },
                {
                    "rule": "(has(self.type) && self.type == 'CloudFront') || "
                    "!has(self.cloudFront)",
                    "message": "cloudFront is only allowed when type is CloudFront",
                },
            ]
        }
    )

    type: HostingType = Field(
        default=HostingType.S3_PUBLIC,
        description=(
            "S3Public: a bucket whose policy lets anyone read the two documents (S3 Block "
            "Public Access must allow public bucket policies). CloudFront: a private bucket "
            "behind a CloudFront distribution (cloudFront), for accounts where Block Public "
            "Access is on."
        ),
    )
    cloud_front: CloudFrontSpec | None = Field(
        default=None,
        alias="cloudFront",
        description=(
            "type CloudFront only (and required there): the distribution and the issuer's "
            "domain. Example: cloudFront: {distribution: Shared, domain: oidc.example.com, "
            "bucketName: acme-oidc}."
        ),
    )

    @model_validator(mode="after")
    def _type_fields(self) -> HostingSpec:
        if self.type is HostingType.CLOUD_FRONT and self.cloud_front is None:
            msg = "cloudFront: is required when type is CloudFront"
            raise ValueError(msg)
        if self.type is not HostingType.CLOUD_FRONT and self.cloud_front is not None:
            msg = f"cloudFront: is only allowed when type is CloudFront (type is {self.type.value})"
            raise ValueError(msg)
        return self


class IRSASpec(_Strict):
    """IAM Roles for Service Accounts."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.issuerURL) && self.issuerURL != '') == "
                    "(has(self.oidcProviderARN) && self.oidcProviderARN != '')",
                    "message": (
                        "issuerURL and oidcProviderARN are given together (or, on EKS, both "
                        "left out: read from the AWSManagedControlPlane)"
                    ),
                },
                {
                    "rule": "(has(self.mode) && self.mode == 'External') || "
                    "((!has(self.issuerURL) || self.issuerURL == '') && "
                    "(!has(self.oidcProviderARN) || self.oidcProviderARN == ''))",
                    "message": (
                        "issuerURL and oidcProviderARN are only allowed when mode is External"
                    ),
                },
                {
                    "rule": "!has(self.bucketName) || self.bucketName == '' || "
                    "!has(self.mode) || self.mode == 'SelfHosted'",
                    "message": "bucketName is only allowed when mode is SelfHosted",
                },
                {
                    "rule": "!has(self.hosting) || !has(self.mode) || self.mode == 'SelfHosted'",
                    "message": "hosting is only allowed when mode is SelfHosted",
                },
                {
                    "rule": "!has(self.bucketName) || self.bucketName == '' || "
                    "!has(self.hosting) || !has(self.hosting.cloudFront) || "
                    "self.hosting.cloudFront.distribution != 'Shared'",
                    "message": (
                        "bucketName is not used with a Shared CloudFront distribution: the "
                        "documents go to hosting.cloudFront.bucketName"
                    ),
                },
            ]
        }
    )

    mode: IRSAMode = Field(
        default=IRSAMode.SELF_HOSTED,
        description=(
            "Where the OIDC issuer comes from. SelfHosted: the function publishes the discovery "
            "document and JWKS (from the Cluster's <cluster>-sa Secret) in an S3 bucket and "
            "creates the IAM OIDC provider. External: an existing issuer, given by issuerURL "
            "and oidcProviderARN, or on EKS (AWSManagedControlPlane with "
            "associateOIDCProvider: true) left out and read from the control plane's "
            "status.oidcProvider. PodIdentity (EKS only, not in China regions): EKS Pod "
            "Identity instead of IRSA: each add-on role trusts pods.eks.amazonaws.com for its "
            "one service account of this cluster, through a PodIdentityAssociation; the "
            "eks-pod-identity-agent runs first (charts.podIdentityAgent, or the "
            "AWSManagedControlPlane's spec.addons). Disabled: no IRSA; add-ons use node "
            "credentials."
        ),
    )
    bucket_name: str = Field(
        default="",
        alias="bucketName",
        description=(
            "SelfHosted only: the issuer's S3 bucket instead of the derived one, e.g. "
            "acme-irsa-demo. 3 to 63 lower-case letters, digits and '-' (no dots: a dotted "
            "bucket breaks the TLS certificate of the virtual-hosted issuer URL)."
        ),
        json_schema_extra={
            "maxLength": 63,
            "pattern": "^([a-z0-9][a-z0-9-]{1,61}[a-z0-9])?$",
            "x-kubernetes-validations": [
                {
                    "rule": _cel_refuse_affixes(S3_RESERVED_PREFIXES, S3_RESERVED_SUFFIXES),
                    "message": "bucketName uses a prefix or suffix S3 reserves",
                }
            ],
        },
    )
    issuer_url: str = Field(
        default="",
        alias="issuerURL",
        description=(
            "External only, with oidcProviderARN: the service-account issuer URL, e.g. "
            "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE. On EKS leave both out: "
            "CAPA's status.oidcProvider.arn names them (a given value must agree with it)."
        ),
    )
    oidc_provider_arn: str = Field(
        default="",
        alias="oidcProviderARN",
        description=(
            "External only, with issuerURL: the ARN of the IAM OIDC provider for "
            "issuerURL, e.g. arn:aws:iam::123456789012:oidc-provider/"
            "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE."
        ),
    )
    pod_identity_webhook: PodIdentityWebhookSpec = Field(
        default_factory=PodIdentityWebhookSpec,
        alias="podIdentityWebhook",
        description=(
            "The amazon-eks-pod-identity-webhook, which gives pods of an IRSA ServiceAccount "
            "their role's credentials (EKS runs its own; other clusters need it)."
        ),
    )
    hosting: HostingSpec | None = Field(
        default=None,
        description=(
            "SelfHosted only: where the two discovery documents are served from. Unset: "
            "type S3Public (a public-read bucket policy). Where S3 Block Public Access forbids "
            "that, type CloudFront serves them from a private bucket. Example: hosting: {type: "
            "CloudFront, cloudFront: {distribution: Shared, domain: oidc.example.com, "
            "bucketName: acme-oidc}}."
        ),
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
        # "<field>: <message>" names the exact field (see _problem).
        external = self.mode is IRSAMode.EXTERNAL
        given = (("issuerURL", self.issuer_url), ("oidcProviderARN", self.oidc_provider_arn))
        for (name, value), (other, other_value) in zip(given, reversed(given), strict=True):
            if external and other_value and not value:
                msg = (
                    f"{name}: is required with {other} (or leave both out on EKS: they are "
                    "read from the AWSManagedControlPlane's status.oidcProvider)"
                )
                raise ValueError(msg)
            if not external and value:
                msg = f"{name}: is only allowed when mode is External (mode is {self.mode.value})"
                raise ValueError(msg)
        if self.bucket_name and self.mode is not IRSAMode.SELF_HOSTED:
            msg = f"bucketName: is only allowed when mode is SelfHosted (mode is {self.mode.value})"
            raise ValueError(msg)
        if self.hosting is not None and self.mode is not IRSAMode.SELF_HOSTED:
            msg = f"hosting: is only allowed when mode is SelfHosted (mode is {self.mode.value})"
            raise ValueError(msg)
        cloud_front = self.cloud_front
        if self.bucket_name and cloud_front and cloud_front.distribution is DistributionMode.SHARED:
            msg = (
                "bucketName: is not used with a Shared CloudFront distribution: the documents "
                "go to hosting.cloudFront.bucketName (the platform team's bucket)"
            )
            raise ValueError(msg)
        return self

    @property
    def cloud_front(self) -> CloudFrontSpec | None:
        """The CloudFront hosting, when the issuer is hosted behind CloudFront."""
        return None if self.hosting is None else self.hosting.cloud_front


class SecurityGroupMode(StrEnum):
    """How the function handles the ports add-ons need."""

    AUTO = "Auto"
    ALWAYS = "Always"
    NEVER = "Never"


class SecurityGroupsSpec(_Strict):
    """Security-group handling."""

    manage: SecurityGroupMode = Field(
        default=SecurityGroupMode.AUTO,
        description=(
            "Auto: compose rules only onto security groups CAPA does not manage "
            "(securityGroupOverrides) and report missing rules on CAPA-managed ones. "
            "Always: compose rules regardless. Never: only report."
        ),
    )


class ClusterPluginSpec(_Strict):
    """The spec shared by ClusterPlugin (v2, namespaced) and XClusterPlugin (legacy)."""

    # Crossplane's own machinery fields (compositionRef, resourceRefs...) are
    # dropped before validation, see parse_spec.
    cluster_name: str = Field(
        alias="clusterName",
        min_length=1,
        max_length=63,
        description=(
            "Name of the Cluster API Cluster to install into, e.g. demo. It is looked up in this "
            "ClusterPlugin's namespace; for a legacy XClusterPlugin, in its claim's namespace, "
            "or in clusterNamespace when it has no claim."
        ),
        json_schema_extra={"pattern": DNS_LABEL.pattern},
    )
    cluster_namespace: str | None = Field(
        default=None,
        alias="clusterNamespace",
        description=(
            "Legacy cluster-scoped XClusterPlugin without a claim only: the namespace of the "
            "Cluster, e.g. default. Leave it unset on claims: a claimed XR uses the claim's "
            "namespace."
        ),
        json_schema_extra={"minLength": 1, "maxLength": 63, "pattern": DNS_LABEL.pattern},
    )
    region: str | None = Field(
        default=None,
        description=(
            "AWS region of the cluster, e.g. us-east-1, cn-north-1 or us-gov-west-1. Unset: the "
            "AWSCluster's (or AWSManagedControlPlane's) spec.region."
        ),
        json_schema_extra={"pattern": REGION.pattern},
    )
    networking: NetworkingSpec = Field(
        default_factory=NetworkingSpec,
        description="The CNI to install: at most one of amazonVPC and calico. Unset: none.",
    )
    storage: StorageSpec = Field(
        default_factory=StorageSpec,
        description="The CSI drivers to install: ebs, efs, both or neither.",
    )
    ingress: IngressSpec = Field(
        default_factory=IngressSpec,
        description="The ingress controller to install (awsLoadBalancerController).",
    )
    irsa: IRSASpec = Field(
        default_factory=IRSASpec,
        description=(
            "IAM Roles for Service Accounts: where the OIDC issuer the add-ons' roles trust "
            "comes from, and the webhook that hands pods their role's credentials."
        ),
    )
    security_groups: SecurityGroupsSpec = Field(
        default_factory=SecurityGroupsSpec,
        alias="securityGroups",
        description=(
            "How the ports the add-ons need (e.g. Calico's VXLAN or BGP) are opened on the "
            "cluster's security groups."
        ),
    )
    cloud_provider: CloudProviderSpec = Field(
        default_factory=CloudProviderSpec,
        alias="cloudProvider",
        description=(
            "The cloud controller manager that nodes of a cluster with cloud-provider: external "
            "wait for (CAPA's default template)."
        ),
    )
    dns: DNSSpec = Field(
        default_factory=DNSSpec,
        description="DNS records for what the cluster exposes (externalDNS).",
    )

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

    name: str = Field(min_length=1, description="Name of the Secret, e.g. registry-creds.")
    namespace: str | None = Field(
        default=None,
        description=(
            "Namespace of the Secret (legacy XRs only; namespaced XRs read it from their own "
            "namespace)."
        ),
    )


class ChartSource(_Strict):
    """Where a chart comes from. ``repository`` may be an https or oci:// URL."""

    repository: str = Field(
        min_length=1,
        description=(
            "Chart repository URL: https://, http:// or oci://, e.g. "
            "https://aws.github.io/eks-charts or oci://registry.example.com/charts (a mirror)."
        ),
        json_schema_extra={"pattern": "^(https?|oci)://.+"},
    )
    name: str = Field(min_length=1, description="Chart name, e.g. aws-vpc-cni.")
    version: str = Field(
        description="Chart version, e.g. 1.22.4 or v3.32.1.",
        json_schema_extra={"pattern": CHART_VERSION.pattern},
    )
    pull_secret_ref: SecretRef | None = Field(
        default=None,
        alias="pullSecretRef",
        description="A Secret with credentials for a private repository.",
    )

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
        description="The Amazon VPC CNI chart (spec.networking.amazonVPC).",
    )
    calico_crds: ChartSource = Field(
        default=ChartSource(
            repository=CALICO_CHARTS, name="crd.projectcalico.org.v1", version="v3.32.1"
        ),
        alias="calicoCrds",
        description=(
            "Calico's CRDs chart, installed before tigera-operator (spec.networking.calico)."
        ),
    )
    calico: ChartSource = Field(
        default=ChartSource(repository=CALICO_CHARTS, name="tigera-operator", version="v3.32.1"),
        description="The tigera-operator chart that installs Calico (spec.networking.calico).",
    )
    ebs: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/aws-ebs-csi-driver",
            name="aws-ebs-csi-driver",
            version="2.64.0",
        ),
        description="The AWS EBS CSI driver chart (spec.storage.ebs).",
    )
    efs: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/aws-efs-csi-driver",
            name="aws-efs-csi-driver",
            version="4.4.1",
        ),
        description="The AWS EFS CSI driver chart (spec.storage.efs).",
    )
    load_balancer_controller: ChartSource = Field(
        default=ChartSource(
            repository=EKS_CHARTS, name="aws-load-balancer-controller", version="3.5.0"
        ),
        alias="loadBalancerController",
        description=(
            "The AWS Load Balancer Controller chart (spec.ingress.awsLoadBalancerController)."
        ),
    )
    cert_manager: ChartSource = Field(
        default=ChartSource(
            repository="https://charts.jetstack.io", name="cert-manager", version="v1.21.1"
        ),
        alias="certManager",
        description=(
            "The cert-manager chart, for the pod identity webhook's certificate "
            "(spec.irsa.podIdentityWebhook.certManager: Install)."
        ),
    )
    pod_identity_webhook: ChartSource = Field(
        default=ChartSource(
            repository="https://jkroepke.github.io/helm-charts",
            name="amazon-eks-pod-identity-webhook",
            version="2.6.5",
        ),
        alias="podIdentityWebhook",
        description="The amazon-eks-pod-identity-webhook chart (spec.irsa.podIdentityWebhook).",
    )
    cloud_controller_manager: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes.github.io/cloud-provider-aws",
            name="aws-cloud-controller-manager",
            version="0.0.11",
        ),
        alias="cloudControllerManager",
        description="The AWS cloud-controller-manager chart (spec.cloudProvider.aws).",
    )
    external_dns: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/external-dns",
            name="external-dns",
            version="1.21.1",
        ),
        alias="externalDNS",
        description="The external-dns chart (spec.dns.externalDNS).",
    )
    pod_identity_agent: ChartSource | None = Field(
        default=None,
        alias="podIdentityAgent",
        description=(
            "The eks-pod-identity-agent chart (spec.irsa.mode: PodIdentity), e.g. "
            "{repository: oci://registry.example.com/charts, name: eks-pod-identity-agent, "
            "version: 1.2.0}. Upstream publishes it in no Helm repository "
            "(aws/eks-pod-identity-agent, charts/eks-pod-identity-agent): mirror the packaged "
            "chart into a repository of your own. Not needed when the AWSManagedControlPlane "
            "lists the eks-pod-identity-agent add-on in spec.addons."
        ),
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


Seconds = Annotated[
    int,
    # Whole seconds, or a duration string: what _seconds takes, for the schemas.
    BeforeValidator(_seconds, json_schema_input_type=int | str),
    Field(ge=1, le=86400, json_schema_extra={"pattern": DURATION.pattern, "minLength": 1}),
]


class TTL(_Strict):
    """How soon Crossplane calls the function again."""

    waiting: Seconds = Field(
        default=30,
        description=(
            "How soon Crossplane calls the function again while anything is still waiting: "
            "whole seconds, or a duration such as 30s, 10m or 1h30m (at most 24h)."
        ),
    )
    ready: Seconds = Field(
        default=600,
        description=(
            "How soon Crossplane calls the function again once everything is ready, like "
            "waiting; not shorter than waiting."
        ),
    )

    @model_validator(mode="after")
    def _order(self) -> TTL:
        if self.waiting > self.ready:
            msg = f"waiting: must not be longer than ready ({self.waiting}s > {self.ready}s)"
            raise ValueError(msg)
        return self


class ProviderConfigRef(_Strict):
    """A provider config reference for composed AWS resources."""

    name: str = Field(
        default="default",
        description="Name of the AWS provider config (of the kind below).",
        json_schema_extra={"minLength": 1},
    )
    # Namespaced managed resources name the kind; legacy ones ignore it.
    kind: Literal["ProviderConfig", "ClusterProviderConfig"] = Field(
        default="ClusterProviderConfig",
        description=(
            "Its kind, for namespaced managed resources (Crossplane v2): a ProviderConfig in the "
            "XR's namespace, or a cluster-wide ClusterProviderConfig. Legacy ones ignore it."
        ),
    )


class ClusterAPIVersions(_Strict):
    """API versions used to ask Crossplane for the Cluster API objects."""

    cluster: str = Field(
        default="cluster.x-k8s.io/v1beta2",
        description="apiVersion of Cluster API Clusters, e.g. cluster.x-k8s.io/v1beta1.",
    )
    kubeadm_control_plane: str = Field(
        default="controlplane.cluster.x-k8s.io/v1beta2",
        alias="kubeadmControlPlane",
        description="apiVersion of KubeadmControlPlanes.",
    )
    aws_managed_control_plane: str = Field(
        default="controlplane.cluster.x-k8s.io/v1beta2",
        alias="awsManagedControlPlane",
        description="apiVersion of AWSManagedControlPlanes (EKS).",
    )
    aws_cluster: str = Field(
        default="infrastructure.cluster.x-k8s.io/v1beta2",
        alias="awsCluster",
        description="apiVersion of AWSClusters.",
    )
    aws_managed_cluster: str = Field(
        default="infrastructure.cluster.x-k8s.io/v1beta2",
        alias="awsManagedCluster",
        description="apiVersion of AWSManagedClusters (EKS).",
    )
    # Crossplane 1.x selects by label only and does not know the Cluster's refs,
    # so it needs to be told which control-plane kind to list.
    legacy_control_plane_kind: Literal["KubeadmControlPlane", "AWSManagedControlPlane"] = Field(
        default="KubeadmControlPlane",
        alias="legacyControlPlaneKind",
        description=(
            "The control-plane kind to list on Crossplane 1.x, whose label-only selectors "
            "cannot follow the Cluster's controlPlaneRef: AWSManagedControlPlane for EKS."
        ),
    )


# The step input's type: a Composition's pipeline step that carries it is this function's,
# whatever name the Function was installed under.
INPUT_GROUP = "fn.clusterplugin.dev"
INPUT_VERSION = "v1alpha1"
INPUT_KIND = "Input"
INPUT_API_VERSION = f"{INPUT_GROUP}/{INPUT_VERSION}"


class StepInput(_Strict):
    """The function's step input (``fn.clusterplugin.dev/v1alpha1``, kind ``Input``)."""

    api_version: str | None = Field(
        default=None, alias="apiVersion", description="fn.clusterplugin.dev/v1alpha1."
    )
    kind: str | None = Field(default=None, description="Input.")
    metadata: dict[str, Any] | None = Field(
        default=None, description="Ignored: the input is not stored as an object."
    )
    name_prefix: str = Field(
        default="",
        alias="namePrefix",
        max_length=20,
        description=(
            "Prefix of the derived AWS names (S3 bucket, IAM roles and policies), to make them "
            "unique to your organisation, e.g. acme-: lower-case letters, digits and '-', at "
            "most 20 characters, not a prefix S3 reserves."
        ),
        json_schema_extra={
            "pattern": "^([a-z0-9][a-z0-9-]*)?$",
            "x-kubernetes-validations": [
                {
                    "rule": _cel_refuse_affixes(S3_RESERVED_PREFIXES),
                    "message": "namePrefix starts with a prefix S3 reserves",
                }
            ],
        },
    )
    charts: Charts = Field(
        default_factory=Charts,
        description=(
            "Where each add-on's chart comes from; the defaults are the versions this release "
            "was tested with. An XR's spec.<add-on>.version overrides the version."
        ),
    )
    ttl: TTL = Field(
        default_factory=TTL,
        description="How soon Crossplane calls the function again.",
    )
    aws_provider_config: ProviderConfigRef = Field(
        default_factory=ProviderConfigRef,
        alias="awsProviderConfig",
        description="The provider config of the composed AWS managed resources.",
    )
    cluster_api: ClusterAPIVersions = Field(
        default_factory=ClusterAPIVersions,
        alias="clusterAPI",
        description="The API versions used to ask Crossplane for the Cluster API objects.",
    )
    # Namespaced XRs: a Usage of the CAPI Cluster by the helm ProviderConfig, so that
    # deleting the Cluster first waits until the add-ons are uninstalled (docs/architecture.md,
    # "The cluster's own deletion").
    protect_cluster: bool = Field(
        default=False,
        alias="protectCluster",
        description=(
            "Namespaced ClusterPlugins only: make deleting the CAPI Cluster wait until the "
            "add-ons are uninstalled from it (a Usage of the Cluster by the helm "
            "ProviderConfig). Crossplane then also needs get, update, patch and delete on CAPI "
            "Clusters (apis/rbac/clusterrole-protect-cluster.yaml)."
        ),
    )

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
    # Only a refused spec needs difflib: the server does not carry it (200 KiB of RSS).
    import difflib  # noqa: PLC0415

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
