"""external-dns (``spec.dns.externalDNS``; docs/architecture.md, "external-dns"): zones, owner id, gates, FATALs.

The scenarios of tests/scenarios.py (external-dns*) also put it through the shared guards:
every composed resource against its CRD and the chart's values.schema.json
(test_schemas), helm renders with the role annotation on the trusted ServiceAccount
(test_helm), parliament and the trust rules (test_iam_lint), lifecycles without
deletions (test_lifecycle), fault schedules (test_faults). Here: what is particular to it.
Preflight's hosted-zone checks run against a moto server (tests/aws_helpers).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from crossplane.function import logging
from parliament import analyze_policy_string

from function.addons import external_dns
from function.names import PARTITIONS, Names
from function.policies import external_dns_policy
from function_tools.aws import preflight as pf
from function_tools.commands.aws import aws
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests import aws_helpers as h
from tests.kube_schema import validate_values
from tests.scenarios import EXAMPLES, Scenario, by_name, example, find, staged_control_plane

logging.configure(logging.Level.DISABLED)

# examples/external-dns/xr.yaml
ZONES = ["Z0123456789ABCDEFGHIJ", "Z1D633PJN98FT9"]
SUBJECT = "system:serviceaccount:kube-system:external-dns"
NODES = {
    "external-dns-policy",
    "external-dns-role",
    "external-dns-role-attachment",
    "external-dns-release",
}
USAGES = {
    "usage-external-dns-release-external-dns-role",
    "usage-external-dns-release-cni-release",
    "usage-external-dns-release-external-dns-role-attachment",
    "usage-external-dns-role-attachment-external-dns-role",
    "usage-external-dns-role-attachment-external-dns-policy",
    "usage-external-dns-role-irsa-oidc-provider",
}


def converged(scenario: Scenario | str, steps: int = 20) -> InMemoryCrossplane:
    s = by_name(scenario) if isinstance(scenario, str) else scenario
    world = s.world(staged=False)
    for rec in world.run(steps):
        assert rec.fatal is None, rec.fatal
    assert world.xr_ready, s.name
    assert not world.deletions
    return world


def for_provider(world: InMemoryCrossplane, node: str) -> dict[str, Any]:
    return world.composed[node].obj["spec"]["forProvider"]


def values_of(world: InMemoryCrossplane) -> dict[str, Any]:
    return for_provider(world, "external-dns-release")["values"]


def with_dns(**dns: Any) -> Callable[[dict[str, Any]], None]:
    """Mutate the example's spec.dns.externalDNS: keys given replace, None removes."""

    def mutate(xr: dict[str, Any]) -> None:
        spec = xr["spec"]["dns"]["externalDNS"]
        for k, v in dns.items():
            if v is None:
                spec.pop(k, None)
            else:
                spec[k] = v

    return mutate


def expected_policy(partition: str, zones: list[str]) -> dict[str, Any]:
    """The identity policy, written out by hand from the design (docs/architecture.md, "external-dns")."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ChangeRecordsInListedZones",
                "Effect": "Allow",
                "Action": [
                    "route53:ChangeResourceRecordSets",
                    "route53:ListResourceRecordSets",
                    "route53:ListTagsForResources",
                ],
                "Resource": [f"arn:{partition}:route53:::hostedzone/{z}" for z in zones],
            },
            {
                "Sid": "ListHostedZones",
                "Effect": "Allow",
                "Action": "route53:ListHostedZones",
                "Resource": "*",
            },
        ],
    }


# --- the composed resources ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "group_suffix", "usage_group"),
    [
        ("external-dns", ".m.upbound.io", "protection.crossplane.io"),
        ("external-dns-legacy-xr", ".upbound.io", "apiextensions.crossplane.io"),
        ("external-dns-legacy-xr-v1", ".upbound.io", "apiextensions.crossplane.io"),
    ],
)
def test_both_flavours_compose_policy_role_attachment_release_and_usages(
    name: str, group_suffix: str, usage_group: str
) -> None:
    world = converged(name)
    kinds = {n: world.composed[n].obj["kind"] for n in NODES}
    assert kinds == {
        "external-dns-policy": "Policy",
        "external-dns-role": "Role",
        "external-dns-role-attachment": "RolePolicyAttachment",
        "external-dns-release": "Release",
    }
    for node in NODES - {"external-dns-release"}:
        api = world.composed[node].obj["apiVersion"]
        assert api.startswith("iam.aws") and api.rpartition("/")[0].endswith(group_suffix), api
    release = world.composed["external-dns-release"].obj
    assert release["metadata"]["annotations"]["crossplane.io/external-name"] == "external-dns"
    assert release["spec"]["forProvider"]["namespace"] == "kube-system"
    assert release["spec"]["forProvider"]["chart"] == {
        "name": "external-dns",
        "repository": "https://kubernetes-sigs.github.io/external-dns",
        "version": "1.21.1",
    }
    names = Names("", "team-b", "web")
    assert (
        world.composed["external-dns-role"].obj["metadata"]["annotations"][
            "crossplane.io/external-name"
        ]
        == names.role("external-dns")
    )
    assert for_provider(world, "external-dns-role")["path"] == "/clusterplugin/"
    assert for_provider(world, "external-dns-policy")["path"] == "/clusterplugin/"
    # The role is attached to exactly the policy composed beside it.
    policy = world._observed_object(world.composed["external-dns-policy"])
    attachment = for_provider(world, "external-dns-role-attachment")
    assert attachment["policyArn"] == policy["status"]["atProvider"]["arn"]
    assert attachment["role"] == names.role("external-dns")
    # status.roleARNs.externalDNS is the observed role's ARN, which the chart gets.
    role = world._observed_object(world.composed["external-dns-role"])
    arn = role["status"]["atProvider"]["arn"]
    assert world.xr["status"]["roleARNs"]["externalDNS"] == arn
    assert values_of(world)["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"] == arn
    usages = {n for n in world.composed if n.startswith("usage-external-dns")}
    assert usages == USAGES
    assert {world.composed[u].obj["apiVersion"].rpartition("/")[0] for u in usages} == {
        usage_group
    }


def test_usages_delete_the_release_first_then_attachment_role_and_policy() -> None:
    world = converged("external-dns")
    by_of = set()
    for u in USAGES:
        spec = world.composed[u].obj["spec"]
        ref = {n: world.composed[n].obj["metadata"]["name"] for n in world.composed}
        by = next(n for n, m in ref.items() if m == spec["by"]["resourceRef"]["name"])
        of = next(n for n, m in ref.items() if m == spec["of"]["resourceRef"]["name"])
        by_of.add((by, of))
    assert by_of == {
        ("external-dns-release", "external-dns-role"),
        ("external-dns-release", "cni-release"),
        ("external-dns-release", "external-dns-role-attachment"),
        ("external-dns-role-attachment", "external-dns-role"),
        ("external-dns-role-attachment", "external-dns-policy"),
        ("external-dns-role", "irsa-oidc-provider"),
    }


@pytest.mark.parametrize(
    ("name", "partition"),
    [
        ("external-dns", "aws"),
        ("external-dns-legacy-xr", "aws"),
        ("external-dns-china", "aws-cn"),
        ("external-dns-govcloud", "aws-us-gov"),
    ],
)
def test_the_policy_is_exactly_the_listed_zones_in_the_partition(name: str, partition: str) -> None:
    world = converged(name)
    text = for_provider(world, "external-dns-policy")["policy"]
    assert json.loads(text) == expected_policy(partition, ZONES)
    assert "hostedzone/*" not in text
    assert re.findall(r"arn:([a-z-]+):", text) == [partition] * len(ZONES)
    # ... and external-dns is told the same zones, in the same region.
    values = values_of(world)
    assert values["extraArgs"]["zone-id-filter"] == ZONES
    region = world.xr["spec"]["region"]
    assert values["env"][0] == {"name": "AWS_DEFAULT_REGION", "value": region}
    if partition != "aws":
        # The issuer (and so the trust) is in the partition too.
        assert world.xr["status"]["issuerURL"].endswith(
            ".amazonaws.com.cn" if partition == "aws-cn" else ".amazonaws.com"
        )
        assert f".s3.{region}." in world.xr["status"]["issuerURL"]


def test_an_external_issuer_trusts_the_chart_service_account() -> None:
    """EKS (External IRSA): the role trusts the cluster's provider (the AWSManagedControlPlane's,
    the example names none) for kube-system:external-dns."""
    world = converged("external-eks-dns")
    provider = find(world.required, "AWSManagedControlPlane")["status"]["oidcProvider"]["arn"]
    assert world.xr["status"]["oidcProviderARN"] == provider
    trust = json.loads(for_provider(world, "external-dns-role")["assumeRolePolicy"])
    issuer = provider.split(":oidc-provider/", 1)[1]
    assert world.xr["status"]["issuerURL"] == f"https://{issuer}"
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Federated": provider}
    assert statement["Condition"] == {
        "StringEquals": {f"{issuer}:sub": SUBJECT, f"{issuer}:aud": "sts.amazonaws.com"}
    }
    assert json.loads(for_provider(world, "external-dns-policy")["policy"]) == expected_policy(
        "aws", ["Z0123456789ABC"]
    )
    assert "irsa-oidc-provider" not in world.composed
    assert "usage-external-dns-role-irsa-oidc-provider" not in world.composed


@pytest.mark.parametrize("name", ["external-dns", "external-dns-legacy-xr", "external-dns-china"])
def test_the_trust_names_the_service_account_the_chart_creates(name: str) -> None:
    world = converged(name)
    trust = json.loads(for_provider(world, "external-dns-role")["assumeRolePolicy"])
    issuer = world.xr["status"]["issuerURL"].removeprefix("https://")
    (statement,) = trust["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Principal"] == {"Federated": world.xr["status"]["oidcProviderARN"]}
    assert statement["Condition"] == {
        "StringEquals": {f"{issuer}:sub": SUBJECT, f"{issuer}:aud": "sts.amazonaws.com"}
    }
    values = values_of(world)
    release = for_provider(world, "external-dns-release")
    # The chart puts its ServiceAccount in namespaceOverride, else the release's namespace.
    namespace = values.get("namespaceOverride") or release["namespace"]
    assert f"system:serviceaccount:{namespace}:{values['serviceAccount']['name']}" == SUBJECT


def test_without_irsa_there_is_no_role_and_no_annotation() -> None:
    world = converged("external-dns-irsa-disabled")
    assert {n for n in world.composed if n.startswith("external-dns")} == {"external-dns-release"}
    assert "annotations" not in values_of(world)["serviceAccount"]
    assert "externalDNS" not in world.xr["status"].get("roleARNs", {})


# --- policy document -------------------------------------------------------------------


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
@pytest.mark.parametrize("count", [1, 2, 50])
def test_parliament_finds_nothing_in_the_policy(partition: str, count: int) -> None:
    zones = tuple(f"Z{i:013d}" for i in range(count))
    doc = external_dns_policy(zones, PARTITIONS[partition])
    assert [f"{f.issue}: {f.detail}" for f in analyze_policy_string(doc).findings] == []


def test_parliament_would_flag_the_upstream_wildcard_grant() -> None:
    """Control: the check above can fail (a record change on every resource is a finding)."""
    doc = json.loads(external_dns_policy(("Z1",), PARTITIONS["aws"]))
    doc["Statement"][0]["Resource"] = "*"
    assert any(f.issue == "RESOURCE_STAR" for f in analyze_policy_string(json.dumps(doc)).findings)


def test_fifty_longest_zone_ids_fit_a_managed_policy() -> None:
    zones = tuple("Z" + f"{i:02d}" + "A" * 29 for i in range(50))
    assert all(len(z) == 32 for z in zones)
    for partition in PARTITIONS.values():
        doc = external_dns_policy(zones, partition)
        # IAM counts characters without whitespace: a managed policy holds 6,144.
        assert len(re.sub(r"\s", "", doc)) <= 6144, (partition.name, len(doc))


def test_no_zones_is_never_a_policy() -> None:
    with pytest.raises(ValueError, match="at least one hosted zone"):
        external_dns_policy((), PARTITIONS["aws"])


# --- values ----------------------------------------------------------------------------


def test_values_validate_against_the_chart_schema_and_carry_what_the_function_owns() -> None:
    extra = {
        "interval": "2m",
        "sources": ["service", "ingress", "gateway-httproute"],
        "extraArgs": {"aws-batch-change-size": 500},
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}],
    }
    world = converged(Scenario("dns-values", "external-dns", mutate_xr=with_dns(values=extra)))
    values = values_of(world)
    assert validate_values("external-dns", values, "1.21.1") == []
    assert values["provider"] == {"name": "aws"}
    assert values["serviceAccount"]["name"] == "external-dns"
    assert values["txtOwnerId"] == external_dns.txt_owner_id(Names("", "team-b", "web"))
    assert values["domainFilters"] == ["apps.example.com", "example.org"]
    assert values["policy"] == "sync"
    assert values["extraArgs"] == {
        "zone-id-filter": ZONES,
        "aws-zone-type": "public",
        "aws-zone-match-parent": True,
        "aws-batch-change-size": 500,
    }
    # The function's region first, the user's variables after it.
    assert values["env"] == [
        {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"},
        {"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"},
    ]
    assert values["interval"] == "2m"
    assert values["sources"] == extra["sources"]


def test_the_defaults_upsert_only_and_no_zone_type_validate_too() -> None:
    scenario = Scenario(
        "dns-defaults",
        "external-dns",
        mutate_xr=with_dns(policy=None, zoneType=None, domainFilters=None),
    )
    values = values_of(converged(scenario))
    assert values["policy"] == "upsert-only"
    assert values["domainFilters"] == []
    assert "aws-zone-type" not in values["extraArgs"]
    assert validate_values("external-dns", values, "1.21.1") == []
    # A broken copy is refused by the same schema: the check above can fail.
    assert validate_values("external-dns", {**values, "policy": "delete"}, "1.21.1")


# --- the TXT owner id --------------------------------------------------------------------


def _in(namespace: str) -> Scenario:
    def xr(obj: dict[str, Any]) -> None:
        obj["metadata"]["namespace"] = namespace

    def required(objs: list[dict[str, Any]]) -> None:
        for o in objs:
            o["metadata"]["namespace"] = namespace

    return Scenario(f"web-in-{namespace}", "external-dns", mutate_xr=xr, mutate_required=required)


def test_txt_owner_id_differs_for_clusters_of_one_name_in_two_namespaces() -> None:
    owners = {}
    for namespace in ("team-b", "team-c"):
        world = converged(_in(namespace))
        first = values_of(world)["txtOwnerId"]
        world.run(3)  # stable: the same on every reconcile
        assert values_of(world)["txtOwnerId"] == first
        owners[namespace] = first
    assert owners["team-b"] != owners["team-c"]
    for owner in owners.values():
        assert re.fullmatch(r"[a-z0-9-]{1,32}", owner), owner


def test_txt_owner_id_is_bounded_and_unambiguous() -> None:
    # namespace and cluster joined by '-' alone would be the same for both.
    assert external_dns.txt_owner_id(Names("", "a-b", "c")) != external_dns.txt_owner_id(
        Names("", "a", "b-c")
    )
    assert external_dns.txt_owner_id(Names("acme-", "team-b", "web")).startswith("acme-team-b-web-")
    long_ns, long_cluster = "n" * 63, "c" * 63
    a = external_dns.txt_owner_id(Names("", long_ns, long_cluster))
    b = external_dns.txt_owner_id(Names("", long_ns, long_cluster[:-1] + "d"))
    assert len(a) == len(b) == external_dns.TXT_OWNER_ID_MAX
    assert a != b
    # The TXT string external-dns writes still fits 255 characters for a route of the longest
    # namespace and name.
    resource = f"gateway-httproute/{'x' * 63}/{'y' * 63}"
    txt = f"heritage=external-dns,external-dns/owner={a},external-dns/resource={resource}"
    assert len(txt) <= 255


# --- gates -------------------------------------------------------------------------------


def test_the_release_waits_for_available_cni_ccm_webhook_and_its_role() -> None:
    world = by_name("external-dns").world()
    first: dict[str, int] = {}
    ready: dict[str, int] = {}
    available_at = 9
    for rec in world.run(25, before=staged_control_plane(initialized_at=3, available_at=available_at)):
        assert rec.fatal is None, rec.fatal
        for name in rec.created:
            first.setdefault(name, rec.step)
        for name, c in world.composed.items():
            if c.ready:
                ready.setdefault(name, rec.step + 1)
    assert world.xr_ready
    release = first["external-dns-release"]
    for dep in (
        "cni-release",
        "ccm-release",
        "pod-identity-webhook-release",
        "external-dns-role",
        "external-dns-role-attachment",
    ):
        assert release >= ready[dep], f"external-dns-release at {release}, {dep} ready at {ready[dep]}"
    assert release >= available_at
    # The role and policy come with the other roles, once the OIDC provider is ready.
    assert first["external-dns-role"] >= ready["irsa-oidc-provider"]
    assert first["external-dns-policy"] >= ready["irsa-oidc-provider"]
    assert first["external-dns-role-attachment"] >= ready["external-dns-policy"]


def test_status_says_what_external_dns_waits_for() -> None:
    world = by_name("external-dns").world()
    world.run(4)
    plugin = next(p for p in world.xr["status"]["plugins"] if p["name"] == "external-dns")
    assert plugin["phase"] in {"Pending", "Installing"}
    assert plugin["waitingFor"]


# --- removing it ------------------------------------------------------------------------------


def test_removing_external_dns_deletes_exactly_its_nodes_and_role_arn() -> None:
    world = converged("external-dns")
    before = set(world.composed)
    del world.xr["spec"]["dns"]
    world.run(18)
    gone = before - set(world.composed)
    assert gone == NODES | USAGES
    assert {name for _, name in world.deletions} == gone
    assert "externalDNS" not in world.xr["status"]["roleARNs"]
    assert "loadBalancerController" in world.xr["status"]["roleARNs"]
    assert world.xr_ready


# --- bad input: one FATAL naming the field, nothing applied ---------------------------------

BAD: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no hostedZoneIDs", with_dns(hostedZoneIDs=None), "spec.dns.externalDNS.hostedZoneIDs: is required"),
    ("empty hostedZoneIDs", with_dns(hostedZoneIDs=[]), "spec.dns.externalDNS.hostedZoneIDs: must list"),
    ("malformed zone id", with_dns(hostedZoneIDs=["Z0123456789ABC", "example.com"]), "spec.dns.externalDNS.hostedZoneIDs[1]: 'example.com' is not a Route 53 hosted zone id"),
    ("/hostedzone/ prefix", with_dns(hostedZoneIDs=["/hostedzone/Z0123456789ABC"]), "spec.dns.externalDNS.hostedZoneIDs[0]: "),
    ("zone listed twice", with_dns(hostedZoneIDs=ZONES + ZONES[:1]), "spec.dns.externalDNS.hostedZoneIDs[2]: "),
    ("bad domain filter", with_dns(domainFilters=["*.example.com"]), "spec.dns.externalDNS.domainFilters[0]: "),
    ("bad policy", with_dns(policy="delete"), "spec.dns.externalDNS.policy: must be one of"),
    ("bad zone type", with_dns(zoneType="Public"), "spec.dns.externalDNS.zoneType: must be one of"),
    ("owned txtOwnerId", with_dns(values={"txtOwnerId": "default"}), "spec.dns.externalDNS.values.txtOwnerId: is set by the function"),
    ("owned provider", with_dns(values={"provider": {"name": "google"}}), "spec.dns.externalDNS.values.provider.name: "),
    ("provider as a string", with_dns(values={"provider": "aws"}), "spec.dns.externalDNS.values.provider: must be an object"),
    ("owned service account", with_dns(values={"serviceAccount": {"name": "default"}}), "spec.dns.externalDNS.values.serviceAccount.name: "),
    ("owned namespace", with_dns(values={"namespaceOverride": "dns"}), "spec.dns.externalDNS.values.namespaceOverride: "),
    ("owned domain filters", with_dns(values={"domainFilters": ["evil.com"]}), "spec.dns.externalDNS.values.domainFilters: "),
    ("owned policy", with_dns(values={"policy": "sync"}), "spec.dns.externalDNS.values.policy: "),
    ("owned zone filter", with_dns(values={"extraArgs": {"zone-id-filter": ["Z9"]}}), "spec.dns.externalDNS.values.extraArgs.zone-id-filter: "),
    ("extraArgs as a list", with_dns(values={"extraArgs": ["--zone-id-filter=Z9"]}), "spec.dns.externalDNS.values.extraArgs: must be an object"),
    ("owned region", with_dns(values={"env": [{"name": "X", "value": "1"}, {"name": "AWS_REGION", "value": "eu-west-1"}]}), "spec.dns.externalDNS.values.env[1].name: AWS_REGION is set by the function"),
    ("env not a list", with_dns(values={"env": {"AWS_REGION": "x"}}), "spec.dns.externalDNS.values.env: must be a list"),
]


@pytest.mark.parametrize(("case", "mutate", "fatal"), BAD, ids=[c for c, _, _ in BAD])
def test_bad_input_is_one_fatal_naming_the_field_and_nothing_is_applied(
    case: str, mutate: Callable[[dict[str, Any]], None], fatal: str
) -> None:
    world = Scenario(case, "external-dns", mutate_xr=mutate).world(staged=False)
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith(fatal), rec.fatal
    assert rec.response is not None
    assert len(rec.response.results) == 1
    assert world.composed == {}
    assert not rec.response.desired.resources


def test_a_fatal_later_keeps_what_exists() -> None:
    """A bad edit to a running XR is refused; Crossplane keeps the composed resources."""
    world = converged("external-dns")
    before = copy.deepcopy(world.composed)
    world.xr["spec"]["dns"]["externalDNS"]["hostedZoneIDs"] = []
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith("spec.dns.externalDNS.hostedZoneIDs")
    assert set(world.composed) == set(before)
    assert not world.deletions


# --- aws preflight: the hosted zones ---------------------------------------------------------


@pytest.fixture(scope="module")
def moto() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


def _zone(clients: pf.Clients, name: str, *, private: bool = False, vpc: str = "") -> str:
    extra: dict[str, Any] = {}
    if private:
        extra = {
            "HostedZoneConfig": {"PrivateZone": True},
            "VPC": {"VPCRegion": "us-east-1", "VPCId": vpc},
        }
    zone = clients.route53.create_hosted_zone(Name=name, CallerReference=name, **extra)
    return str(zone["HostedZone"]["Id"]).removeprefix("/hostedzone/")


def _world(moto: h.MotoServer) -> tuple[pf.Clients, h.Network]:
    moto.reset()
    clients = h.make_clients(moto.endpoint)
    return clients, h.make_network(clients.ec2)


def _checks(report: pf.Report) -> dict[str, pf.Check]:
    return {c.name: c for c in report.checks}


def test_preflight_passes_when_the_zones_exist_and_are_public(moto: h.MotoServer) -> None:
    clients, network = _world(moto)
    zones = [_zone(clients, "example.com"), _zone(clients, "example.org")]
    assert all(re.fullmatch(r"Z[A-Z0-9]{20}", z) for z in zones), zones
    target = h.target_of("external-dns", network.groups, mutate_xr=with_dns(hostedZoneIDs=zones))
    h.open_ports(clients.ec2, target, network.groups)
    composed = h.compose(clients, target, public_pem=target.public_pem or b"")
    assert set(composed.roles) == {"vpc-cni", "lbc", "external-dns"}
    report = pf.run(target, clients, pf.Phase.AFTER)
    problems = {c.name: c.message for c in report.checks if c.status is not pf.Status.PASS}
    assert problems == {}
    checks = _checks(report)
    assert checks[f"dns/zone/{zones[0]}"].message == f"public hosted zone example.com. ({zones[0]}) exists"
    assert checks["dns/domain-filters"].message == "every domain filter lies in a listed zone"
    # The external-dns role was checked like the others: trust and exactly its policy.
    assert "trusts only system:serviceaccount:kube-system:external-dns" in checks["role/external-dns"].message
    assert composed.policy_arns["external-dns"] in checks["role/external-dns/policies"].message


def test_preflight_fails_a_missing_zone_and_says_how_to_find_the_ids(moto: h.MotoServer) -> None:
    clients, network = _world(moto)
    present = _zone(clients, "example.com")
    missing = "Z0NOTINTHISACCOUNT00"
    target = h.target_of(
        "external-dns", network.groups, mutate_xr=with_dns(hostedZoneIDs=[present, missing])
    )
    checks = _checks(pf.run(target, clients, pf.Phase.BEFORE))
    assert checks[f"dns/zone/{present}"].status is pf.Status.PASS
    bad = checks[f"dns/zone/{missing}"]
    assert bad.status is pf.Status.FAIL
    assert bad.message.startswith(f"hosted zone {missing} (spec.dns.externalDNS.hostedZoneIDs) does not exist in account {h.ACCOUNT}")
    assert "aws route53 list-hosted-zones" in bad.fix
    # The filters are not judged against a zone that could not be read.
    assert "dns/domain-filters" not in checks


def test_preflight_fails_a_private_zone_when_public_is_expected(moto: h.MotoServer) -> None:
    clients, network = _world(moto)
    public = _zone(clients, "example.com")
    private = _zone(clients, "example.org", private=True, vpc=network.vpc)
    target = h.target_of(
        "external-dns", network.groups, mutate_xr=with_dns(hostedZoneIDs=[public, private])
    )
    checks = _checks(pf.run(target, clients, pf.Phase.BEFORE))
    bad = checks[f"dns/zone/{private}"]
    assert bad.status is pf.Status.FAIL
    assert "is private, but spec.dns.externalDNS.zoneType is public" in bad.message
    assert "list-hosted-zones-by-name --dns-name example.org." in bad.fix
    # Expecting private zones turns it around; no zoneType accepts both.
    for zone_type, failing in (("private", public), (None, None)):
        target = h.target_of(
            "external-dns",
            network.groups,
            mutate_xr=with_dns(hostedZoneIDs=[public, private], zoneType=zone_type),
        )
        checks = _checks(pf.run(target, clients, pf.Phase.BEFORE))
        failed = {n for n, c in checks.items() if n.startswith("dns/") and c.status is pf.Status.FAIL}
        assert failed == ({f"dns/zone/{failing}"} if failing else set())
    assert checks[f"dns/zone/{private}"].message.startswith("private hosted zone example.org.")


def test_preflight_warns_of_a_domain_filter_in_no_listed_zone(moto: h.MotoServer) -> None:
    clients, network = _world(moto)
    zones = [_zone(clients, "example.com"), _zone(clients, "example.org")]
    target = h.target_of(
        "external-dns",
        network.groups,
        mutate_xr=with_dns(hostedZoneIDs=zones, domainFilters=["apps.example.com", ".example.net", "org"]),
    )
    check = _checks(pf.run(target, clients, pf.Phase.BEFORE))["dns/domain-filters"]
    assert check.status is pf.Status.WARN
    # apps.example.com lies in example.com, example.org in "org"; .example.net in neither.
    assert check.message.startswith("domain filter .example.net lie")
    assert "external-dns manages no record for it" in check.message


def test_preflight_cli_prints_the_missing_zones_of_the_example(moto: h.MotoServer) -> None:
    """What a person sees when the example's zones are not in the account (printed in full)."""
    moto.reset()
    example_dir = EXAMPLES / "external-dns"
    result = CliRunner().invoke(
        aws,
        [
            "preflight",
            str(example_dir / "xr.yaml"),
            "--required",
            str(example_dir / "required"),
            "--endpoint-url",
            moto.endpoint,
            "--phase",
            "before",
        ],
        env={"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
    )
    print(result.output)  # what the report shows (pytest -s)
    assert result.exit_code == 1, result.output
    xr, _ = example("external-dns")
    for zone in xr["spec"]["dns"]["externalDNS"]["hostedZoneIDs"]:
        line = next(ln for ln in result.output.splitlines() if f"dns/zone/{zone}" in ln)
        assert line.startswith("FAIL"), line
        assert f"hosted zone {zone} (spec.dns.externalDNS.hostedZoneIDs) does not exist" in line
    assert "fix: list the zones' ids with aws route53 list-hosted-zones" in result.output
