"""Deterministic names, always within their limits, and AWS partitions.

Every derived name is a pure function of the XR (namespace, cluster name, name
prefix): the ``issuer`` command must print the issuer URL before the cluster
exists. Names that could exceed a limit are cut and given a hash of the full
name, so two different inputs never share a truncated name.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

IAM_ROLE_MAX = 64
IAM_POLICY_MAX = 128
BUCKET_MAX = 63
K8S_NAME_MAX = 63
HELM_RELEASE_MAX = 53

# IAM path for everything the function creates: the provider's least-privilege
# policy (``aws provider-policy``) scopes iam:CreateRole etc. to it.
IAM_PATH = "/clusterplugin/"
# The tag on everything composed in AWS: "<namespace>/<cluster>" of its ClusterPlugin,
# for audits and for ``aws preflight`` to tell ours from someone else's.
CLUSTER_TAG = "clusterplugin.dev/cluster"


def short_hash(text: str, n: int = 6) -> str:
    """A short, stable hex digest of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def bounded(name: str, limit: int) -> str:
    """Return ``name`` if it fits ``limit``, else a cut of it plus a hash of the whole."""
    if len(name) <= limit:
        return name
    suffix = "-" + short_hash(name, 8)
    return name[: limit - len(suffix)].rstrip("-.") + suffix


@dataclass(frozen=True)
class Partition:
    """An AWS partition: ARN prefix and DNS suffix."""

    name: str
    dns_suffix: str


PARTITIONS = {
    "aws": Partition("aws", "amazonaws.com"),
    "aws-cn": Partition("aws-cn", "amazonaws.com.cn"),
    "aws-us-gov": Partition("aws-us-gov", "amazonaws.com"),
}


def partition_of(region: str) -> Partition:
    """The partition a region belongs to."""
    if region.startswith("cn-"):
        return PARTITIONS["aws-cn"]
    if region.startswith("us-gov-"):
        return PARTITIONS["aws-us-gov"]
    return PARTITIONS["aws"]


# CloudFront distributions are served by this Route 53 hosted zone: alias records to any
# distribution name it (AWS General Reference, "Amazon CloudFront endpoints and quotas").
CLOUDFRONT_HOSTED_ZONE_ID = "Z2FDTNDATAQYW2"
# IAM's limit on an OIDC provider URL (CreateOpenIDConnectProvider, Url).
OIDC_PROVIDER_URL_MAX = 255


@dataclass(frozen=True)
class CloudFrontIssuer:
    """A SelfHosted issuer served by CloudFront (``spec.irsa.hosting.cloudFront``), as given."""

    domain: str
    path_prefix: str  # "": the default of the distribution mode
    shared: bool
    # Shared: the platform team's bucket (and its region, "" for the cluster's).
    bucket: str = ""
    bucket_region: str = ""


@dataclass(frozen=True)
class Names:
    """Every name derived for one ClusterPlugin."""

    prefix: str
    namespace: str
    cluster: str
    bucket_override: str = ""
    cloudfront: CloudFrontIssuer | None = None

    @functools.cached_property
    def binding(self) -> str:
        """The hash of namespace/cluster that every derived name ends with.

        namespace and cluster joined by '-' would be ambiguous (a-b/c vs a/b-c):
        the hash of the unambiguous pair keeps derived names distinct.
        """
        return short_hash(f"{self.namespace}/{self.cluster}")

    @functools.cached_property
    def override_suffix(self) -> str:
        """The suffix a ``spec.irsa.bucketName`` override must end with.

        64 bits of the namespace/cluster hash: a tenant picks its cluster names
        freely, so a short binding could be searched for offline until it matched
        another tenant's (24 bits is ~16 million tries); 64 bits cannot.
        """
        return "-" + short_hash(f"{self.namespace}/{self.cluster}", 16)

    def bucket_override_problem(self) -> str | None:
        """Why ``bucket_override`` may not be used, or None.

        Issuer bucket names are predictable (``issuer`` prints them). A bucket named
        freely could be another tenant's issuer: this XR would then publish its own
        JWKS there and take over every role that trusts that issuer. An override
        must therefore end with this XR's ``override_suffix``.
        """
        suffix = self.override_suffix
        if self.bucket_override and not self.bucket_override.endswith(suffix):
            example = bounded(f"{self.prefix}my-issuer{suffix}", BUCKET_MAX)
            return (
                f"{self.bucket_override!r} must end with {suffix!r}, which binds the bucket to "
                f"{self.namespace}/{self.cluster} so no other ClusterPlugin can publish into it "
                f"(e.g. {example!r})"
            )
        return None

    @property
    def bucket(self) -> str:
        """The S3 bucket holding the OIDC discovery documents."""
        if self.bucket_override:
            return self.bucket_override
        return bounded(
            f"{self.prefix}irsa-{self.namespace}-{self.cluster}-{self.binding}", BUCKET_MAX
        )

    def issuer_url(self, region: str) -> str:
        """The service-account issuer URL.

        S3Public: the bucket's regional virtual-hosted endpoint. CloudFront:
        ``https://<domain>[/<path>]``, whatever the region.
        """
        cloudfront = self.cloudfront
        if cloudfront is not None:
            path = self.issuer_path
            return f"https://{cloudfront.domain}/{path}" if path else f"https://{cloudfront.domain}"
        return self.s3_endpoint(region)

    def s3_endpoint(self, region: str) -> str:
        """The XR's own bucket's regional virtual-hosted endpoint (the S3Public issuer)."""
        return f"https://{self.bucket}.s3.{region}.{partition_of(region).dns_suffix}"

    @property
    def shared_path(self) -> str:
        """The one path under a Shared distribution this XR may publish under."""
        return f"{self.namespace}/{self.cluster}"

    @property
    def issuer_path(self) -> str:
        """The issuer's path under its host ("" for none): the documents' key prefix."""
        cloudfront = self.cloudfront
        if cloudfront is None:
            return ""
        if cloudfront.path_prefix:
            return cloudfront.path_prefix
        return self.shared_path if cloudfront.shared else ""

    def issuer_key(self, name: str) -> str:
        """The object key of a discovery document (``keys.json``...) under the issuer's path."""
        path = self.issuer_path
        return f"{path}/{name}" if path else name

    @property
    def issuer_bucket(self) -> str:
        """The bucket the discovery documents are written to (Shared: the platform team's)."""
        cloudfront = self.cloudfront
        if cloudfront is not None and cloudfront.shared:
            return cloudfront.bucket
        return self.bucket

    def shared_path_problem(self) -> str | None:
        """Why a Shared distribution's ``pathPrefix`` may not be used, or None.

        Many tenants publish into one bucket behind one distribution: a tenant that
        could choose its path could overwrite another's JWKS and take over every role
        trusting that issuer. So the path is exactly ``<namespace>/<cluster>``, not
        merely under it: a deeper path gains nothing and invites the path tricks
        (``//``, percent-encoding) that S3, CloudFront and IAM each resolve their own way.
        """
        cloudfront = self.cloudfront
        if cloudfront is None or not cloudfront.shared or not cloudfront.path_prefix:
            return None
        if cloudfront.path_prefix != self.shared_path:
            return (
                f"{cloudfront.path_prefix!r} is not this ClusterPlugin's own path "
                f"{self.shared_path!r} (<namespace>/<cluster>): on a Shared distribution each "
                "cluster publishes only there, so no ClusterPlugin can replace another's keys; "
                "leave pathPrefix empty or set it to that"
            )
        return None

    @property
    def origin_access_control(self) -> str:
        """The CloudFront origin access control's name (64 characters at most, per account)."""
        return bounded(f"{self.prefix}irsa-{self.namespace}-{self.cluster}-{self.binding}", 64)

    def role(self, addon: str) -> str:
        """The IAM role name of ``addon``."""
        return bounded(
            f"{self.prefix}{self.namespace}-{self.cluster}-{addon}-{self.binding}", IAM_ROLE_MAX
        )

    def policy(self, addon: str) -> str:
        """The IAM policy name of ``addon`` (customer-managed policies)."""
        return bounded(
            f"{self.prefix}{self.namespace}-{self.cluster}-{addon}-{self.binding}", IAM_POLICY_MAX
        )

    def helm_provider_config(self, *, namespaced: bool) -> str:
        """The helm ProviderConfig name: per namespace when namespaced, cluster-wide otherwise."""
        if namespaced:
            return bounded(f"{self.cluster}-helm", K8S_NAME_MAX)
        return bounded(f"{self.namespace}-{self.cluster}-helm-{self.binding}", K8S_NAME_MAX)

    @property
    def kubeconfig_secret(self) -> str:
        """CAPI's kubeconfig Secret for the cluster."""
        return f"{self.cluster}-kubeconfig"

    @property
    def sa_secret(self) -> str:
        """CAPI's service-account key pair Secret for the cluster."""
        return f"{self.cluster}-sa"
