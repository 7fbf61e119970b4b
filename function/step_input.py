"""The function's step Input (``fn.clusterplugin.dev/v1alpha1`` ``Input``), as Pydantic models.

The source of the Input CRD in ``package/input/`` and of the Compositions' step input
(``make generate``): chart sources and their defaults, the provider configs, the
Cluster API versions, the TTLs. Parsed by ``function/spec.py`` (``parse_input``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)

from function.spec_base import (
    CHART_VERSION,
    DURATION,
    S3_RESERVED_PREFIXES,
    StrictModel,
    cel_refuse_affixes,
    check_chart_version,
)

# An image registry as an image reference starts: host[:port][/path], lower case (the
# distribution spec's repository components), no scheme and no tag.
REGISTRY = re.compile(
    r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$"
)


class SecretRef(StrictModel):
    """A reference to a Secret (registry credentials for a chart)."""

    name: str = Field(min_length=1, description="Name of the Secret, e.g. registry-creds.")
    namespace: str | None = Field(
        default=None,
        description=(
            "Namespace of the Secret (legacy XRs only; namespaced XRs read it from their own "
            "namespace)."
        ),
    )


class ChartSource(StrictModel):
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
    version: str | None = Field(
        default=None,
        description=(
            "Chart version, e.g. 1.22.4 or v3.32.1: pins it for every ClusterPlugin of the "
            "Composition. Unset: the newest version this function was tested with that its "
            "add-on documents for the cluster's Kubernetes minor (see the section Kubernetes "
            "compatibility of docs/architecture.md); it moves when the control plane's minor "
            "does."
        ),
        json_schema_extra={"pattern": CHART_VERSION.pattern},
    )
    pull_secret_ref: SecretRef | None = Field(
        default=None,
        alias="pullSecretRef",
        description="A Secret with credentials for a private repository.",
    )

    _version = field_validator("version")(check_chart_version)

    @field_validator("repository")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not v.startswith(("https://", "http://", "oci://")):
            msg = f"{v!r} must be an https://, http:// or oci:// chart repository URL"
            raise ValueError(msg)
        return v.rstrip("/")


EKS_CHARTS = "https://aws.github.io/eks-charts"
CALICO_CHARTS = "https://docs.tigera.io/calico/charts"


class Charts(StrictModel):
    """Chart source per add-on; versions follow the cluster's Kubernetes minor unless pinned."""

    vpc_cni: ChartSource = Field(
        default=ChartSource(repository=EKS_CHARTS, name="aws-vpc-cni"),
        alias="vpcCni",
        description="The Amazon VPC CNI chart (spec.networking.amazonVPC).",
    )
    calico_crds: ChartSource = Field(
        default=ChartSource(repository=CALICO_CHARTS, name="crd.projectcalico.org.v1"),
        alias="calicoCrds",
        description=(
            "Calico's CRDs chart, installed before tigera-operator (spec.networking.calico)."
        ),
    )
    calico: ChartSource = Field(
        default=ChartSource(repository=CALICO_CHARTS, name="tigera-operator"),
        description="The tigera-operator chart that installs Calico (spec.networking.calico).",
    )
    ebs: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/aws-ebs-csi-driver",
            name="aws-ebs-csi-driver",
        ),
        description="The AWS EBS CSI driver chart (spec.storage.ebs).",
    )
    efs: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/aws-efs-csi-driver",
            name="aws-efs-csi-driver",
        ),
        description="The AWS EFS CSI driver chart (spec.storage.efs).",
    )
    load_balancer_controller: ChartSource = Field(
        default=ChartSource(repository=EKS_CHARTS, name="aws-load-balancer-controller"),
        alias="loadBalancerController",
        description=(
            "The AWS Load Balancer Controller chart (spec.ingress.awsLoadBalancerController)."
        ),
    )
    cert_manager: ChartSource = Field(
        default=ChartSource(repository="https://charts.jetstack.io", name="cert-manager"),
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
        ),
        alias="podIdentityWebhook",
        description="The amazon-eks-pod-identity-webhook chart (spec.irsa.podIdentityWebhook).",
    )
    cloud_controller_manager: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes.github.io/cloud-provider-aws",
            name="aws-cloud-controller-manager",
        ),
        alias="cloudControllerManager",
        description="The AWS cloud-controller-manager chart (spec.cloudProvider.aws).",
    )
    external_dns: ChartSource = Field(
        default=ChartSource(
            repository="https://kubernetes-sigs.github.io/external-dns",
            name="external-dns",
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


class TTL(StrictModel):
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


class ProviderConfigRef(StrictModel):
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


class ClusterAPIVersions(StrictModel):
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


class Fleet(StrictModel):
    """Rolling out across a fleet (docs/fleet.md, "Rolling out across a fleet")."""

    rollouts: bool = Field(
        default=False,
        description=(
            "ClusterPlugins: ask Crossplane for every ClusterPluginRollout and follow the one "
            "that selects the XR. Turn it on only where the ClusterPluginRollout XRD is "
            "installed (the Configurations ship both): without it Crossplane cannot list the "
            "kind and every reconcile fails."
        ),
    )
    cluster_plugin_kind: Literal["ClusterPlugin", "XClusterPlugin"] = Field(
        default="ClusterPlugin",
        alias="clusterPluginKind",
        description=(
            "ClusterPluginRollouts: the composite kind they select, ClusterPlugin (Crossplane "
            "v2, namespaced) or XClusterPlugin (legacy)."
        ),
    )


class StepInput(StrictModel):
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
                    "rule": cel_refuse_affixes(S3_RESERVED_PREFIXES),
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
    pod_identity_agent_registry: str | None = Field(
        default=None,
        alias="podIdentityAgentRegistry",
        description=(
            "The registry the eks-pod-identity-agent chart (charts.podIdentityAgent) pulls its "
            "image from, as <registry>/eks/eks-pod-identity-agent:<tag>: a mirror of yours, "
            "e.g. registry.example.com/eks-mirror (host[:port][/path], no scheme). Default: "
            "the EKS add-on registry of the cluster's region (EKS user guide, 'View Amazon "
            "container image registries for Amazon EKS add-ons')."
        ),
        json_schema_extra={"pattern": REGISTRY.pattern},
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
    fleet: Fleet = Field(
        default_factory=Fleet,
        description=(
            "Rolling out across a fleet. Off by default; the shipped ClusterPlugin Compositions "
            "turn rollouts on, as their Configuration carries the ClusterPluginRollout XRD."
        ),
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

    @field_validator("pod_identity_agent_registry")
    @classmethod
    def _registry(cls, v: str | None) -> str | None:
        if v is not None and not REGISTRY.match(v):
            msg = (
                f"{v!r} is not an image registry: host[:port][/path] in lower case, no scheme "
                "or tag (e.g. registry.example.com/eks-mirror)"
            )
            raise ValueError(msg)
        return v

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


