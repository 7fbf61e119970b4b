"""external-dns: a Route 53 policy for the listed zones only, role and chart.

See docs/architecture.md, "external-dns".

Built like the load balancer controller (custom policy, IRSA role, attachment,
Release), and safer than the upstream example in two ways:
- the policy names each hosted zone of ``hostedZoneIDs``; there is no
  ``hostedzone/*`` grant, so a cluster cannot touch another team's zones;
- ``txtOwnerId`` is derived from the XR's namespace and cluster, so two clusters
  sharing a zone never take over (or delete) each other's records, as they do
  with the chart's default owner "default".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from function.addons.kit import cni, iam
from function.addons.kit.helm import IRSA_ANNOTATION, release, service_account
from function.context import CallContext
from function.graph import Addon, CustomPolicy, Plugin, Release, Role, Usage
from function.names import Names, bounded
from function.policies import external_dns_policy
from function.spec_base import (
    DOMAIN_FILTER,
    DOMAIN_FILTER_MAX,
    HOSTED_ZONE_ID,
    HOSTED_ZONES_MAX,
    AddonSpec,
    check_hosted_zone_id,
)

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


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
    AfterValidator(check_hosted_zone_id),
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

RELEASE = Release(
    "external-dns-release",
    lambda charts: charts.external_dns,
    namespace="kube-system",
    name="external-dns",
    service_account="external-dns",
)


def _policy_document(ctx: CallContext, _versions: tuple[str, ...]) -> str:
    # The zones decide it, not the chart version.
    spec = ADDON.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    return external_dns_policy(tuple(spec.hosted_zone_ids), ctx.partition)


ROLE = Role(
    "external-dns-role",
    "external-dns",
    status_key="externalDNS",
    policy=CustomPolicy(
        "external-dns-policy",
        _policy_document,
        "external-dns: records in the ClusterPlugin's hostedZoneIDs only",
    ),
)
# external-dns flags the chart has no key for, set through its extraArgs map.
ZONE_ID_FILTER = "zone-id-filter"
ZONE_TYPE = "aws-zone-type"
ZONE_MATCH_PARENT = "aws-zone-match-parent"
OWNED = (
    ("provider", "name"),
    ("namespaceOverride",),
    ("serviceAccount", "name"),
    ("serviceAccount", "annotations", IRSA_ANNOTATION),
    ("txtOwnerId",),
    ("domainFilters",),
    ("policy",),
    ("extraArgs", ZONE_ID_FILTER),
    ("extraArgs", ZONE_TYPE),
    ("extraArgs", ZONE_MATCH_PARENT),
)
# external-dns writes "heritage=external-dns,external-dns/owner=<id>,external-dns/resource=
# <kind>/<namespace>/<name>" into one TXT string of at most 255 characters: 64 are fixed, and
# an owner of at most 32 leaves room for, e.g., gateway-httproute/<63>/<63>.
TXT_OWNER_ID_MAX = 32


def txt_owner_id(names: Names) -> str:
    """The TXT registry owner of this XR's records: unique per prefix, namespace and cluster.

    Stable (a pure function of the names), readable, and bound by the same hash of
    namespace/cluster as every derived name, so ``a-b/c`` and ``a/b-c`` differ.
    """
    return bounded(
        f"{names.prefix}{names.namespace}-{names.cluster}-{names.binding}", TXT_OWNER_ID_MAX
    )


def external_dns_release(ctx: CallContext) -> dict[str, Any]:
    """external-dns for Route 53, limited to the listed zones, with its own TXT owner id."""
    spec = ADDON.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    extra_args: dict[str, Any] = {
        # external-dns matches zone ids by suffix against "/hostedzone/<id>"; without
        # this it would list records of every zone it can see and fail on the others.
        ZONE_ID_FILTER: list(spec.hosted_zone_ids),
        # A domain filter below a zone's apex (apps.example.com in example.com) would
        # otherwise match no zone at all; the zones are pinned by id above, and the
        # filters still limit the records.
        ZONE_MATCH_PARENT: True,
    }
    if spec.zone_type is not None:
        extra_args[ZONE_TYPE] = spec.zone_type.value
    user = spec.values
    values: dict[str, Any] = {
        "provider": {"name": "aws"},
        # The trust policy names kube-system:external-dns: the ServiceAccount stays there.
        "namespaceOverride": RELEASE.namespace,
        "serviceAccount": service_account(RELEASE.service_account, iam.role_arn(ctx, ROLE)),
        # The chart has no region key; the AWS SDK reads it here (pods rarely reach IMDS).
        # The user's variables follow (spec.py refuses theirs for the region).
        "env": [{"name": "AWS_DEFAULT_REGION", "value": ctx.region}, *(user.get("env") or [])],
        "txtOwnerId": txt_owner_id(ctx.names),
        "domainFilters": list(spec.domain_filters),
        "policy": spec.policy.value,
        "extraArgs": extra_args,
    }
    return release(
        ctx,
        RELEASE,
        values=values,
        version=spec.version,
        # env is merged above (a list in the values would replace the function's).
        user_values={k: v for k, v in user.items() if k != "env"} if "env" in user else user,
    )


_RELEASE = RELEASE.as_node(external_dns_release, iam.release_gates(ROLE))


def plugin(ctx: CallContext) -> Plugin | None:
    """The external-dns plugin, when wanted."""
    spec = ADDON.spec(ctx.spec)
    return None if spec is None else iam.plugin(ctx, ADDON, _RELEASE, spec)


ADDON = Addon(
    "external-dns",
    plugin,
    spec_path="spec.dns.externalDNS",
    title="external-dns",
    release=RELEASE,
    role=ROLE,
    owned_values=OWNED,
    usages=(
        Usage(RELEASE.node, ROLE.node, "external-dns uses this role until it is uninstalled"),
        cni.needed_by(RELEASE.node, "external-dns needs the CNI until it is gone"),
        *iam.role_usages(ROLE, RELEASE.node),
    ),
)
