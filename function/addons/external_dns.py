"""external-dns (DESIGN section 10): a Route 53 policy for the listed zones only, role and chart.

Built like the load balancer controller (custom policy, IRSA role, attachment,
Release), and safer than the upstream example in two ways:
- the policy names each hosted zone of ``hostedZoneIDs``; there is no
  ``hostedzone/*`` grant, so a cluster cannot touch another team's zones;
- ``txtOwnerId`` is derived from the XR's namespace and cluster, so two clusters
  sharing a zone never take over (or delete) each other's records, as they do
  with the chart's default owner "default".
"""

from __future__ import annotations

import functools
from typing import Any

from function.addons.helm import IRSA_ANNOTATION, release, service_account
from function.addons.iam import custom_policy_role_nodes, custom_policy_usages, tags
from function.graph import (
    Addon,
    Ctx,
    Node,
    OwnedValues,
    Plugin,
    addon_release_gates,
)
from function.names import IAM_PATH, Names, bounded
from function.policies import external_dns_policy
from function.spec import IRSAMode

PLUGIN = "external-dns"
# The add-on's part of its IAM names and tags (names.role, names.policy).
IAM_NAME = "external-dns"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "external-dns"
RELEASE_NAME = "external-dns"
ROLE = "external-dns-role"
POLICY = "external-dns-policy"
RELEASE = "external-dns-release"
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


def policy(ctx: Ctx) -> dict[str, Any]:
    """The customer-managed policy: record changes in the listed hosted zones only."""
    spec = ctx.spec.dns.external_dns
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    return ctx.flavour.managed(
        "Policy",
        {
            "policy": external_dns_policy(tuple(spec.hosted_zone_ids), ctx.partition),
            "path": IAM_PATH,
            "description": "external-dns: records in the ClusterPlugin's hostedZoneIDs only",
            "tags": tags(ctx, IAM_NAME),
        },
        external_name=ctx.names.policy(IAM_NAME),
    )


def external_dns_release(ctx: Ctx) -> dict[str, Any]:
    """external-dns for Route 53, limited to the listed zones, with its own TXT owner id."""
    spec = ctx.spec.dns.external_dns
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    role_arn = None if ctx.irsa is IRSAMode.DISABLED else ctx.arn_of(ROLE)
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
        "namespaceOverride": NAMESPACE,
        "serviceAccount": service_account(SERVICE_ACCOUNT, role_arn),
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
        chart=ctx.step.charts.external_dns,
        version=spec.version,
        namespace=NAMESPACE,
        release_name=RELEASE_NAME,
        values=values,
        # env is merged above (a list in the values would replace the function's).
        user_values={k: v for k, v in user.items() if k != "env"} if "env" in user else user,
    )


@functools.cache  # two variants per process: the nodes are the module's constants
def _plugin(*, irsa: bool) -> Plugin:
    nodes: list[Node] = []
    if irsa:
        nodes += custom_policy_role_nodes(
            policy_node=POLICY,
            policy=policy,
            node=ROLE,
            addon=IAM_NAME,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
        )
    nodes.append(Node(RELEASE, external_dns_release, addon_release_gates(ROLE)))
    return Plugin(PLUGIN, tuple(nodes), role_key="externalDNS", role_node=ROLE)


def plugin(ctx: Ctx) -> Plugin | None:
    """The external-dns plugin, when wanted."""
    if ctx.spec.dns.external_dns is None:
        return None
    return _plugin(irsa=ctx.irsa is not IRSAMode.DISABLED)


ADDON = Addon(
    plugin,
    owned_values=(OwnedValues("spec.dns.externalDNS.values", lambda s: s.dns.external_dns, OWNED),),
    usages=(
        (RELEASE, ROLE, "external-dns uses this role until it is uninstalled"),
        (RELEASE, "cni-release", "external-dns needs the CNI until it is gone"),
        *custom_policy_usages(ROLE, POLICY),
    ),
)
