"""The real AWS provider (provider-upjet-aws) out of cluster, against moto on loopback.

- ``AwsControlPlane``: a control plane whose AWS CRDs are the provider module's own
  (``scripts/tools.py source provider-aws``: ``package/crds`` at v2.5.0) in place of the
  vendored v2.6.0 ones, for the kinds the function composes and the ProviderConfigs. Where
  a CRD serves more than one version (the legacy Bucket, Object, BucketOwnershipControls,
  Distribution and Record: v1beta1 stored, v1beta2 served), its conversion goes to the
  provider's webhook server on loopback by URL, as Crossplane's package manager would point
  it at the provider's Service.
- ``provider_aws``: the monolith binary (one process, every family) with a kubeconfig, its
  webhook server's certificates and loopback ports.
- ``provider_configs``: a ClusterProviderConfig (namespaced kinds) and a ProviderConfig
  (legacy kinds) sending every service to moto: ``endpoint.url`` static, ``services``,
  path-style S3. Credentials from a Secret, validated through STS (moto's account,
  123456789012, is the one in every ARN moto makes).
- ``Moto``: the moto server of ``tests/aws_helpers.py`` with its request recorder, read
  back with boto3: what it holds of the kinds the function composes, and the write calls
  it received.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import yaml

from e2e.controlplane.harness import CROSSPLANE_NAMESPACE, FIXTURE_CRDS, ControlPlane
from e2e.controlplane.processes import Process, StartError, free_port, start, wait_until
from function.flavour import KINDS
from tests.aws_helpers import ADMIN, MotoServer, make_clients

# The kinds of provider-upjet-aws the function composes.
AWS_KINDS = frozenset(k for k, (legacy, _) in KINDS.items() if ".aws.upbound.io/" in legacy)
# Every service the provider calls for them: STS for the credentials' validation, S3 Control
# for a bucket's tags (the Terraform provider 6.x reads them with ListTagsForResource).
SERVICES = ("cloudfront", "ec2", "iam", "route53", "s3", "s3control", "sts")
MOTO_ACCOUNT = "123456789012"
CREDENTIALS_SECRET = "aws-credentials"  # noqa: S105 - a Secret's name
# The name the step input's awsProviderConfig defaults to (function/spec.py).
PROVIDER_CONFIG = "default"
# Where controller-runtime serves the conversion webhook.
CONVERSION_PATH = "/convert"


def _vendored_aws_crd_names() -> set[str]:
    """File names of the vendored provider-aws CRDs (the kinds the function composes)."""
    dirs = [*FIXTURE_CRDS.glob("provider-aws-*"), FIXTURE_CRDS / "provider-family-aws"]
    return {p.name for d in dirs for p in d.glob("*.yaml")}


def _crd_name(file_name: str) -> str:
    """``<group>_<plural>.yaml`` -> ``<plural>.<group>`` (the CRD's metadata.name)."""
    group, plural = file_name.removesuffix(".yaml").split("_", 1)
    return f"{plural}.{group}"


class AwsControlPlane(ControlPlane):
    """A control plane with the AWS provider module's CRDs, converted by its webhook."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Chosen now: the CRDs name it before the provider runs.
        self.provider_webhook_port = free_port()
        # Found before anything starts: a module that cannot be had fails the test here.
        self.provider_crds = self.tool_source("provider-aws") / "package" / "crds"

    def provider_crd_files(self) -> list[Path]:
        """The module's CRDs of every vendored AWS kind, and all its ProviderConfig kinds."""
        crds = self.provider_crds
        wanted = _vendored_aws_crd_names()
        missing = sorted(n for n in wanted if not (crds / n).is_file())
        if missing:
            msg = f"provider-aws's package/crds ({crds}) lacks {', '.join(missing)}"
            raise StartError(msg)
        family = {p.name for p in crds.glob("aws.upbound.io_*.yaml")} | {
            p.name for p in crds.glob("aws.m.upbound.io_*.yaml")
        }
        return [crds / n for n in sorted(wanted | family)]

    def crds(self) -> list[dict[str, Any]]:
        replaced = {_crd_name(n) for n in _vendored_aws_crd_names()}
        kept = [c for c in super().crds() if c["metadata"]["name"] not in replaced]
        return kept + [self._converted_by_the_provider(yaml.safe_load(p.read_text())) for p in self.provider_crd_files()]

    def _converted_by_the_provider(self, crd: dict[str, Any]) -> dict[str, Any]:
        if len(crd["spec"]["versions"]) > 1:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.provider_webhook_port}{CONVERSION_PATH}",
                        "caBundle": base64.b64encode(self.ca.pem).decode(),
                    },
                },
            }
        return crd


def multi_version_kinds(cp: AwsControlPlane) -> dict[str, str]:
    """CRD name -> storage version, of the provider's CRDs that serve more than one version."""
    out = {}
    for path in cp.provider_crd_files():
        crd = yaml.safe_load(path.read_text())
        if len(crd["spec"]["versions"]) > 1:
            out[crd["metadata"]["name"]] = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    return out


def provider_aws(cp: AwsControlPlane, *, poll: str, moto_endpoint: str) -> Process:
    """The provider's monolith out of cluster against ``cp``, polling every ``poll``.

    The AWS SDK puts the account id in front of S3 Control's host
    (``123456789012.127.0.0.1:<port>``, for a bucket's tags), a name no resolver knows: the
    provider's HTTP proxy is moto itself, which serves S3 Control by its path. Go never
    proxies a loopback address, so every other call goes to moto (and the API server) directly.
    """
    probe = free_port()
    argv = [
        str(cp.tool("provider-aws")),
        "--debug",
        f"--poll={poll}",
        f"--certs-dir={cp.provider_cert.dir}",
        f"--webhook-port={cp.provider_webhook_port}",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-addr=127.0.0.1:{probe}",
    ]
    env = {"KUBECONFIG": str(cp.kubeconfig), "AWS_EC2_METADATA_DISABLED": "true", "HTTP_PROXY": moto_endpoint}
    process = start("provider-aws", argv, cp.logs, env=env)
    cp.processes["provider-aws"] = process

    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as rsp:
            return rsp.status == 200

    # Reading the Terraform provider's schema takes a while.
    wait_until(process, ready, "/readyz (webhook server started)", timeout_s=180)
    return process


def provider_configs(cp: ControlPlane, endpoint: str) -> None:
    """The credentials Secret, a ClusterProviderConfig and a legacy ProviderConfig, both at moto."""
    ini = f"[default]\naws_access_key_id = {ADMIN['aws_access_key_id']}\naws_secret_access_key = {ADMIN['aws_secret_access_key']}\n"
    cp.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": CREDENTIALS_SECRET, "namespace": CROSSPLANE_NAMESPACE},
            "stringData": {"credentials": ini},
        }
    )
    spec = {
        "credentials": {
            "source": "Secret",
            "secretRef": {"namespace": CROSSPLANE_NAMESPACE, "name": CREDENTIALS_SECRET, "key": "credentials"},
        },
        "endpoint": {
            "url": {"type": "Static", "static": endpoint},
            "services": list(SERVICES),
            "hostnameImmutable": True,
        },
        "s3_use_path_style": True,
        "skip_metadata_api_check": True,
    }
    for api_version, kind in (("aws.m.upbound.io/v1beta1", "ClusterProviderConfig"), ("aws.upbound.io/v1beta1", "ProviderConfig")):
        cp.kube.apply({"apiVersion": api_version, "kind": kind, "metadata": {"name": PROVIDER_CONFIG}, "spec": spec})


# --- policies ----------------------------------------------------------------------------------


def _as_sorted_list(value: Any) -> Any:
    values = value if isinstance(value, list) else [value]
    return sorted(json.dumps(normal_policy(v), sort_keys=True) for v in values)


def normal_policy(doc: Any) -> Any:
    """A policy document in a form where IAM-equivalent documents are equal: a one-element
    list and its element are the same, and the order of statements and values does not count."""
    if isinstance(doc, str):
        try:
            parsed = json.loads(doc)
        except ValueError:
            return doc
        return normal_policy(parsed) if isinstance(parsed, dict) else doc
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for key, value in doc.items():
            if key in {"Statement", "Action", "NotAction", "Resource", "NotResource"}:
                out[key] = _as_sorted_list(value)
            elif key in {"Principal", "NotPrincipal"} and isinstance(value, dict):
                out[key] = {k: _as_sorted_list(v) for k, v in value.items()}
            elif key == "Condition":
                out[key] = {op: {k: _as_sorted_list(v) for k, v in kv.items()} for op, kv in value.items()}
            else:
                out[key] = normal_policy(value) if isinstance(value, dict) else value
        return out
    return doc


# --- moto ----------------------------------------------------------------------------------------

READ_PREFIXES = ("Get", "List", "Describe", "Head")


@dataclass(frozen=True)
class Call:
    """One request moto recorded."""

    service: str
    method: str
    path: str
    action: str  # the query API's Action, or "" for a REST call
    # The query's and the form body's parameters (first value of each; "" for a bare key
    # such as S3's ``?policy``).
    params: tuple[tuple[str, str], ...] = ()

    @property
    def writes(self) -> bool:
        if self.action:
            return not self.action.startswith(READ_PREFIXES)
        return self.method not in {"GET", "HEAD", "OPTIONS"}

    def __str__(self) -> str:
        return f"{self.service} {self.action or self.method + ' ' + self.path}"


def _service(headers: dict[str, str]) -> str:
    auth = headers.get("Authorization", "")
    if "Credential=" not in auth:
        return "anonymous"
    scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
    return scope[3] if len(scope) > 3 else "?"


class Moto:
    """moto on loopback with its request recorder, and what it holds."""

    def __init__(self, recording: Path) -> None:
        self.recording = recording
        self.server = MotoServer({"MOTO_RECORDER_FILEPATH": str(recording)})
        self.endpoint = self.server.endpoint
        self.clients = make_clients(self.endpoint)

    def stop(self) -> None:
        self.server.stop()

    # --- the recorder ---------------------------------------------------------------------

    def _recorder(self, what: str) -> None:
        req = urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{what}", data=b"", method="POST")  # noqa: S310
        with urllib.request.urlopen(req, timeout=10):  # noqa: S310 - loopback
            pass

    def start_recording(self) -> None:
        self._recorder("reset-recording")
        self._recorder("start-recording")

    def stop_recording(self) -> list[Call]:
        self._recorder("stop-recording")
        calls = []
        for line in self.recording.read_text().splitlines():
            entry = json.loads(line)
            body = entry.get("body") or ""
            if entry.get("body_encoded"):
                body = base64.b64decode(body).decode(errors="replace")
            url = entry["url"]
            path = url.split("://", 1)[-1].split("/", 1)[-1]
            query = parse_qs(path.split("?", 1)[1], keep_blank_values=True) if "?" in path else {}
            form = parse_qs(body) if "Action=" in body else {}
            action = (form.get("Action") or query.get("Action") or [""])[0]
            params = tuple(sorted({k: v[0] for k, v in {**query, **form}.items()}.items()))
            calls.append(Call(_service(entry.get("headers", {})), entry["method"], "/" + path, action, params))
        return calls

    # --- what it holds --------------------------------------------------------------------

    def roles(self) -> dict[str, dict[str, Any]]:
        out = {}
        for page in self.clients.iam.get_paginator("list_roles").paginate():
            for role in page["Roles"]:
                name = role["RoleName"]
                attached = self.clients.iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
                out[name] = {
                    "path": role["Path"],
                    "trust": role["AssumeRolePolicyDocument"],
                    "attached": sorted(p["PolicyArn"] for p in attached),
                    "inline": sorted(self.clients.iam.list_role_policies(RoleName=name)["PolicyNames"]),
                    "tags": {t["Key"]: t["Value"] for t in self.clients.iam.list_role_tags(RoleName=name)["Tags"]},
                }
        return out

    def policies(self) -> dict[str, dict[str, Any]]:
        """Customer-managed policies by ARN, with their default version's document."""
        out = {}
        for page in self.clients.iam.get_paginator("list_policies").paginate(Scope="Local"):
            for pol in page["Policies"]:
                version = self.clients.iam.get_policy_version(PolicyArn=pol["Arn"], VersionId=pol["DefaultVersionId"])
                out[pol["Arn"]] = {"name": pol["PolicyName"], "path": pol["Path"], "document": version["PolicyVersion"]["Document"]}
        return out

    def oidc_providers(self) -> dict[str, dict[str, Any]]:
        out = {}
        for ref in self.clients.iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]:
            got = self.clients.iam.get_open_id_connect_provider(OpenIDConnectProviderArn=ref["Arn"])
            out[ref["Arn"]] = {"url": got["Url"], "clientIds": got.get("ClientIDList", []), "thumbprints": got.get("ThumbprintList", [])}
        return out

    def buckets(self) -> dict[str, dict[str, Any]]:
        s3 = self.clients.s3
        out = {}
        for bucket in s3.list_buckets()["Buckets"]:
            name = bucket["Name"]
            entry: dict[str, Any] = {"objects": {}}
            for key, call, field_ in (
                ("policy", s3.get_bucket_policy, "Policy"),
                ("publicAccessBlock", s3.get_public_access_block, "PublicAccessBlockConfiguration"),
                ("ownershipControls", s3.get_bucket_ownership_controls, "OwnershipControls"),
            ):
                try:
                    entry[key] = call(Bucket=name)[field_]
                except s3.exceptions.ClientError:
                    entry[key] = None
            for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
                got = s3.get_object(Bucket=name, Key=obj["Key"])
                entry["objects"][obj["Key"]] = {"body": got["Body"].read(), "contentType": got.get("ContentType"), "cacheControl": got.get("CacheControl")}
            out[name] = entry
        return out

    def ingress_rules(self) -> dict[str, dict[str, Any]]:
        rules = self.clients.ec2.describe_security_group_rules()["SecurityGroupRules"]
        return {r["SecurityGroupRuleId"]: r for r in rules if not r["IsEgress"]}

    def distributions(self) -> dict[str, Any]:
        listed = self.clients.cloudfront.list_distributions()["DistributionList"].get("Items", [])
        return {d["Id"]: d for d in listed}

    def origin_access_controls(self) -> dict[str, Any]:
        listed = self.clients.cloudfront.list_origin_access_controls()["OriginAccessControlList"].get("Items", [])
        return {o["Id"]: o for o in listed}

    def records(self) -> dict[str, list[dict[str, Any]]]:
        out = {}
        for zone in self.clients.route53.list_hosted_zones()["HostedZones"]:
            sets = self.clients.route53.list_resource_record_sets(HostedZoneId=zone["Id"])["ResourceRecordSets"]
            out[zone["Id"]] = [s for s in sets if s["Type"] not in {"SOA", "NS"}]
        return out

    def snapshot(self) -> dict[str, Any]:
        """Everything moto holds of the kinds the function composes (ids and names only)."""
        return {
            "roles": sorted(self.roles()),
            "policies": sorted(self.policies()),
            "oidcProviders": sorted(self.oidc_providers()),
            "buckets": {n: sorted(b["objects"]) for n, b in self.buckets().items()},
            "ingressRules": sorted(self.ingress_rules()),
            "distributions": sorted(self.distributions()),
            "originAccessControls": sorted(self.origin_access_controls()),
            "records": {z: [f"{r['Name']} {r['Type']}" for r in rs] for z, rs in self.records().items() if rs},
        }


def snapshot_entries(composed: list[dict[str, Any]]) -> dict[str, Any]:
    """The entries of ``Moto.snapshot`` that the composed objects stand for on their own
    (a bucket's sub-resources and a role's attachments are not entries)."""
    out: dict[str, Any] = {}
    for obj in composed:
        at = obj.get("status", {}).get("atProvider", {})
        kind = obj["kind"]
        if kind == "Role":
            out.setdefault("roles", []).append(_name(obj))
        elif kind in {"Policy", "OpenIDConnectProvider"}:
            out.setdefault("policies" if kind == "Policy" else "oidcProviders", []).append(at.get("arn"))
        elif kind == "SecurityGroupIngressRule":
            out.setdefault("ingressRules", []).append(at.get("securityGroupRuleId") or _name(obj))
    return {k: sorted(v) for k, v in out.items()}


def new_in(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What ``after`` holds that ``before`` did not (per category)."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        was = before.get(key, [] if isinstance(value, list) else {})
        if isinstance(value, list):
            extra: Any = [v for v in value if v not in was]
        else:
            extra = {k: v for k, v in value.items() if k not in was or was[k] != v}
        if extra:
            out[key] = extra
    return out


# --- what moto holds against what the function composed ------------------------------------


@dataclass
class Held:
    """What moto holds, read once."""

    roles: dict[str, dict[str, Any]]
    policies: dict[str, dict[str, Any]]
    oidc_providers: dict[str, dict[str, Any]]
    buckets: dict[str, dict[str, Any]]
    ingress_rules: dict[str, dict[str, Any]]

    @classmethod
    def read(cls, moto: Moto) -> Held:
        return cls(moto.roles(), moto.policies(), moto.oidc_providers(), moto.buckets(), moto.ingress_rules())


def _name(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return str(meta.get("annotations", {}).get("crossplane.io/external-name") or meta["name"])


def _one(value: Any) -> dict[str, Any]:
    """A block the legacy v1beta1 schemas hold as a one-element list."""
    return dict(value[0] if isinstance(value, list) else value)


def _bare(url: str) -> str:
    return url.removeprefix("https://")


@dataclass
class _Compare:
    """One composed object against moto: its differences accumulate in ``out``."""

    obj: dict[str, Any]
    held: Held
    out: list[str]

    @property
    def fp(self) -> dict[str, Any]:
        return dict(self.obj["spec"]["forProvider"])

    @property
    def at(self) -> dict[str, Any]:
        return dict(self.obj.get("status", {}).get("atProvider", {}))

    @property
    def name(self) -> str:
        return _name(self.obj)

    def same(self, what: str, want: Any, got: Any) -> None:
        if want != got:
            self.out.append(f"{self.obj['kind']} {self.obj['metadata']['name']}: {what}: composed {want!r}, moto holds {got!r}")

    def absent(self, what: str) -> None:
        self.out.append(f"{self.obj['kind']} {self.obj['metadata']['name']}: moto holds no {what}")

    def bucket(self) -> dict[str, Any] | None:
        name = self.name if self.obj["kind"] == "Bucket" else self.fp.get("bucket", "")
        got = self.held.buckets.get(name)
        if got is None:
            self.absent(f"bucket {name}")
        return got


def _role(c: _Compare) -> None:
    role = c.held.roles.get(c.name)
    if role is None:
        c.absent(f"role {c.name}")
        return
    c.same("trust policy", normal_policy(c.fp["assumeRolePolicy"]), normal_policy(role["trust"]))
    c.same("path", c.fp.get("path", "/"), role["path"])
    c.same("tags missing", {}, {k: v for k, v in (c.fp.get("tags") or {}).items() if role["tags"].get(k) != v})


def _policy(c: _Compare) -> None:
    policy = c.held.policies.get(c.at.get("arn", ""))
    if policy is None:
        c.absent(f"policy {c.at.get('arn')}")
        return
    c.same("name", c.name, policy["name"])
    c.same("path", c.fp.get("path", "/"), policy["path"])
    c.same("document", normal_policy(c.fp["policy"]), normal_policy(policy["document"]))


def _attachment(c: _Compare) -> None:
    role = c.held.roles.get(c.fp.get("role", ""), {})
    c.same("attached", c.fp.get("policyArn"), c.fp.get("policyArn") if c.fp.get("policyArn") in role.get("attached", []) else role)


def _oidc(c: _Compare) -> None:
    oidc = c.held.oidc_providers.get(c.at.get("arn", ""))
    if oidc is None:
        c.absent(f"OIDC provider {c.at.get('arn')}")
        return
    c.same("url", c.fp["url"].removeprefix("https://"), oidc["url"].removeprefix("https://"))
    c.same("client ids", sorted(c.fp.get("clientIdList", [])), sorted(oidc["clientIds"]))
    c.same("thumbprints", sorted(c.fp.get("thumbprintList", [])), sorted(oidc["thumbprints"]))


def _bucket(c: _Compare) -> None:
    c.bucket()


def _bucket_policy(c: _Compare) -> None:
    if bucket := c.bucket():
        c.same("policy", normal_policy(c.fp["policy"]), normal_policy(bucket["policy"]))


PUBLIC_ACCESS_FIELDS = ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")


def _public_access_block(c: _Compare) -> None:
    if bucket := c.bucket():
        want = {f: c.fp.get(f[0].lower() + f[1:]) for f in PUBLIC_ACCESS_FIELDS}
        c.same("public access block", want, {f: (bucket["publicAccessBlock"] or {}).get(f) for f in PUBLIC_ACCESS_FIELDS})


def _ownership(c: _Compare) -> None:
    if bucket := c.bucket():
        rules = (bucket["ownershipControls"] or {}).get("Rules", [])
        c.same("object ownership", _one(c.fp["rule"])["objectOwnership"], rules[0]["ObjectOwnership"] if rules else None)


def _object(c: _Compare) -> None:
    if bucket := c.bucket():
        got = bucket["objects"].get(c.fp["key"])
        if got is None:
            c.absent(f"object {c.fp['key']}")
            return
        c.same("content (bytes)", c.fp["content"].encode(), got["body"])
        c.same("content type", c.fp.get("contentType"), got["contentType"])
        c.same("cache control", c.fp.get("cacheControl"), got["cacheControl"])


def _ingress_rule(c: _Compare) -> None:
    rule_id = c.at.get("securityGroupRuleId") or c.name
    rule = c.held.ingress_rules.get(rule_id)
    if rule is None:
        c.absent(f"ingress rule {rule_id}")
        return
    c.same("group", c.fp.get("securityGroupId"), rule["GroupId"])
    c.same("protocol", str(c.fp.get("ipProtocol")), rule["IpProtocol"])
    c.same("ports", (c.fp.get("fromPort", -1), c.fp.get("toPort", -1)), (rule.get("FromPort"), rule.get("ToPort")))
    c.same("source group", c.fp.get("referencedSecurityGroupId"), rule.get("ReferencedGroupInfo", {}).get("GroupId"))
    c.same("cidr", c.fp.get("cidrIpv4"), rule.get("CidrIpv4"))


COMPARED = {
    "Role": _role,
    "Policy": _policy,
    "RolePolicyAttachment": _attachment,
    "OpenIDConnectProvider": _oidc,
    "Bucket": _bucket,
    "BucketPolicy": _bucket_policy,
    "BucketPublicAccessBlock": _public_access_block,
    "BucketOwnershipControls": _ownership,
    "Object": _object,
    "SecurityGroupIngressRule": _ingress_rule,
}


def held_differences(obj: dict[str, Any], held: Held) -> list[str]:
    """Where moto does not hold what the composed managed resource ``obj`` asks for."""
    out: list[str] = []
    check = COMPARED.get(obj["kind"])
    if check is None:
        return [f"{obj['kind']} {obj['metadata']['name']}: not compared with moto (no check for its kind)"]
    check(_Compare(obj, held, out))
    return out
