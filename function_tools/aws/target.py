"""What ``aws preflight`` checks against: the XR, its step input and the cluster's objects.

Judged and read exactly as the function judges and reads them from Crossplane
(``resolve.accept_with_objects``): the same refusals, the same namespace, names and
region, the same cluster facts. Only the public key (``tls.crt``) of the
``<cluster>-sa`` Secret is ever decoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from function import cluster
from function.accept import Accepted, region
from function.cluster import ClusterFacts
from function.context import issuer_url
from function.names import Names, Partition, partition_of
from function.spec import ClusterPluginSpec
from function_tools.resolve import accept_with_objects


@dataclass(frozen=True)
class Target:
    """Everything the function would compose for one ClusterPlugin, as preflight sees it."""

    accepted: Accepted
    facts: ClusterFacts
    region: str
    public_pem: bytes | None = None
    # Where the public key came from (a file, or Secret ns/name), for messages.
    key_source: str = ""
    key_problem: str | None = None
    # What the cluster's node groups run with, from the objects given (cluster.node_identities).
    node_identities: tuple[cluster.NodeIdentity, ...] = ()

    @property
    def spec(self) -> ClusterPluginSpec:
        """The XR's spec."""
        return self.accepted.spec

    @property
    def namespace(self) -> str:
        """The CAPI cluster's namespace."""
        return self.accepted.namespace

    @property
    def names(self) -> Names:
        """The names the function derives."""
        return self.accepted.names

    @property
    def cluster(self) -> str:
        """The CAPI cluster name."""
        return self.spec.cluster_name

    @property
    def partition(self) -> Partition:
        """The region's partition."""
        return partition_of(self.region)

    @property
    def owner_tag(self) -> str:
        """The value of the ``clusterplugin.dev/cluster`` tag on everything composed."""
        return f"{self.namespace}/{self.cluster}"

    @property
    def issuer_url(self) -> str:
        """The issuer URL (SelfHosted: derived; External: given, or the EKS control plane's)."""
        return issuer_url(self.accepted.spec, self.accepted.names, self.region, self.facts)

    @property
    def issuer_host_path(self) -> str:
        """The issuer without its scheme, as IAM condition keys and OIDC provider ARNs spell it."""
        return self.issuer_url.removeprefix("https://")

    @property
    def eks(self) -> bool:
        """Whether the control plane is EKS."""
        return self.facts.eks

    @property
    def infrastructure_found(self) -> bool:
        """Whether the cluster's infrastructure object (an AWSCluster) was given."""
        return self.facts.infrastructure_found

    @property
    def sg_managed(self) -> dict[str, str]:
        """Role -> id of the security groups CAPA manages."""
        return {role: sg.id for role, sg in self.facts.sg_managed.items()}

    @property
    def sg_overrides(self) -> dict[str, str]:
        """Role -> id of the user's groups in securityGroupOverrides."""
        return self.facts.sg_overrides

    @property
    def awscluster_name(self) -> str:
        """The AWSCluster's name, for messages."""
        return cluster.infrastructure_name(self.facts) or self.cluster

    @property
    def external_resource_gc(self) -> str | None:
        """CAPA's external-resource-gc annotation ("": unset); None without the object."""
        return cluster.external_resource_gc(self.facts)


def build_target(
    xr: Mapping[str, Any],
    *,
    required: Iterable[Mapping[str, Any]] = (),
    step_input: Mapping[str, Any] | None = None,
    region_flag: str | None = None,
    public_key: bytes | None = None,
    public_key_source: str = "",
) -> Target:
    """The preflight target for an XR plus optional objects, flags and key.

    Args:
        xr: The ClusterPlugin (or legacy XClusterPlugin) object.
        required: Objects Crossplane would hand the function (Cluster API
            objects, the ``<cluster>-sa`` Secret), and the cluster's node groups with their
            AWS objects (the roles Pod Identity's agent asks with).
        step_input: The step's ``Input`` object.
        region_flag: ``--region``, when neither spec.region nor the AWSCluster says it.
        public_key: The service-account public key (PEM), overriding the Secret.
        public_key_source: Where ``public_key`` came from, for messages.

    Returns:
        The target.

    Raises:
        InvalidInputError: the function would refuse the XR or its input.
        RegionError: the region is unknown, or ``region_flag`` disagrees with it.
    """
    required = list(required)
    accepted, facts = accept_with_objects(xr, step_input, required)
    nodes = cluster.node_identities(required, accepted.namespace, accepted.spec.cluster_name)
    chosen, _ = region(accepted, facts, region_flag)
    key_source, key_problem = public_key_source, None
    if public_key is None and (facts.sa_public_pem is not None or facts.sa_problem):
        key_source = f"Secret {accepted.namespace}/{accepted.names.sa_secret}"
        public_key = facts.sa_public_pem
        if facts.sa_problem:
            key_problem = f"{key_source}: {facts.sa_problem}"
    return Target(accepted, facts, chosen, public_key, key_source, key_problem, nodes)
