"""Every command refuses what the function refuses, with the function's own words.

One table holds every FATAL the function gives on its input (each validator of
``function/spec.py``, each rule of ``function/accept.py``, each add-on's owned
values and cluster problem). Each case is fed to the function (``render``'s
in-process call), then to ``render``, ``simulate``, ``issuer`` and ``aws
preflight`` (and, when the step input alone is bad, ``aws provider-policy``):
each must exit non-zero and print exactly the function's message. The expected
field and words are written here by hand, so a message that changes or a
refusal that disappears fails the test.

Cases ``by_commands`` are the commands' own: files that cannot be read as
Kubernetes objects, and cluster objects the function would not read as the XR's
cluster's (another cluster's, another apiVersion's). Every command refuses them
with exit code 2, in one line naming the file. Every refusal is one line, without
a traceback.
"""

from __future__ import annotations

import asyncio
import copy
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function_tools import input_files, render
from function_tools.cli import cli
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import AGENT_CHART

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

Change = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    """One refused XR or step input, and the start of the function's FATAL message."""

    id: str
    expected: str  # "<field>: <words>", the start of the message (or of one of its problems)
    spec: dict[str, Any] = field(default_factory=dict)  # merged into the example's spec
    change: Change | None = None  # or any other change of the XR
    step_input: dict[str, Any] | None = None
    example: str = "selfhosted-full"
    # The step input is bad by itself (``aws provider-policy`` reads only that).
    input_alone: bool = False
    also: tuple[str, ...] = ()  # further problems said in the same message
    # A change of the example's cluster objects (required/), e.g. of its control plane.
    change_required: Callable[[list[dict[str, Any]]], None] | None = None
    # The commands refuse it, not the function: ``expected`` is their message after
    # "Error: ", with {tmp} (the test's directory) and {examples} filled in.
    by_commands: bool = False
    # A change of the arguments every command is given (a file put in place of one).
    args: Callable[[Path, list[str]], list[str]] | None = None
    only: tuple[str, ...] = ()  # the commands the case applies to (default: all)

    def required(self) -> list[dict[str, Any]]:
        objs = input_files.load_documents([EXAMPLES / self.example / "required"])
        if self.change_required is not None:
            objs = copy.deepcopy(objs)
            self.change_required(objs)
        return objs

    def xr(self) -> dict[str, Any]:
        xr = input_files.load_one(EXAMPLES / self.example / "xr.yaml", "XR")
        xr["spec"].update(copy.deepcopy(self.spec))
        if self.change is not None:
            self.change(xr)
        return xr


def _pop(*path: str) -> Change:
    def change(xr: dict[str, Any]) -> None:
        obj = xr
        for key in path[:-1]:
            obj = obj[key]
        obj.pop(path[-1])

    return change


def _set(value: Any, *path: str) -> Change:
    def change(xr: dict[str, Any]) -> None:
        obj = xr
        for key in path[:-1]:
            obj = obj.setdefault(key, {})
        obj[path[-1]] = value

    return change


def _eks_addon(name: str) -> Callable[[list[dict[str, Any]]], None]:
    """CAPA's eks-ipv6 and eks-managedmachinepool-vpccni flavours: EKS manages ``name``."""

    def change(required: list[dict[str, Any]]) -> None:
        for obj in required:
            if obj["kind"] == "AWSManagedControlPlane":
                obj["spec"].setdefault("addons", []).append({"name": name, "version": "v1.19.2-eksbuild.1"})

    return change


def _rosa_control_plane_read(required: list[dict[str, Any]]) -> None:
    """The same with a ref by apiVersion, which the function asks for and reads."""
    _rosa_control_plane(required)
    for obj in required:
        if obj["kind"] == "Cluster":
            ref = obj["spec"]["controlPlaneRef"]
            del ref["apiGroup"]
            ref["apiVersion"] = "controlplane.cluster.x-k8s.io/v1beta2"
    required.append(
        {
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "ROSAControlPlane",
            "metadata": {"name": "demo-control-plane", "namespace": "team-a"},
            "spec": {"rosaClusterName": "demo", "region": "us-east-1"},
            "status": {"ready": True},
        }
    )


def _rosa_control_plane(required: list[dict[str, Any]]) -> None:
    """CAPA's rosa flavour: the Cluster's control plane a ROSAControlPlane (a v1beta2 ref)."""
    for obj in required:
        if obj["kind"] == "Cluster":
            obj["spec"]["controlPlaneRef"] = {
                "apiGroup": "controlplane.cluster.x-k8s.io",
                "kind": "ROSAControlPlane",
                "name": "demo-control-plane",
            }
    required[:] = [o for o in required if o["kind"] != "KubeadmControlPlane"]


def _no_oidc_provider(objs: list[dict[str, Any]]) -> None:
    cp = next(o for o in objs if o["kind"] == "AWSManagedControlPlane")
    cp["spec"].pop("associateOIDCProvider")
    cp["status"].pop("oidcProvider")


def _replace(xr: dict[str, Any]) -> None:
    xr.clear()
    xr["just"] = "json"


NOT_UTF8 = b"apiVersion: v1\nkind: \xff\xfe\n"


def _file(
    option: str, content: bytes, name: str = "bad.yaml"
) -> Callable[[Path, list[str]], list[str]]:
    """A file of ``content`` given as the XR (option "XR.yaml") or with ``option``."""

    def args(tmp: Path, argv: list[str]) -> list[str]:
        bad = tmp / name
        bad.write_bytes(content)
        if option == "XR.yaml":
            return [str(bad), *argv[1:]]
        return [*argv, option, str(bad)]

    return args


def _required_as(api_version: str) -> Callable[[Path, list[str]], list[str]]:
    """The example's cluster objects with its Cluster in ``api_version``."""

    def args(tmp: Path, argv: list[str]) -> list[str]:
        objs = input_files.load_documents([EXAMPLES / "selfhosted-full" / "required"])
        for obj in objs:
            if obj["kind"] == "Cluster":
                obj["apiVersion"] = api_version
        (tmp / "objects.yaml").write_text(yaml.safe_dump_all(objs))
        return [argv[0], "--required", str(tmp / "objects.yaml"), *argv[3:]]

    return args


# The example's Cluster API objects in the v1beta1 contract: its own Composition asks for that.
LEGACY_CLUSTER_API = {
    "cluster": "cluster.x-k8s.io/v1beta1",
    "kubeadmControlPlane": "controlplane.cluster.x-k8s.io/v1beta1",
}

def _no_agent_add_on(objs: list[dict[str, Any]]) -> None:
    cp = next(o for o in objs if o["kind"] == "AWSManagedControlPlane")
    cp["spec"].pop("addons")
    cp["status"].pop("addons")


DNS = {"hostedZoneIDs": ["Z0123456789ABC"]}
EXTERNAL = {
    "mode": "External",
    "issuerURL": "https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE",
    "oidcProviderARN": "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE",
}
CALICO_ONLY = {"networking": {"calico": {}}}
CERTIFICATE = "arn:aws:acm:us-east-1:111122223333:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
SHARED = {"distribution": "Shared", "domain": "oidc.example.com", "bucketName": "acme-oidc"}
MANAGED = {"distribution": "Managed", "domain": "oidc.example.com", "certificateArn": CERTIFICATE}


def _cloudfront(**fields: Any) -> dict[str, Any]:
    """A spec fragment: the issuer behind CloudFront with these cloudFront fields."""
    return {"irsa": {"hosting": {"type": "CloudFront", "cloudFront": fields}}}


def _issuer_in_use(url: str) -> Change:
    """The XR's status as the function wrote it once the issuer's OIDC provider existed."""
    host = url.removeprefix("https://")
    return _set(
        {
            "issuerURL": url,
            "oidcProviderARN": f"arn:aws:iam::111122223333:oidc-provider/{host}",
        },
        "status",
    )


# examples/selfhosted-full's S3Public issuer.
SELFHOSTED_ISSUER = "https://irsa-team-a-demo-1960e3.s3.us-east-1.amazonaws.com"


def _values(path: tuple[str, ...], values: dict[str, Any], base: Any = None) -> dict[str, Any]:
    """A spec fragment setting ``values`` on the add-on at ``path`` (spec keys)."""
    addon: dict[str, Any] = {"values": values}
    if base:
        addon.update(base)
    out: dict[str, Any] = addon
    for key in reversed(path):
        out = {key: out}
    return out


CASES = [
    # --- the spec's validators (function/spec.py) ---
    Case(
        "cluster-name-missing", "spec.clusterName: is required", change=_pop("spec", "clusterName")
    ),
    Case(
        "cluster-name-not-dns",
        "spec.clusterName: 'Demo' is not a Kubernetes name",
        {"clusterName": "Demo"},
    ),
    Case(
        "cluster-name-long",
        "spec.clusterName: String should have at most 63 characters",
        {"clusterName": "a" * 64},
    ),
    Case("region", "spec.region: 'mars-1' is not an AWS region", {"region": "mars-1"}),
    Case(
        "misspelled-field",
        "spec.netkworking: unknown field (did you mean networking?)",
        {"netkworking": {}},
    ),
    Case(
        "unknown-field",
        "spec.colour: unknown field (check the spelling against the ClusterPlugin schema)",
        {"colour": "blue"},
    ),
    Case(
        "two-cnis",
        "spec.networking: set at most one of amazonVPC and calico",
        {"networking": {"amazonVPC": {}, "calico": {}}},
    ),
    Case(
        "chart-version",
        "spec.storage.ebs.version: 'latest' is not a chart version",
        {"storage": {"ebs": {"version": "latest"}}},
    ),
    Case(
        "values-not-object",
        "spec.storage.ebs.values: must be an object of Helm values (got list)",
        {"storage": {"ebs": {"values": ["a"]}}},
    ),
    Case(
        "calico-encapsulation",
        "spec.networking.calico.encapsulation: must be one of 'IPIP', 'VXLAN' or 'None'",
        {"networking": {"calico": {"encapsulation": "GRE"}}},
    ),
    Case(
        "calico-cidr",
        "spec.networking.calico.cidr: '10.0.0.0' is not an IPv4 CIDR",
        {"networking": {"calico": {"cidr": "10.0.0.0"}}},
    ),
    Case(
        "efs-file-system",
        "spec.storage.efs.fileSystemId: 'vol-1' is not an EFS file system id",
        {"storage": {"efs": {"fileSystemId": "vol-1"}}},
    ),
    Case(
        "dns-zones-missing",
        "spec.dns.externalDNS.hostedZoneIDs: is required",
        {"dns": {"externalDNS": {}}},
    ),
    Case(
        "dns-zones-empty",
        "spec.dns.externalDNS.hostedZoneIDs: must list at least one hosted zone",
        {"dns": {"externalDNS": {"hostedZoneIDs": []}}},
    ),
    Case(
        "dns-zone-id",
        "spec.dns.externalDNS.hostedZoneIDs[0]: '/hostedzone/Z1' is not a Route 53 hosted zone id",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["/hostedzone/Z1"]}}},
    ),
    Case(
        "dns-zone-twice",
        "spec.dns.externalDNS.hostedZoneIDs[1]: 'Z1' is listed twice",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1", "Z1"]}}},
    ),
    Case(
        "dns-zones-too-many",
        "spec.dns.externalDNS.hostedZoneIDs: List should have at most 50 items",
        {"dns": {"externalDNS": {"hostedZoneIDs": [f"Z{i}" for i in range(51)]}}},
    ),
    Case(
        "dns-domain-filter",
        "spec.dns.externalDNS.domainFilters[0]: 'Example.com.' is not a DNS name",
        {"dns": {"externalDNS": {**DNS, "domainFilters": ["Example.com."]}}},
    ),
    Case(
        "dns-domain-filter-twice",
        "spec.dns.externalDNS.domainFilters[1]: 'a.com' is listed twice",
        {"dns": {"externalDNS": {**DNS, "domainFilters": ["a.com", "a.com"]}}},
    ),
    Case(
        "dns-policy",
        "spec.dns.externalDNS.policy: must be one of",
        {"dns": {"externalDNS": {**DNS, "policy": "delete-all"}}},
    ),
    Case(
        "dns-zone-type",
        "spec.dns.externalDNS.zoneType: must be one of",
        {"dns": {"externalDNS": {**DNS, "zoneType": "shared"}}},
    ),
    Case(
        "dns-env-not-list",
        "spec.dns.externalDNS.values.env: must be a list of environment variables",
        {"dns": {"externalDNS": {**DNS, "values": {"env": {"A": "b"}}}}},
    ),
    Case(
        "dns-env-owned",
        "spec.dns.externalDNS.values.env[0].name: AWS_REGION is set by the function",
        {
            "dns": {
                "externalDNS": {**DNS, "values": {"env": [{"name": "AWS_REGION", "value": "x"}]}}
            }
        },
    ),
    Case(
        "irsa-mode",
        "spec.irsa.mode: must be one of 'SelfHosted', 'External', 'PodIdentity' or 'Disabled'",
        {"irsa": {"mode": "Sometimes"}},
    ),
    Case(
        "bucket-name-s3",
        "spec.irsa.bucketName: 'my.bucket' may hold only lower-case letters",
        {"irsa": {"bucketName": "my.bucket"}},
    ),
    Case(
        "bucket-name-short",
        "spec.irsa.bucketName: 'ab' must be 3 to 63 characters long",
        {"irsa": {"bucketName": "ab"}},
    ),
    Case(
        "bucket-name-reserved",
        "spec.irsa.bucketName: 'xn--abc' uses a prefix or suffix S3 reserves",
        {"irsa": {"bucketName": "xn--abc"}},
    ),
    Case(
        "external-needs-issuer",
        "spec.irsa.issuerURL: is required with oidcProviderARN (or leave both out on EKS",
        {"irsa": {"mode": "External", "oidcProviderARN": EXTERNAL["oidcProviderARN"]}},
    ),
    Case(
        "issuer-only-external",
        "spec.irsa.issuerURL: is only allowed when mode is External (mode is SelfHosted)",
        {"irsa": {"issuerURL": "https://x.example.com"}},
    ),
    Case(
        "bucket-only-selfhosted",
        "spec.irsa.bucketName: is only allowed when mode is SelfHosted (mode is External)",
        {"irsa": {**EXTERNAL, "bucketName": "abc"}},
    ),
    Case(
        "hosting-only-selfhosted",
        "spec.irsa.hosting: is only allowed when mode is SelfHosted (mode is External)",
        {"irsa": {**EXTERNAL, "hosting": {"type": "CloudFront", "cloudFront": SHARED}}},
    ),
    Case(
        "hosting-type",
        "spec.irsa.hosting.type: must be one of 'S3Public' or 'CloudFront'",
        {"irsa": {"hosting": {"type": "Akamai"}}},
    ),
    Case(
        "cloudfront-missing",
        "spec.irsa.hosting.cloudFront: is required when type is CloudFront",
        {"irsa": {"hosting": {"type": "CloudFront"}}},
    ),
    Case(
        "cloudfront-without-type",
        "spec.irsa.hosting.cloudFront: is only allowed when type is CloudFront (type is S3Public)",
        {"irsa": {"hosting": {"cloudFront": SHARED}}},
    ),
    Case(
        "cloudfront-distribution-missing",
        "spec.irsa.hosting.cloudFront.distribution: is required",
        _cloudfront(domain="oidc.example.com", bucketName="acme-oidc"),
    ),
    Case(
        "cloudfront-domain-missing",
        "spec.irsa.hosting.cloudFront.domain: is required",
        _cloudfront(distribution="Shared", bucketName="acme-oidc"),
    ),
    Case(
        "cloudfront-domain",
        "spec.irsa.hosting.cloudFront.domain: 'https://oidc.example.com' is not a host name",
        _cloudfront(**{**SHARED, "domain": "https://oidc.example.com"}),
    ),
    Case(
        "cloudfront-path",
        "spec.irsa.hosting.cloudFront.pathPrefix: 'issuers/../team-b' is not a path",
        _cloudfront(**{**MANAGED, "pathPrefix": "issuers/../team-b"}),
    ),
    Case(
        "shared-bucket-missing",
        "spec.irsa.hosting.cloudFront.bucketName: is required when distribution is Shared",
        _cloudfront(distribution="Shared", domain="oidc.example.com"),
    ),
    Case(
        "shared-bucket-name",
        "spec.irsa.hosting.cloudFront.bucketName: 'Acme' may hold only lower-case letters",
        _cloudfront(**{**SHARED, "bucketName": "Acme"}),
    ),
    Case(
        "shared-with-certificate",
        "spec.irsa.hosting.cloudFront.certificateArn: is only allowed when distribution is "
        "Managed (distribution is Shared)",
        _cloudfront(**SHARED, certificateArn=CERTIFICATE),
    ),
    Case(
        "shared-with-zone",
        "spec.irsa.hosting.cloudFront.hostedZoneId: is only allowed when distribution is Managed",
        _cloudfront(**SHARED, hostedZoneId="Z0123456789ABC"),
    ),
    Case(
        "shared-irsa-bucket-name",
        "spec.irsa.bucketName: is not used with a Shared CloudFront distribution",
        {"irsa": {"bucketName": "x-1960e37ce9a93a17", **_cloudfront(**SHARED)["irsa"]}},
    ),
    Case(
        "shared-other-tenants-path",
        "spec.irsa.hosting.cloudFront.pathPrefix: 'team-b/web' is not this ClusterPlugin's own "
        "path 'team-a/demo'",
        _cloudfront(**SHARED, pathPrefix="team-b/web"),
    ),
    Case(
        "shared-deeper-path",
        "spec.irsa.hosting.cloudFront.pathPrefix: 'team-a/demo/v2' is not this ClusterPlugin's "
        "own path",
        _cloudfront(**SHARED, pathPrefix="team-a/demo/v2"),
    ),
    Case(
        "shared-bucket-region",
        "spec.irsa.hosting.cloudFront.bucketRegion: 'eu' is not an AWS region",
        _cloudfront(**SHARED, bucketRegion="eu"),
    ),
    Case(
        "shared-bucket-in-china",
        "spec.irsa.hosting.cloudFront.bucketRegion: cn-north-1 is in aws-cn: CloudFront in aws-cn "
        "serves only ICP-recorded domains",
        _cloudfront(**SHARED, bucketRegion="cn-north-1"),
    ),
    Case(
        "managed-certificate-missing",
        "spec.irsa.hosting.cloudFront.certificateArn: is required when distribution is Managed",
        _cloudfront(distribution="Managed", domain="oidc.example.com"),
    ),
    Case(
        "managed-certificate-not-acm",
        "spec.irsa.hosting.cloudFront.certificateArn: 'arn:aws:iam::111122223333:server-"
        "certificate/oidc' is not an ACM certificate ARN",
        _cloudfront(
            **{**MANAGED, "certificateArn": "arn:aws:iam::111122223333:server-certificate/oidc"}
        ),
    ),
    Case(
        "managed-certificate-region",
        "spec.irsa.hosting.cloudFront.certificateArn: 'arn:aws:acm:eu-west-1:111122223333:"
        "certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d' is in eu-west-1: CloudFront uses ACM "
        "certificates in us-east-1 only",
        _cloudfront(**{**MANAGED, "certificateArn": CERTIFICATE.replace("us-east-1", "eu-west-1")}),
    ),
    Case(
        "managed-with-bucket",
        "spec.irsa.hosting.cloudFront.bucketName: is only allowed when distribution is Shared "
        "(distribution is Managed)",
        _cloudfront(**MANAGED, bucketName="acme-oidc"),
    ),
    Case(
        "managed-zone",
        "spec.irsa.hosting.cloudFront.hostedZoneId: 'example.com' is not a Route 53 hosted zone id",
        _cloudfront(**MANAGED, hostedZoneId="example.com"),
    ),
    Case(
        "managed-price-class",
        "spec.irsa.hosting.cloudFront.priceClass: must be one of",
        _cloudfront(**MANAGED, priceClass="Cheap"),
    ),
    Case(
        "cloudfront-issuer-too-long",
        "spec.irsa.hosting.cloudFront: the issuer https://",
        _cloudfront(**{**SHARED, "domain": ".".join(["a" * 62] * 4)}),
    ),
    Case(
        "cert-manager-mode",
        "spec.irsa.podIdentityWebhook.certManager: must be one of 'Install' or 'Existing'",
        {"irsa": {"podIdentityWebhook": {"certManager": "Maybe"}}},
    ),
    Case(
        "sg-mode",
        "spec.securityGroups.manage: must be one of 'Auto', 'Always' or 'Never'",
        {"securityGroups": {"manage": "Sometimes"}},
    ),
    # --- the rules of function/accept.py ---
    Case(
        "bucket-name-binding",
        "spec.irsa.bucketName: 'acme-irsa-demo' must end with '-1960e37ce9a93a17'",
        {"irsa": {"bucketName": "acme-irsa-demo"}},
    ),
    Case(
        "external-issuer-url",
        "spec.irsa.issuerURL: 'http://oidc.example.com' must be an https:// URL",
        {"irsa": {**EXTERNAL, "issuerURL": "http://oidc.example.com"}},
    ),
    Case(
        "external-provider-arn",
        "spec.irsa.oidcProviderARN: 'arn:aws:iam::111122223333:role/x' is not an IAM OIDC provider ARN",
        {"irsa": {**EXTERNAL, "oidcProviderARN": "arn:aws:iam::111122223333:role/x"}},
    ),
    Case(
        "external-other-issuer",
        "spec.irsa.oidcProviderARN: names provider 'oidc.example.com'",
        {
            "irsa": {
                **EXTERNAL,
                "oidcProviderARN": "arn:aws:iam::111122223333:oidc-provider/oidc.example.com",
            }
        },
    ),
    Case(
        "namespaced-other-namespace",
        "spec.clusterNamespace: a namespaced ClusterPlugin can only use a Cluster in its own namespace 'team-a'",
        {"clusterNamespace": "other"},
    ),
    Case(
        "claim-other-namespace",
        "spec.clusterNamespace: a claim can only use a Cluster in its own namespace 'platform'",
        {"clusterNamespace": "other"},
        example="calico-legacy-claim",
    ),
    Case(
        "unclaimed-no-namespace",
        "spec.clusterNamespace: is required for a cluster-scoped XClusterPlugin without a claim",
        change=_pop("metadata", "labels"),
        example="calico-legacy-claim",
    ),
    Case(
        "cluster-namespace-not-dns",
        "spec.clusterNamespace: 'Platform' is not a Kubernetes name",
        {"clusterNamespace": "Platform"},
        change=_pop("metadata", "labels"),
        example="calico-legacy-claim",
    ),
    # --- the values each add-on owns (its declaration's owned_values) ---
    Case(
        "owned-ccm",
        "spec.cloudProvider.aws.values.hostNetworking: is set by the function",
        _values(("cloudProvider", "aws"), {"hostNetworking": False}),
    ),
    Case(
        "owned-vpc-cni",
        "spec.networking.amazonVPC.values.serviceAccount.name: is set by the function",
        _values(("networking", "amazonVPC"), {"serviceAccount": {"name": "x"}}),
    ),
    Case(
        "owned-calico",
        "spec.networking.calico.values.installation.calicoNetwork.ipPools: is set by the function",
        _values(("networking", "calico"), {"installation": {"calicoNetwork": {"ipPools": []}}}),
    ),
    Case(
        "owned-ebs",
        "spec.storage.ebs.values.controller.serviceAccount.name: is set by the function",
        _values(("storage", "ebs"), {"controller": {"serviceAccount": {"name": "x"}}}),
    ),
    Case(
        "owned-efs-not-object",
        "spec.storage.efs.values.controller: must be an object: the function sets controller.serviceAccount.name under it",
        _values(("storage", "efs"), {"controller": "x"}),
    ),
    Case(
        "owned-lbc",
        "spec.ingress.awsLoadBalancerController.values.clusterName: is set by the function",
        _values(("ingress", "awsLoadBalancerController"), {"clusterName": "x"}),
    ),
    Case(
        "owned-external-dns",
        "spec.dns.externalDNS.values.txtOwnerId: is set by the function",
        _values(("dns", "externalDNS"), {"txtOwnerId": "x"}, DNS),
    ),
    # --- several problems: every one is said ---
    Case(
        "several",
        "spec.netkworking: unknown field (did you mean networking?)",
        {"netkworking": {}, "stroage": {}},
        also=("spec.stroage: unknown field (did you mean storage?)",),
    ),
    # --- the step input (function/spec.py StepInput) ---
    Case(
        "name-prefix",
        "input.namePrefix: 'Acme' may hold only lower-case letters",
        step_input={"namePrefix": "Acme"},
        input_alone=True,
    ),
    Case(
        "name-prefix-reserved",
        "input.namePrefix: 'xn--' starts with a prefix S3 reserves",
        step_input={"namePrefix": "xn--"},
        input_alone=True,
    ),
    Case(
        "name-prefix-long",
        "input.namePrefix: String should have at most 20 characters",
        step_input={"namePrefix": "a" * 21},
        input_alone=True,
    ),
    Case(
        "pod-identity-agent-registry",
        "input.podIdentityAgentRegistry: 'https://mirror.example.com' is not an image registry: "
        "host[:port][/path] in lower case, no scheme or tag",
        step_input={"podIdentityAgentRegistry": "https://mirror.example.com"},
        input_alone=True,
    ),
    Case(
        "chart-repository",
        "input.charts.ebs.repository: 'ftp://x' must be an https://, http:// or oci://",
        step_input={"charts": {"ebs": {"repository": "ftp://x", "name": "a", "version": "1.0.0"}}},
        input_alone=True,
    ),
    Case(
        "chart-name",
        "input.charts.ebs.name: String should have at least 1 character",
        step_input={"charts": {"ebs": {"repository": "https://x", "name": "", "version": "1.0.0"}}},
        input_alone=True,
    ),
    Case(
        "input-chart-version",
        "input.charts.ebs.version: 'x' is not a chart version",
        step_input={"charts": {"ebs": {"repository": "https://x", "name": "a", "version": "x"}}},
        input_alone=True,
    ),
    Case(
        "ttl-duration",
        "input.ttl.waiting: 'soon' is not a duration",
        step_input={"ttl": {"waiting": "soon"}},
        input_alone=True,
    ),
    Case(
        "ttl-range",
        "input.ttl.waiting: Input should be greater than or equal to 1",
        step_input={"ttl": {"waiting": 0}},
        input_alone=True,
    ),
    Case(
        "ttl-order",
        "input.ttl.waiting: must not be longer than ready (700s > 600s)",
        step_input={"ttl": {"waiting": 700}},
        input_alone=True,
    ),
    Case(
        "provider-config-kind",
        "input.awsProviderConfig.kind: Input should be 'ProviderConfig' or 'ClusterProviderConfig'",
        step_input={"awsProviderConfig": {"kind": "Secret"}},
        input_alone=True,
    ),
    Case(
        "legacy-control-plane-kind",
        "input.clusterAPI.legacyControlPlaneKind: Input should be 'KubeadmControlPlane' or 'AWSManagedControlPlane'",
        step_input={"clusterAPI": {"legacyControlPlaneKind": "RKE2ControlPlane"}},
        input_alone=True,
    ),
    Case(
        "input-misspelled",
        "input.namePrefx: unknown field (did you mean namePrefix?)",
        step_input={"namePrefx": "a-"},
        input_alone=True,
    ),
    Case(
        "spec-and-input",
        "spec.region: 'mars-1' is not an AWS region",
        {"region": "mars-1"},
        step_input={"namePrefix": "Acme"},
        also=("input.namePrefix: 'Acme' may hold only",),
    ),
    # --- against the cluster (function/accept.py refuse, the add-ons' cluster_problem) ---
    Case(
        "eks-managed-vpc-cni",
        "spec.networking.amazonVPC: the AWSManagedControlPlane of payments/prod lists vpc-cni in "
        "spec.addons: EKS installs and manages the Amazon VPC CNI, and a Release of it would "
        "fight EKS's; remove spec.networking.amazonVPC, or remove vpc-cni from spec.addons",
        example="eks-pod-identity",
        change_required=_eks_addon("vpc-cni"),
    ),
    Case(
        "eks-managed-ebs-csi",
        "spec.storage.ebs: the AWSManagedControlPlane of payments/prod lists aws-ebs-csi-driver in "
        "spec.addons: EKS installs and manages the EBS CSI driver",
        {"storage": {"ebs": {}}},
        example="eks-pod-identity",
        change_required=_eks_addon("aws-ebs-csi-driver"),
    ),
    Case(
        "rosa-control-plane",
        "spec.clusterName: Cluster team-a/demo's control plane is a ROSAControlPlane; the "
        "function serves KubeadmControlPlane and AWSManagedControlPlane clusters (CAPA's kubeadm "
        "and EKS flavours): nothing is composed for this one",
        change_required=_rosa_control_plane,
    ),
    Case(
        "rosa-control-plane-read",
        "spec.clusterName: Cluster team-a/demo's control plane is a ROSAControlPlane; the "
        "function serves KubeadmControlPlane and AWSManagedControlPlane clusters",
        change_required=_rosa_control_plane_read,
    ),
    Case(
        "chart-pinned-outside-the-minor",
        "spec.networking.calico.version: tigera-operator v3.32.1 supports Kubernetes 1.34 to "
        "1.36, and the cluster runs 1.33 (its KubeadmControlPlane): pin a version for it, or "
        "leave the version out to follow the cluster's minor",
        {"networking": {"calico": {"version": "v3.32.1"}}},
        example="calico-legacy-claim",
        step_input={"clusterAPI": LEGACY_CLUSTER_API},
    ),
    Case(
        "composition-pin-outside-the-minor",
        "input.charts.calico.version: tigera-operator v3.29.7 supports Kubernetes 1.29 to 1.32, "
        "and the cluster runs 1.33 (its KubeadmControlPlane)",
        example="calico-legacy-claim",
        step_input={
            "clusterAPI": LEGACY_CLUSTER_API,
            "charts": {
                "calico": {
                    "repository": "https://docs.tigera.io/calico/charts",
                    "name": "tigera-operator",
                    "version": "v3.29.7",
                }
            },
        },
    ),
    Case(
        "lbc-version-without-a-policy",
        "spec.ingress.awsLoadBalancerController.version: aws-load-balancer-controller chart 1.6.2 "
        "is not one the function has an IAM policy for (it knows 1.7.0 to 3.5.0): its IAM policy "
        "goes with it, and the function has none for it",
        {"ingress": {"awsLoadBalancerController": {"version": "1.6.2"}}},
    ),
    Case(
        "protect-cluster-legacy",
        "input.protectCluster: is only for namespaced ClusterPlugins",
        step_input={"protectCluster": True, "clusterAPI": LEGACY_CLUSTER_API},
        example="calico-legacy-claim",
    ),
    Case(
        "cloudfront-govcloud",
        "spec.irsa.hosting: us-gov-west-1 is in aws-us-gov: CloudFront is not in the aws-us-gov "
        "partition",
        {"region": "us-gov-west-1", **_cloudfront(**MANAGED)},
    ),
    Case(
        "cloudfront-china",
        "spec.irsa.hosting: cn-north-1 is in aws-cn: CloudFront in aws-cn serves only "
        "ICP-recorded domains",
        {"region": "cn-north-1", **_cloudfront(**SHARED)},
    ),
    Case(
        "hosting-changed-in-use",
        f"spec.irsa.hosting: would move the issuer from {SELFHOSTED_ISSUER} to "
        "https://oidc.example.com/team-a/demo, but",
        _cloudfront(**SHARED),
        change=_issuer_in_use(SELFHOSTED_ISSUER),
    ),
    Case(
        "hosting-dropped-in-use",
        "spec.irsa.hosting: would move the issuer from https://oidc.example.com to "
        f"{SELFHOSTED_ISSUER}, but",
        change=_issuer_in_use("https://oidc.example.com"),
    ),
    Case(
        "external-issuer-not-eks",
        "spec.irsa: mode External without issuerURL and oidcProviderARN reads them from an EKS "
        "control plane (AWSManagedControlPlane), but the control plane is a KubeadmControlPlane",
        {"irsa": {"mode": "External"}},
    ),
    Case(
        "external-issuer-not-associated",
        "spec.irsa: mode External without issuerURL and oidcProviderARN reads them from the EKS "
        "control plane, but AWSManagedControlPlane payments/prod-control-plane does not "
        "associate an OIDC provider",
        example="external-eks",
        change_required=_no_oidc_provider,
    ),
    Case(
        "external-issuer-disagrees",
        f"spec.irsa.oidcProviderARN: {EXTERNAL['oidcProviderARN']} is not the cluster's OIDC "
        "provider: AWSManagedControlPlane payments/prod-control-plane reports "
        "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/"
        "EXAMPLED539D4633E53DE1B71EXAMPLE",
        {"irsa": EXTERNAL},
        example="external-eks",
    ),
    Case(
        "pod-identity-not-eks",
        "spec.irsa.mode: PodIdentity needs an EKS control plane (AWSManagedControlPlane); this "
        "cluster's is a KubeadmControlPlane, where EKS Pod Identity does not exist: use IRSA",
        {"irsa": {"mode": "PodIdentity"}},
    ),
    Case(
        "pod-identity-china",
        "spec.irsa.mode: EKS Pod Identity is not available in the China regions (cn-north-1 is "
        "in aws-cn): use IRSA (mode External with the EKS cluster's issuer)",
        {"region": "cn-north-1"},
        example="eks-pod-identity",
    ),
    Case(
        "pod-identity-no-agent",
        "spec.irsa.mode: PodIdentity needs the eks-pod-identity-agent on the nodes: list the EKS "
        "add-on eks-pod-identity-agent in the AWSManagedControlPlane's spec.addons, or give the "
        "step input's charts.podIdentityAgent",
        example="eks-pod-identity",
        change_required=_no_agent_add_on,
    ),
    Case(
        "pod-identity-agent-no-registry",
        "input.podIdentityAgentRegistry: the eks-pod-identity-agent chart needs the registry its "
        "image is pulled from, and the EKS user guide's table of add-on registries "
        "(function/addons/pod_identity.py) names none for ap-southeast-9: give your mirror as "
        "input.podIdentityAgentRegistry",
        {"region": "ap-southeast-9"},
        example="eks-pod-identity",
        change_required=_no_agent_add_on,
        step_input={"charts": AGENT_CHART},
    ),
    Case(
        "irsa-in-use-to-pod-identity",
        "spec.irsa.mode: would move the add-on roles from IRSA to EKS Pod Identity, but IRSA is in "
        "use (status.oidcProviderARN arn:aws:iam::111122223333:oidc-provider/",
        {"irsa": {"mode": "PodIdentity"}},
        example="external-eks",
        change=_issuer_in_use("https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"),
    ),
    Case(
        "pod-identity-in-use-to-irsa",
        "spec.irsa.mode: would move the add-on roles from EKS Pod Identity to IRSA (SelfHosted), "
        "but Pod Identity is in use (status.podIdentityCluster)",
        {"irsa": {"mode": "SelfHosted"}},
        example="eks-pod-identity",
        change=_set({"podIdentityCluster": "prod"}, "status"),
    ),
    Case(
        "ccm-on-eks",
        "spec.cloudProvider.aws: the control plane of payments/prod is EKS (AWSManagedControlPlane)",
        {"cloudProvider": {"aws": {}}},
        example="external-eks",
    ),
]


CASES += [
    # --- what a ClusterPlugin is (function/accept.py, from function/flavour.py's XR types) ---
    Case(
        "kind-misspelled",
        "kind: not a ClusterPlugin: Input should be 'ClusterPlugin' or 'XClusterPlugin', got "
        "'ClusterPlugins'",
        change=_set("ClusterPlugins", "kind"),
    ),
    Case(
        "api-version",
        "apiVersion: not a ClusterPlugin: Input should be 'clusterplugin.dev/v1alpha1', got "
        "'clusterplugin.dev/v1'",
        change=_set("clusterplugin.dev/v1", "apiVersion"),
    ),
    Case(
        "not-a-clusterplugin",
        "apiVersion: not a ClusterPlugin: Input should be 'clusterplugin.dev/v1alpha1', got none",
        change=_replace,
        also=(
            "kind: not a ClusterPlugin: Input should be 'ClusterPlugin' or 'XClusterPlugin', got none",
        ),
    ),
    # --- files the commands cannot read as Kubernetes objects (function_tools/input_files.py) ---
    *(
        Case(
            f"not-utf8-{slug}",
            f"{{tmp}}/{slug}.yaml: not UTF-8 text (byte 0xff at offset 21): give a YAML or JSON "
            "file of Kubernetes objects",
            by_commands=True,
            args=_file(option, NOT_UTF8, f"{slug}.yaml"),
            input_alone=option in {"--input", "--composition"},
            only=("render",) if option == "--observed" else (),
        )
        for option in ("XR.yaml", "--required", "--input", "--composition", "--observed")
        for slug in [option.strip("-").lower().removesuffix(".yaml")]
    ),
    Case(
        "not-yaml",
        "{tmp}/bad.yaml: not valid YAML or JSON: expected ',' or ']', but got '<stream end>' at "
        "line 1, column 6",
        by_commands=True,
        args=_file("XR.yaml", b"a: [b"),
    ),
    Case(
        "xr-not-an-object",
        "{tmp}/bad.yaml: not a Kubernetes object (got a list, not a mapping)",
        by_commands=True,
        args=_file("XR.yaml", b"- a\n- b\n"),
    ),
    Case(
        "required-not-an-object",
        "{tmp}/bad.json: not a Kubernetes object (apiVersion: is required; kind: is required)",
        by_commands=True,
        args=_file("--required", b'{"just": "json"}', "bad.json"),
    ),
    Case(
        "required-in-a-list",
        "{tmp}/bad.yaml items[1]: not a Kubernetes object (kind: is required)",
        by_commands=True,
        args=_file(
            "--required",
            b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: A}\n- {apiVersion: v1}\n",
        ),
    ),
    # --- cluster objects the function would not read as the XR's cluster's (function/accept.py) ---
    Case(
        "required-of-another-cluster",
        "{examples}/selfhosted-full/required/awscluster.yaml: AWSCluster team-a/demo belongs to "
        "cluster team-a/demo, not to the XR's team-a/prod (spec.clusterName): give only the objects "
        "of team-a/prod, or correct spec.clusterName",
        {"clusterName": "prod"},
        by_commands=True,
    ),
    Case(
        "required-in-another-namespace",
        "{examples}/selfhosted-full/required/awscluster.yaml: AWSCluster team-a/demo belongs to "
        "cluster team-a/demo, not to the XR's team-b/demo",
        change=_set("team-b", "metadata", "namespace"),
        by_commands=True,
    ),
    Case(
        "cluster-version-not-asked-for",
        "{tmp}/objects.yaml: Cluster team-a/demo is cluster.x-k8s.io/v1beta1, but the function "
        "asks for cluster.x-k8s.io/v1beta2, which an API server would convert it to and a file "
        "cannot be: give it as cluster.x-k8s.io/v1beta2 (kubectl get -o yaml from a cluster that "
        "serves it), or set input.clusterAPI.cluster: cluster.x-k8s.io/v1beta1",
        by_commands=True,
        args=_required_as("cluster.x-k8s.io/v1beta1"),
    ),
]
FUNCTION_CASES = [c for c in CASES if not c.by_commands]


def _fatal(case: Case) -> str:
    """The function's own FATAL message for the case."""
    out = render.render(case.xr(), required=case.required(), step_input=case.step_input)
    assert out.fatal is not None, f"{case.id}: the function accepted it"
    return out.fatal


def _write(tmp_path: Path, case: Case) -> list[str]:
    """The arguments every command takes: XR.yaml --required DIR [--input FILE]."""
    xr = tmp_path / "xr.yaml"
    xr.write_text(yaml.safe_dump(case.xr()))
    required = EXAMPLES / case.example / "required"
    if case.change_required is not None:
        required = tmp_path / "required"
        required.mkdir()
        (required / "objects.yaml").write_text(yaml.safe_dump_all(case.required()))
    args = [str(xr), "--required", str(required)]
    if case.step_input is not None:
        step = tmp_path / "input.yaml"
        step.write_text(
            yaml.safe_dump(
                {"apiVersion": "fn.clusterplugin.dev/v1alpha1", "kind": "Input", **case.step_input}
            )
        )
        args += ["--input", str(step)]
    if case.args is not None:
        args = case.args(tmp_path, args)
    return args


def _run(*argv: str) -> Any:
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def test_the_cases_are_distinct() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    alone = [c for c in CASES if not c.also]
    assert len({c.expected for c in alone}) == len(alone)


@pytest.mark.parametrize("case", FUNCTION_CASES, ids=[c.id for c in FUNCTION_CASES])
def test_the_function_refuses_naming_the_field(case: Case) -> None:
    message = _fatal(case)
    for expected in (case.expected, *case.also):
        assert message.startswith(expected) or f"; {expected}" in message, message


def _grpc(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return asyncio.run(fn.FunctionRunner().RunFunction(req))


@pytest.mark.parametrize("case", FUNCTION_CASES, ids=[c.id for c in FUNCTION_CASES])
def test_the_grpc_service_gives_the_same_one_fatal(case: Case) -> None:
    """Through the service ``serve`` registers: exactly one result, FATAL, the same words."""
    world = InMemoryCrossplane(
        case.xr(), case.required(), step_input=case.step_input, capabilities=True, runner=_grpc
    )
    rsp, _ = world.call()
    assert [(r.severity, r.message) for r in rsp.results] == [(fnv1.SEVERITY_FATAL, _fatal(case))]


COMMANDS = {
    "render": (["render"], 1),
    "simulate": (["simulate", "-o", "text"], 1),
    "issuer": (["issuer"], 2),
    "aws-preflight": (["aws", "preflight"], 2),
}


EVERY_COMMAND = [
    pytest.param(case, command, id=f"{case.id}-{command}")
    for case in CASES
    for command in sorted(COMMANDS)
    if not case.only or command in case.only
]


@pytest.mark.parametrize(("case", "command"), EVERY_COMMAND)
def test_every_command_refuses_with_the_same_message(
    tmp_path: Path, case: Case, command: str
) -> None:
    argv, exit_code = COMMANDS[command]
    r = _run(*argv, *_write(tmp_path, case))
    if case.by_commands:
        message = case.expected.format(tmp=tmp_path, examples=EXAMPLES)
        assert r.exit_code == 2, r.output
        assert r.output.startswith(f"Error: {message}"), r.output
    else:
        message = _fatal(case)
        assert r.exit_code == exit_code, r.output
        assert message in r.output
    assert len(r.output.splitlines()) == 1, r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("case", [c for c in CASES if c.input_alone], ids=lambda c: c.id)
def test_provider_policy_refuses_the_same_step_input(tmp_path: Path, case: Case) -> None:
    args = _write(tmp_path, case)
    given = [i for i, a in enumerate(args) if a in {"--input", "--composition"}]
    r = _run("aws", "provider-policy", *args[given[0] :])
    assert r.exit_code == 2, r.output
    if case.by_commands:
        assert r.output == f"Error: {case.expected.format(tmp=tmp_path)}\n"
    else:
        assert _fatal(case) in r.output


def test_provider_policy_judges_the_name_prefix_flag_as_the_input() -> None:
    r = _run("aws", "provider-policy", "--name-prefix", "Acme")
    assert r.exit_code == 2
    assert "input.namePrefix: 'Acme' may hold only lower-case letters" in r.output
    assert _run("aws", "provider-policy", "--name-prefix", "acme-").exit_code == 0


# --- aws preflight --workload-kubeconfig: a file that is not a usable kubeconfig ----------------

_CONTEXT = "current-context: x\ncontexts: [{name: x, context: {cluster: y, user: z}}]\n"
BAD_KUBECONFIGS = {
    "not-yaml": ("clusters: [oops", "not YAML (line 1)"),
    "not-a-kubeconfig": ("kind: Pod\n", "not a kubeconfig (kind: Config with clusters, users and contexts)"),
    "no-current-context": ("kind: Config\nclusters: []\n", "no current-context (the context to read the workload cluster with)"),
    "no-such-context": ("kind: Config\nclusters: []\ncurrent-context: w\n", "current-context w is not in contexts"),
    "no-such-cluster": (f"kind: Config\nclusters: []\n{_CONTEXT}", "context x names cluster y, which is not in clusters"),
    "missing-ca": (
        f"kind: Config\n{_CONTEXT}clusters: [{{name: y, cluster: {{server: 'https://127.0.0.1:1', certificate-authority: ca.crt}}}}]\n",
        "its certificate-authority ca.crt is not a file",
    ),
}


@pytest.mark.parametrize(("content", "expected"), BAD_KUBECONFIGS.values(), ids=list(BAD_KUBECONFIGS))
def test_aws_preflight_refuses_a_bad_workload_kubeconfig_in_one_line(
    tmp_path: Path, content: str, expected: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    example = EXAMPLES / "eks-pod-identity"
    r = _run(
        "aws", "preflight", str(example / "xr.yaml"), "--required", str(example / "required"),
        "--workload-kubeconfig", str(kubeconfig),
    )
    assert r.exit_code == 2, r.output
    assert r.output == f"Error: --workload-kubeconfig {kubeconfig}: {expected}\n"


# --- serve: an address it cannot listen on --------------------------------------------------


@pytest.fixture
def taken_port() -> Any:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


IN_USE = "Error: {option} 127.0.0.1:{port}: cannot listen there: Address already in use\n"
NOT_HOST_PORT = "Error: {option} 'nonsense' is not host:port (e.g. 0.0.0.0:9443, :9443 or [::]:9443)\n"


@pytest.mark.parametrize(
    ("option", "address", "exit_code", "expected"),
    [
        ("--address", "127.0.0.1:{port}", 1, IN_USE),
        ("--health-address", "127.0.0.1:{port}", 1, IN_USE),
        ("--metrics-address", "127.0.0.1:{port}", 1, IN_USE),
        ("--address", "nonsense", 2, NOT_HOST_PORT),
        ("--metrics-address", "nonsense", 2, NOT_HOST_PORT),
    ],
    ids=["address-in-use", "health-in-use", "metrics-in-use", "address-nonsense", "metrics-nonsense"],
)
def test_serve_refuses_an_address_in_one_line(
    taken_port: int, option: str, address: str, exit_code: int, expected: str
) -> None:
    """The real process: grpc would log a line of its own and raise RuntimeError."""
    others = ["--address", "127.0.0.1:0"] if option != "--address" else []
    argv = ["serve", "--insecure", *others, option, address.format(port=taken_port)]
    r = subprocess.run(
        [sys.executable, "-m", "function_tools.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    message = expected.format(option=option, port=taken_port)
    assert (r.returncode, r.stdout, r.stderr) == (exit_code, "", message)
