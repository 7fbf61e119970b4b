"""The token an add-on's pod gets, all the way to its role (issue 29, part 2).

For each issuer hosting (``HOSTINGS``: S3Public, CloudFront Shared, CloudFront Managed), its
example converges through the real provider-aws against moto (``e2e/aws/conftest.py``);
then a workload cluster runs kube-apiserver as kubeadm would for it (the issuer
``function-cluster-plugin issuer`` prints, ``--api-audiences`` with sts.amazonaws.com, the
``<cluster>-sa`` key pair), the real amazon-eks-pod-identity-webhook v0.6.17 mutates the pods
kube-controller-manager makes from the add-ons' charts (the composed Releases rendered by
helm), and for every ServiceAccount with a role:

- its pods carry the role ARN the function composed and the projected token volume for
  sts.amazonaws.com at the path the SDKs read (AWS_WEB_IDENTITY_TOKEN_FILE);
- a token minted as that volume asks (TokenRequest) verifies with PyJWT against the
  discovery document and JWKS as moto holds them (the provider put them there), served
  over HTTPS at the issuer's own host and path on loopback;
- @cloud-copilot/iam-simulate, given each role's trust policy as moto holds it and the
  token's ``sub`` and ``aud``, allows sts:AssumeRoleWithWebIdentity on the diagonal of the
  ServiceAccount x role matrix only.

And the negatives: a token for another audience, one signed by another key under the same
``kid``, one from another cluster's issuer (the management cluster's API server) are refused.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from e2e.aws.conftest import converge
from e2e.aws.provider import AWS_KINDS, AwsControlPlane, Moto
from e2e.aws.tokens import (
    DISCOVERY_PATH,
    STS_AUDIENCE,
    TOKEN_VOLUME,
    WEBHOOK_CHART,
    IamSimulator,
    IssuerSite,
    KubeadmWorkload,
    PodIdentityWebhook,
    addon_renderings,
    apply_service_accounts,
    apply_workloads,
    issuer_documents,
    issuer_of,
    kubeadm_api_server_args,
    pods_of,
    role_service_accounts,
    secret_bytes,
    token_request,
    verify,
    web_identity_case,
)
from e2e.controlplane.composite import Composite
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.driver import Providers
from e2e.controlplane.kube import Kube
from e2e.controlplane.processes import Process
from tests.helm import Rendering

ALLOWED = "Allowed"


@dataclass(frozen=True)
class Hosting:
    """An issuer hosting, by the example that uses it, converged in a namespace of its own."""

    name: str
    example: str
    namespace: str
    legacy: bool = False  # a cluster-scoped XClusterPlugin (apis/v1) in the CAPI namespace

    def prepare(self, moto: Moto, manifest: dict[str, Any]) -> None:
        """What the platform team sets up before the XR: a Shared distribution's private
        bucket; a Managed one's hosted zone (moto names its zones: the XR is given its id)."""
        cloud_front = manifest["spec"]["irsa"].get("hosting", {}).get("cloudFront", {})
        if cloud_front.get("distribution") == "Shared":
            bucket = cloud_front["bucketName"]
            if bucket not in {b["Name"] for b in moto.clients.s3.list_buckets()["Buckets"]}:
                moto.clients.s3.create_bucket(Bucket=bucket)
        if cloud_front.get("distribution") == "Managed":
            zone = cloud_front["domain"].split(".", 1)[1]
            made = moto.clients.route53.create_hosted_zone(Name=zone, CallerReference=f"e2e-{zone}")
            cloud_front["hostedZoneId"] = made["HostedZone"]["Id"].removeprefix("/hostedzone/")


class ClusterScopedComposite(Composite):
    """A legacy XClusterPlugin created as is (cluster-scoped), its CAPI objects in ``namespace``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.manifest["metadata"].pop("namespace")

    @property
    def namespaced(self) -> bool:
        return False

    def resource(self) -> dict[str, Any] | None:
        m = self.manifest
        return self.kube.get(m["apiVersion"], m["kind"], m["metadata"]["name"])


HOSTINGS = [
    Hosting("S3Public", "selfhosted-full", "team-t"),
    Hosting("CloudFrontShared", "cloudfront-shared", "team-s"),
    Hosting("CloudFrontManaged", "cloudfront-managed", "platform", legacy=True),
]


@dataclass
class Cluster:
    """An example converged through provider-aws, its issuer, and what moto holds of it."""

    composite: Composite
    issuer: dict[str, Any]
    xr: dict[str, Any]
    releases: list[dict[str, Any]]
    sa_secret: dict[str, Any]
    roles: dict[str, dict[str, Any]]  # role name -> moto's view (trust policy...)
    role_arns: dict[str, str]  # role name -> ARN (the provider's atProvider)
    oidc_provider_arn: str
    documents: dict[str, tuple[str, bytes]]  # URL path -> what moto holds

    @property
    def issuer_url(self) -> str:
        return str(self.issuer["issuerURL"])

    @property
    def issuer_key(self) -> str:
        """The IAM condition key prefix of the issuer: its URL without the scheme."""
        return self.issuer_url.removeprefix("https://")


@contextlib.contextmanager
def installed_api(cp: AwsControlPlane, *, legacy: bool) -> Iterator[tuple[dict[str, Any], Providers]]:
    """One flavour's API and its played providers (CAPI's objects, the Releases), then every
    XR of it deleted through the real provider and the API removed: apis/v1's claim kind is
    ClusterPlugin, as is apis/v2's XR, so the two cannot be installed at once."""
    providers = Providers(cp.kube, namespaced=not legacy, real_kinds=AWS_KINDS)
    providers.start()
    flavour = "v1" if legacy else "v2"
    try:
        yield cp.install_api(flavour), providers
    finally:
        # Also after a failure: the next hosting may need the other flavour.
        try:
            cp.remove_api(flavour)
        finally:
            providers.stop()


@pytest.fixture(scope="module", params=HOSTINGS, ids=[h.name for h in HOSTINGS])
def cluster(request: pytest.FixtureRequest, aws_control_plane: AwsControlPlane, real_provider_aws: Process, moto: Moto, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    hosting: Hosting = request.param
    with installed_api(aws_control_plane, legacy=hosting.legacy) as (api, providers):
        yield converged(hosting, aws_control_plane, api, providers, moto, tmp_path_factory.mktemp("issuer"))


def converged(hosting: Hosting, cp: AwsControlPlane, api: dict[str, Any], providers: Providers, moto: Moto, work: Path) -> Cluster:  # noqa: PLR0917
    """The hosting's example converged through provider-aws; what the tests read of it."""
    kind = ClusterScopedComposite if hosting.legacy else Composite
    composite = kind(cp, providers, hosting.example, api, hosting.namespace)
    hosting.prepare(moto, composite.manifest)
    issuer = issuer_of(composite.manifest, api, work)
    xr = converge(composite)
    composed = composite.composed()
    releases = [o for o in composed.values() if o["kind"] == "Release"]
    sa_secret = next(o for o in composite.required() if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-sa"))
    roles = moto.roles()
    role_arns = {o["metadata"]["annotations"]["crossplane.io/external-name"]: o["status"]["atProvider"]["arn"] for o in composed.values() if o["kind"] == "Role"}
    oidc = [arn for arn, p in moto.oidc_providers().items() if "https://" + p["url"].removeprefix("https://") == issuer["issuerURL"]]
    assert len(oidc) == 1, f"moto holds no single OIDC provider for {issuer['issuerURL']}: {moto.oidc_providers()}"
    objects = [o["spec"]["forProvider"] for o in composed.values() if o["kind"] == "Object"]
    buckets = {fp["bucket"] for fp in objects}
    assert len(buckets) == 1, buckets
    held = moto.buckets()[buckets.pop()]["objects"]
    return Cluster(composite, issuer, xr, releases, sa_secret, {n: roles[n] for n in role_arns}, role_arns, oidc[0], issuer_documents(issuer["issuerURL"], held))


@pytest.fixture(scope="module")
def workload(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeadmWorkload]:
    options = {"extra_args": kubeadm_api_server_args(cluster.issuer), "sa_secret": cluster.sa_secret}
    with running_control_plane(tmp_path_factory.mktemp("workload"), KubeadmWorkload, **options) as cp:
        assert isinstance(cp, KubeadmWorkload)
        yield cp


@pytest.fixture(scope="module")
def renderings(cluster: Cluster) -> list[Rendering]:
    return addon_renderings(cluster.releases)


@pytest.fixture(scope="module")
def webhook(workload: KubeadmWorkload, renderings: list[Rendering]) -> PodIdentityWebhook:
    found = [r for r in renderings if r.release.chart == WEBHOOK_CHART]
    assert len(found) == 1, f"the function composed no single {WEBHOOK_CHART} Release: {[str(r.release) for r in renderings]}"
    return PodIdentityWebhook.start(workload, found[0], workload.tool("pod-identity-webhook"))


@pytest.fixture(scope="module")
def service_accounts(renderings: list[Rendering]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> role ARN, of every rendered ServiceAccount with the annotation."""
    found = role_service_accounts(renderings)
    assert found, "no rendered ServiceAccount carries a role"
    return found


@pytest.fixture(scope="module")
def workloads(workload: KubeadmWorkload, webhook: PodIdentityWebhook, renderings: list[Rendering], service_accounts: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """The add-ons' Deployments and DaemonSets, applied once the webhook knows every
    ServiceAccount (it mutates a pod only if its cache holds the pod's ServiceAccount)."""
    apply_service_accounts(workload.kube, renderings)
    wanted = {f"{ns}/{name}" for ns, name in service_accounts}
    workload.kube.wait_for(lambda: wanted <= set(webhook.cached()), f"the webhook's cache holding {sorted(wanted)}", timeout_s=60)
    return apply_workloads(workload.kube, renderings)


@pytest.fixture(scope="module")
def site(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IssuerSite]:
    served = IssuerSite(tmp_path_factory.mktemp("issuer-site"), cluster.issuer_url, cluster.documents)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def pods(workload: KubeadmWorkload, workloads: list[dict[str, Any]], service_accounts: dict[tuple[str, str], str]) -> dict[str, list[dict[str, Any]]]:
    """<kind>/<namespace>/<name> -> the pods kube-controller-manager made, of every Deployment
    and DaemonSet whose ServiceAccount has a role."""
    kube = workload.kube
    with_role = [w for w in workloads if (w["metadata"]["namespace"], w["spec"]["template"]["spec"].get("serviceAccountName", "default")) in service_accounts]
    return {f"{w['kind']}/{w['metadata']['namespace']}/{w['metadata']['name']}": kube.wait_for(partial(made_pods, kube, w), f"pods of {w['metadata']['name']}", timeout_s=120) for w in with_role}


def projection(pod: dict[str, Any]) -> dict[str, Any]:
    """The serviceAccountToken source of the webhook's projected volume in ``pod`` ({} if none)."""
    volume: dict[str, Any] = next((v for v in pod["spec"].get("volumes", []) if v["name"] == TOKEN_VOLUME), {})
    sources = volume.get("projected", {}).get("sources", [])
    return dict(sources[0].get("serviceAccountToken", {})) if sources else {}


@pytest.fixture(scope="module")
def tokens(workload: KubeadmWorkload, pods: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """A token of each ServiceAccount with a role, minted as its pods' projected volume asks
    (its audience and expirationSeconds, through TokenRequest as the kubelet does)."""
    out = {}
    for found in pods.values():
        for pod in found:
            sa = (pod["metadata"]["namespace"], pod["spec"]["serviceAccountName"])
            source = projection(pod)
            assert source, f"pod {pod['metadata']['name']} has no {TOKEN_VOLUME} volume to mint a token as"
            out[sa] = token_request(workload.server, workload.tls(), *sa, audience=source["audience"], seconds=source["expirationSeconds"])
    return out


@pytest.fixture(scope="module")
def simulator() -> IamSimulator:
    return IamSimulator.installed()


def made_pods(kube: Kube, workload: dict[str, Any]) -> list[dict[str, Any]] | None:
    return pods_of(kube, workload) or None


def test_the_workload_api_server_runs_as_kubeadm_would_for_the_cluster(cluster: Cluster, workload: KubeadmWorkload) -> None:
    """--service-account-issuer is the URL `issuer` prints (the XR's status and the discovery
    document moto holds say the same), --api-audiences is sts.amazonaws.com, and the key
    files hold the <cluster>-sa Secret's pair."""
    flags = dict(a.removeprefix("--").split("=", 1) for a in workload.apiserver_argv[1:] if a.startswith("--") and "=" in a)
    assert flags["service-account-issuer"] == cluster.issuer_url == cluster.xr["status"]["issuerURL"]
    assert STS_AUDIENCE in flags["api-audiences"].split(","), flags["api-audiences"]
    assert Path(flags["service-account-key-file"]).read_bytes() == secret_bytes(cluster.sa_secret, "tls.crt")
    assert Path(flags["service-account-signing-key-file"]).read_bytes() == secret_bytes(cluster.sa_secret, "tls.key")
    discovery = json.loads(cluster.documents[urlsplit(cluster.issuer_url).path.rstrip("/") + DISCOVERY_PATH][1])
    assert discovery["issuer"] == cluster.issuer_url, discovery
    print(f"\nkube-apiserver: {' '.join(a for a in workload.apiserver_argv if 'service-account' in a or 'audiences' in a)}")


def test_the_add_ons_pods_carry_their_role_and_the_token_volume(cluster: Cluster, webhook: PodIdentityWebhook, pods: dict[str, list[dict[str, Any]]], service_accounts: dict[tuple[str, str], str]) -> None:
    """Each pod of a ServiceAccount with a role: AWS_ROLE_ARN is the role the function composed
    for it, AWS_WEB_IDENTITY_TOKEN_FILE the projected token for sts.amazonaws.com, and the
    region and regional STS endpoint the function's webhook Release asks for."""
    composed_arns = set(cluster.role_arns.values())
    assert set(service_accounts.values()) <= composed_arns, (service_accounts, composed_arns)
    assert set(cluster.xr["status"]["roleARNs"].values()) == set(service_accounts.values()), cluster.xr["status"]["roleARNs"]
    covered = {(p["metadata"]["namespace"], p["spec"]["serviceAccountName"]) for ps in pods.values() for p in ps}
    assert covered == set(service_accounts), f"ServiceAccounts with a role but no pod: {set(service_accounts) - covered}"
    # The webhook adds AWS_REGION and AWS_DEFAULT_REGION unless the container sets either (the
    # EBS chart's ebs-plugin sets AWS_REGION from the value the function gives it).
    region = cluster.issuer["region"]
    problems = []
    for name, found in sorted(pods.items()):
        for pod in found:
            sa = (pod["metadata"]["namespace"], pod["spec"]["serviceAccountName"])
            source = projection(pod)
            if source.get("audience") != STS_AUDIENCE:
                problems.append(f"{name} {pod['metadata']['name']}: token volume source {source}")
            for container in pod["spec"]["containers"]:
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                mount = next((m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] == TOKEN_VOLUME), None)
                if env.get("AWS_ROLE_ARN") != service_accounts[sa]:
                    problems.append(f"{name} {container['name']}: AWS_ROLE_ARN {env.get('AWS_ROLE_ARN')!r}, composed {service_accounts[sa]}")
                if mount is None or env.get("AWS_WEB_IDENTITY_TOKEN_FILE") != f"{mount}/{source.get('path')}":
                    problems.append(f"{name} {container['name']}: AWS_WEB_IDENTITY_TOKEN_FILE {env.get('AWS_WEB_IDENTITY_TOKEN_FILE')!r}, mount {mount}")
                regional = {"AWS_REGION": env.get("AWS_REGION"), "AWS_STS_REGIONAL_ENDPOINTS": env.get("AWS_STS_REGIONAL_ENDPOINTS")}
                if regional != {"AWS_REGION": region, "AWS_STS_REGIONAL_ENDPOINTS": "regional"} or env.get("AWS_DEFAULT_REGION", region) != region:
                    problems.append(f"{name} {container['name']}: {regional}, AWS_DEFAULT_REGION {env.get('AWS_DEFAULT_REGION')!r}: not the cluster's region {region}, regional STS")
    assert not problems, "\n".join(problems)
    print(f"\nthe webhook: {' '.join(webhook.argv[1:])}")
    print("\n".join(f"{n}: {len(ps)} pod(s), AWS_ROLE_ARN {service_accounts[(ps[0]['metadata']['namespace'], ps[0]['spec']['serviceAccountName'])]}, token {projection(ps[0])}" for n, ps in sorted(pods.items())))


def test_every_token_verifies_against_the_documents_moto_holds(cluster: Cluster, site: IssuerSite, tokens: dict[tuple[str, str], str]) -> None:
    for (ns, name), token in tokens.items():
        claims = verify(site, token)
        assert claims["iss"] == cluster.issuer_url
        assert claims["sub"] == f"system:serviceaccount:{ns}:{name}"
        assert claims["aud"] == [STS_AUDIENCE]
    assert {p.split("?")[0] for p in site.served} >= set(cluster.documents), site.served
    assert site.proxy.asked and all(a == f"CONNECT {site.host}:443" for a in site.proxy.asked), site.proxy.asked


def test_the_trust_policies_allow_the_diagonal_only(cluster: Cluster, site: IssuerSite, tokens: dict[tuple[str, str], str], service_accounts: dict[tuple[str, str], str], simulator: IamSimulator) -> None:
    """ServiceAccount x role: AssumeRoleWithWebIdentity allowed for a ServiceAccount's own role only."""
    claims = {sa: verify(site, t) for sa, t in tokens.items()}
    pairs = [(sa, role) for sa in claims for role in sorted(cluster.roles)]
    cases = [web_identity_case(cluster.oidc_provider_arn, cluster.issuer_key, cluster.role_arns[role], cluster.roles[role]["trust"], claims[sa]) for sa, role in pairs]
    verdicts = dict(zip(pairs, simulator.evaluate(cases), strict=True))
    lines = [f"{'':40} " + " ".join(f"{r[-24:]:>24}" for r in sorted(cluster.roles))]
    lines += [f"{ns + '/' + n:40} " + " ".join(f"{verdicts[((ns, n), r)]:>24}" for r in sorted(cluster.roles)) for ns, n in sorted(claims)]
    print("\nServiceAccount x role (sts:AssumeRoleWithWebIdentity):\n" + "\n".join(lines))
    wrong = [f"{sa} x {role}: {v}" for (sa, role), v in verdicts.items() if (v == ALLOWED) != (cluster.role_arns[role] == service_accounts[sa])]
    assert not wrong, "\n".join(wrong)
    allowed_roles = {role for (_, role), v in verdicts.items() if v == ALLOWED}
    assert allowed_roles == {r for r, arn in cluster.role_arns.items() if arn in set(service_accounts.values())}


def test_a_token_for_another_audience_is_refused(cluster: Cluster, workload: KubeadmWorkload, site: IssuerSite, service_accounts: dict[tuple[str, str], str], simulator: IamSimulator) -> None:
    sa = sorted(service_accounts)[0]
    token = token_request(workload.server, workload.tls(), *sa, audience="https://kubernetes.default.svc", seconds=3600)
    with pytest.raises(jwt.InvalidAudienceError):
        verify(site, token)
    claims = jwt.decode(token, options={"verify_signature": False})
    role = next(r for r, arn in cluster.role_arns.items() if arn == service_accounts[sa])
    [verdict] = simulator.evaluate([web_identity_case(cluster.oidc_provider_arn, cluster.issuer_key, cluster.role_arns[role], cluster.roles[role]["trust"], claims)])
    assert verdict != ALLOWED, f"{sa}'s own role {role} trusts a token for {claims['aud']}"


def test_a_token_signed_by_another_key_under_the_same_kid_is_refused(cluster: Cluster, site: IssuerSite, tokens: dict[tuple[str, str], str], service_accounts: dict[tuple[str, str], str], simulator: IamSimulator) -> None:
    """Same header and claims, another RSA key: the signature check is what refuses it (the
    trust policy alone, which sees only the claims, would let it in)."""
    sa, token = sorted(tokens.items())[0]
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, other, algorithm=header["alg"], headers={"kid": header["kid"]})
    assert jwt.get_unverified_header(forged)["kid"] == header["kid"]
    with pytest.raises(jwt.InvalidSignatureError):
        verify(site, forged)
    role = next(r for r, arn in cluster.role_arns.items() if arn == service_accounts[sa])
    [verdict] = simulator.evaluate([web_identity_case(cluster.oidc_provider_arn, cluster.issuer_key, cluster.role_arns[role], cluster.roles[role]["trust"], claims)])
    assert verdict == ALLOWED, verdict


def test_a_token_from_another_clusters_issuer_is_refused(cluster: Cluster, aws_control_plane: AwsControlPlane, site: IssuerSite, service_accounts: dict[tuple[str, str], str], simulator: IamSimulator) -> None:
    """The same ServiceAccount in another cluster (the management cluster's API server, its own
    issuer and key): no key of this issuer's JWKS verifies it, and no role trusts its issuer."""
    ns, name = sorted(service_accounts)[0]
    kube = aws_control_plane.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    tls = ssl.create_default_context(cafile=str(aws_control_plane.ca.path))
    tls.load_cert_chain(str(aws_control_plane.admin.cert), str(aws_control_plane.admin.key))
    token = token_request(aws_control_plane.server, tls, ns, name, audience=STS_AUDIENCE, seconds=3600)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] != cluster.issuer_url and claims["sub"] == f"system:serviceaccount:{ns}:{name}", claims
    with pytest.raises(jwt.PyJWTError):
        verify(site, token)
    other_key = claims["iss"].removeprefix("https://")
    other_provider = cluster.oidc_provider_arn.split(":oidc-provider/")[0] + f":oidc-provider/{other_key}"
    cases = [web_identity_case(other_provider, other_key, cluster.role_arns[r], cluster.roles[r]["trust"], claims) for r in sorted(cluster.roles)]
    verdicts = simulator.evaluate(cases)
    assert ALLOWED not in verdicts, dict(zip(sorted(cluster.roles), verdicts, strict=True))
