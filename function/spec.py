"""The ClusterPlugin XR spec's frame, and the parsing of the spec and the step Input.

These models are the single source of the error messages a user sees for bad
input: every validation error becomes one FATAL result naming the field
(``spec.storage.ebs.values``) and what is allowed. They are also the source of the
XRDs in ``apis/`` and the Input CRD in ``package/input/`` (``make generate``,
function_tools/apigen.py): each field's description is what ``kubectl explain`` shows, and
``json_schema_extra`` carries what only the API server needs (patterns of checks done
here in validators, CEL rules).

Each add-on's own model lives with its declaration (``AmazonVPCSpec`` in
``function/addons/vpc_cni.py``, ...); this module holds the frame that places them
(``spec.networking.amazonVPC``) and the rules across add-ons (at most one CNI).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from function.addons.calico import CalicoSpec
from function.addons.ccm import AWSCloudProviderSpec
from function.addons.csi import EBSSpec, EFSSpec
from function.addons.external_dns import ExternalDNSSpec
from function.addons.irsa import IRSASpec
from function.addons.kit.security_groups import SecurityGroupsSpec
from function.addons.lbc import LBCSpec
from function.addons.vpc_cni import AmazonVPCSpec
from function.spec_base import (
    CROSSPLANE_SPEC_FIELDS,
    DNS_LABEL,
    REGION,
    InvalidInputError,
    StrictModel,
    model_at,
)
from function.step_input import StepInput


class NetworkingSpec(StrictModel):
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


class StorageSpec(StrictModel):
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


class IngressSpec(StrictModel):
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


class CloudProviderSpec(StrictModel):
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


class DNSSpec(StrictModel):
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


class OnFailure(StrEnum):
    """What a failed chart upgrade does."""

    ROLLBACK = "Rollback"
    HOLD = "Hold"


class UpgradePolicySpec(StrictModel):
    """How a chart moves on day two: the health gate and the way back."""

    soak_seconds: int = Field(
        default=60,
        alias="soakSeconds",
        ge=0,
        le=86400,
        description=(
            "How long a Release must run its new chart version (Ready for its new spec, with "
            "wait: true after helm waited for its workloads) before the upgrade counts as "
            "Healthy and the next chart may move, e.g. 300."
        ),
    )
    progress_deadline_seconds: int = Field(
        default=900,
        alias="progressDeadlineSeconds",
        ge=30,
        le=86400,
        description=(
            "How long an upgrade may take to run before it has failed, from the moment the "
            "function wrote the new spec, e.g. 900. Helm's own wait (waitTimeout 10m) fits in "
            "the default."
        ),
    )
    on_failure: OnFailure = Field(
        default=OnFailure.ROLLBACK,
        alias="onFailure",
        description=(
            "Rollback (default): write back the chart version and values that last ran "
            "healthy, and the IAM that goes with them. Hold: leave the failed version in "
            "place and move no other chart until a person acts. Either way the failed "
            "version is not tried again until the spec asks for another, or the annotation "
            "clusterplugin.dev/retry-upgrade changes."
        ),
    )


class ClusterPluginSpec(StrictModel):
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
    upgrade_policy: UpgradePolicySpec = Field(
        default_factory=UpgradePolicySpec,
        alias="upgradePolicy",
        description=(
            "Day two: how a chart upgrade is proven healthy (a soak time, a progress "
            "deadline) and what a failed one does (Rollback or Hold)."
        ),
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


# --- parsing ---------------------------------------------------------------


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
_ROOT_SCHEMAS = {"RolloutSpec": "the ClusterPluginRollout schema"}


def _unknown_field(prefix: str, root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    model = model_at(root, loc[:-1])
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
    schema = _ROOT_SCHEMAS.get(root.__name__, _SCHEMAS[prefix])
    return f"unknown field (check the spelling against {schema})"


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


def invalid_input(prefix: str, root: type[BaseModel], err: ValidationError) -> InvalidInputError:
    """Every problem pydantic found, in its order, each naming its field (under ``prefix``)."""
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
        raise invalid_input("spec", ClusterPluginSpec, err) from None


def parse_input(raw: dict[str, Any] | None) -> StepInput:
    """Validate the step input; raise InvalidInputError naming every bad field."""
    try:
        return StepInput.model_validate(raw or {})
    except ValidationError as err:
        raise invalid_input("input", StepInput, err) from None
