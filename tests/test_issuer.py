"""``function-cluster-plugin issuer``: the URL the function will use, and the KCP change it needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function_tools import input_files, issuer, render
from function_tools.cli import cli
from tests.scenarios import own_input

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["issuer", *args], catch_exceptions=False)


def rendered_issuer(
    name: str, *, step_input: dict[str, Any] | None = None, xr: Path | None = None
) -> str:
    ex = EXAMPLES / name
    out = render.render(
        input_files.load_one(xr or ex / "xr.yaml", "XR"),
        required=input_files.load_documents([ex / "required"]),
        step_input=own_input(name) if step_input is None else step_input,
    )
    assert out.fatal is None
    return str(out.documents[0]["status"]["issuerURL"])


def issuer_json(*args: str) -> dict[str, Any]:
    r = invoke(*args, "-o", "json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def write_xr(tmp_path: Path, name: str, change: Any) -> Path:
    xr = yaml.safe_load((EXAMPLES / name / "xr.yaml").read_text())
    change(xr)
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    return path


def test_selfhosted_issuer_is_what_the_function_writes_to_status() -> None:
    doc = issuer_json(str(EXAMPLES / "selfhosted-full" / "xr.yaml"))
    assert doc["mode"] == "SelfHosted"
    assert doc["issuerURL"] == rendered_issuer("selfhosted-full")
    assert doc["regionFrom"] == "spec.region"


def test_example_control_plane_already_carries_the_issuer() -> None:
    doc = issuer_json(str(EXAMPLES / "selfhosted-full" / "xr.yaml"))
    kcp = yaml.safe_load(
        (EXAMPLES / "selfhosted-full" / "required" / "kubeadmcontrolplane.yaml").read_text()
    )
    args = kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"]
    assert {"name": "service-account-issuer", "value": doc["issuerURL"]} in args


def test_region_from_the_awscluster_of_a_legacy_claim() -> None:
    name = "calico-legacy-claim"
    xr = str(EXAMPLES / name / "xr.yaml")
    # Its CAPI objects are v1beta1, which its own Composition asks for.
    own = ["--composition", str(EXAMPLES / name / "composition.yaml")]
    doc = issuer_json(xr, "--required", str(EXAMPLES / name / "required"), *own)
    assert doc["issuerURL"] == rendered_issuer(name)
    assert doc["regionFrom"] == "AWSCluster spec.region"
    assert doc["namespace"] == "platform"  # from the claim-namespace label
    # Without the AWSCluster, --region must say it.
    r = invoke(xr)
    assert r.exit_code == 2
    assert "region is unknown" in r.stderr
    assert issuer_json(xr, "--region", "eu-west-1")["issuerURL"] == doc["issuerURL"]


def test_v1beta2_patch_is_a_name_value_list_and_v1beta1_a_map() -> None:
    doc = issuer_json(str(EXAMPLES / "selfhosted-full" / "xr.yaml"))
    url = doc["issuerURL"]
    v2 = doc["kubeadmControlPlane"]["v1beta2"]
    assert v2["apiVersion"] == "controlplane.cluster.x-k8s.io/v1beta2"
    assert v2["kind"] == "KubeadmControlPlane"
    args = v2["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"]
    assert args == [
        {"name": "service-account-issuer", "value": url},
        {"name": "api-audiences", "value": "sts.amazonaws.com"},
    ]
    v1 = doc["kubeadmControlPlane"]["v1beta1"]
    assert v1["apiVersion"] == "controlplane.cluster.x-k8s.io/v1beta1"
    assert v1["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"] == {
        "service-account-issuer": url,
        "api-audiences": "sts.amazonaws.com",
    }
    assert any(issuer.KUBEADM_DEFAULT_ISSUER in n for n in doc["notes"])


def test_text_and_yaml_outputs() -> None:
    xr = str(EXAMPLES / "selfhosted-full" / "xr.yaml")
    url = issuer_json(xr)["issuerURL"]
    text = invoke(xr).stdout
    assert f"    {url}\n" in text
    assert "- name: service-account-issuer" in text
    assert "service-account-issuer: " + url in text
    assert "BEFORE creating the cluster" in text
    assert yaml.safe_load(invoke(xr, "-o", "yaml").stdout)["issuerURL"] == url


def test_name_prefix_and_bucket_name_change_the_issuer(tmp_path: Path) -> None:
    xr = str(EXAMPLES / "selfhosted-full" / "xr.yaml")
    inp = tmp_path / "input.yaml"
    inp.write_text("apiVersion: fn.clusterplugin.dev/v1alpha1\nkind: Input\nnamePrefix: acme-\n")
    doc = issuer_json(xr, "--input", str(inp))
    assert doc["issuerURL"].startswith("https://acme-irsa-team-a-demo-")
    assert doc["issuerURL"] == rendered_issuer(
        "selfhosted-full", step_input={"namePrefix": "acme-"}
    )

    def bucket(name: str) -> Any:
        def change(x: dict[str, Any]) -> None:
            x["spec"]["irsa"]["bucketName"] = name

        return change

    # A bucket name must carry the XR's binding suffix, as the function demands: the
    # issuer is fixed at the cluster's first boot, so printing one it would refuse
    # would mean recreating the cluster.
    r = invoke(str(write_xr(tmp_path, "selfhosted-full", bucket("acme-irsa-demo"))))
    assert r.exit_code == 2
    assert r.stdout == ""
    assert "spec.irsa.bucketName: 'acme-irsa-demo' must end with '-1960e37ce9a93a17'" in r.stderr
    bound = "acme-irsa-demo-1960e37ce9a93a17"
    path = write_xr(tmp_path, "selfhosted-full", bucket(bound))
    assert issuer_json(str(path))["issuerURL"] == f"https://{bound}.s3.us-east-1.amazonaws.com"
    assert issuer_json(str(path))["issuerURL"] == rendered_issuer("selfhosted-full", xr=path)


def test_china_region_uses_the_china_dns_suffix(tmp_path: Path) -> None:
    def china(x: dict[str, Any]) -> None:
        x["spec"]["region"] = "cn-north-1"

    doc = issuer_json(str(write_xr(tmp_path, "selfhosted-full", china)))
    assert doc["issuerURL"].endswith(".s3.cn-north-1.amazonaws.com.cn")


EKS_PROVIDER = (
    "arn:aws:iam::111122223333:oidc-provider/"
    "oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
)
EKS_ISSUER = "https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"


def test_external_prints_the_eks_control_planes_issuer() -> None:
    """Left out of the XR, the External issuer is the AWSManagedControlPlane's, as rendered."""
    ex = EXAMPLES / "external-eks"
    required = ("--required", str(ex / "required"))
    r = invoke(str(ex / "xr.yaml"), *required)
    assert r.exit_code == 0, r.output
    assert EKS_ISSUER in r.stdout
    assert "nothing to change" in r.stdout
    doc = issuer_json(str(ex / "xr.yaml"), *required)
    assert doc == {
        "mode": "External",
        "issuerURL": EKS_ISSUER,
        "namespace": "payments",
        "clusterName": "prod",
        "oidcProviderARN": EKS_PROVIDER,
    }
    assert doc["issuerURL"] == rendered_issuer("external-eks")
    # Without the control plane it is not known: said, not guessed.
    r = invoke(str(ex / "xr.yaml"))
    assert r.exit_code != 0
    assert "status.oidcProvider.arn, which is not known yet" in r.output


def test_external_prints_the_given_issuer(tmp_path: Path) -> None:
    def given(x: dict[str, Any]) -> None:
        x["spec"]["irsa"] = {"mode": "External", "issuerURL": EKS_ISSUER, "oidcProviderARN": EKS_PROVIDER}

    doc = issuer_json(str(write_xr(tmp_path, "external-eks", given)))
    assert doc["issuerURL"] == EKS_ISSUER
    assert doc["oidcProviderARN"] == EKS_PROVIDER


def test_disabled_errors(tmp_path: Path) -> None:
    def disable(x: dict[str, Any]) -> None:
        x["spec"]["irsa"] = {"mode": "Disabled"}

    r = invoke(str(write_xr(tmp_path, "selfhosted-full", disable)))
    assert r.exit_code == 2
    assert r.stdout == ""
    assert "Disabled" in r.stderr


def test_conflicting_region_errors() -> None:
    r = invoke(str(EXAMPLES / "selfhosted-full" / "xr.yaml"), "--region", "eu-west-1")
    assert r.exit_code == 2
    assert "disagrees with spec.region us-east-1" in r.stderr


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda x: x["spec"].pop("clusterName"), "spec.clusterName"),
        (lambda x: x["spec"].update(clusterNamespace="other"), "spec.clusterNamespace"),
    ],
)
def test_invalid_xr_names_the_field(tmp_path: Path, change: Any, field: str) -> None:
    r = invoke(str(write_xr(tmp_path, "selfhosted-full", change)))
    assert r.exit_code == 2
    assert field in r.stderr


def test_cluster_scoped_xr_without_claim_uses_spec_cluster_namespace(tmp_path: Path) -> None:
    def unclaimed(x: dict[str, Any]) -> None:
        del x["metadata"]["labels"]
        del x["spec"]["claimRef"]
        x["spec"]["clusterNamespace"] = "platform"
        x["spec"]["region"] = "eu-west-1"

    path = write_xr(tmp_path, "calico-legacy-claim", unclaimed)
    doc = issuer_json(str(path))
    assert doc["namespace"] == "platform"
    assert doc["issuerURL"] == rendered_issuer("calico-legacy-claim")


def test_no_irsa_addon_still_prints_with_a_warning(tmp_path: Path) -> None:
    def calico_only(x: dict[str, Any]) -> None:
        x["spec"]["networking"] = {"calico": {}}
        x["spec"].pop("storage")
        x["spec"].pop("ingress")

    r = invoke(str(write_xr(tmp_path, "selfhosted-full", calico_only)))
    assert r.exit_code == 0
    assert "no add-on in the spec uses IRSA" in r.stderr
    assert "https://irsa-team-a-demo-" in r.stdout


# --- the issuer behind CloudFront -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("cloudfront-shared", "https://oidc.example.com/team-c/api"),
        ("cloudfront-managed", "https://auth-oidc.example.com"),
    ],
)
def test_cloudfront_issuer_is_what_the_function_writes_and_the_example_kcp_carries(
    name: str, url: str
) -> None:
    xr = str(EXAMPLES / name / "xr.yaml")
    doc = issuer_json(xr, "--required", str(EXAMPLES / name / "required"))
    assert doc["issuerURL"] == url == rendered_issuer(name)
    assert doc["hosting"]["type"] == "CloudFront"
    # The same control-plane patch as for any issuer.
    v1beta2 = doc["kubeadmControlPlane"]["v1beta2"]["spec"]["kubeadmConfigSpec"]
    args = v1beta2["clusterConfiguration"]["apiServer"]["extraArgs"]
    assert {"name": "service-account-issuer", "value": url} in args
    kcp = yaml.safe_load((EXAMPLES / name / "required" / "kubeadmcontrolplane.yaml").read_text())
    example_args = kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"]
    assert {"name": "service-account-issuer", "value": url} in example_args


def test_shared_issuer_text_names_the_bucket_and_path() -> None:
    r = invoke(str(EXAMPLES / "cloudfront-shared" / "xr.yaml"))
    assert r.exit_code == 0, r.output
    assert "behind the Shared CloudFront distribution" in r.stdout
    assert "\n    https://oidc.example.com/team-c/api\n" in r.stdout
    assert "acme-oidc-issuers" in r.stdout and "team-c/api/" in r.stdout


def test_cloudfront_issuer_needs_no_region(tmp_path: Path) -> None:
    def no_region(xr: dict[str, Any]) -> None:
        xr["spec"].pop("region")

    xr = write_xr(tmp_path, "cloudfront-shared", no_region)
    doc = issuer_json(str(xr))
    assert doc["issuerURL"] == "https://oidc.example.com/team-c/api"
    assert doc["region"] is None
    # A region that rules CloudFront out is refused with the function's words.
    r = invoke(str(xr), "--region", "us-gov-west-1")
    assert r.exit_code == 2
    assert "spec.irsa.hosting: us-gov-west-1 is in aws-us-gov: CloudFront is not" in r.stderr


@pytest.mark.parametrize("output", ["text", "json", "yaml"])
def test_says_which_name_prefix_it_assumed_without_a_composition(
    tmp_path: Path, output: str
) -> None:
    """The prefix starts the bucket's name, so the issuer URL baked in at first boot: without
    --composition or --input it says on stderr that it took the default; stdout stays the
    report (JSON and YAML parse)."""
    xr = str(EXAMPLES / "selfhosted-full" / "xr.yaml")
    note = (
        "note: no --composition or --input, so the default name prefix '' (input.namePrefix): "
        "if the Composition that will compose this XR sets one, pass it with --composition\n"
    )
    r = invoke(xr, "-o", output)
    assert r.exit_code == 0
    assert r.stderr == note
    if output != "text":
        assert yaml.safe_load(r.stdout)["issuerURL"].startswith("https://irsa-team-a-demo-")
    comp = tmp_path / "composition.yaml"
    shipped = yaml.safe_load((ROOT / "apis" / "v2" / "composition.yaml").read_text())
    for step in shipped["spec"]["pipeline"]:
        if step.get("input", {}).get("kind") == "Input":
            step["input"]["namePrefix"] = "acme-"
    comp.write_text(yaml.safe_dump(shipped))
    r = invoke(xr, "--composition", str(comp), "-o", output)
    assert r.exit_code == 0
    assert r.stderr == ""
    assert "https://acme-irsa-team-a-demo-" in r.stdout


# --- IssuerReady: the API server signs with the issuer the roles trust ---------------------------

SELFHOSTED_ISSUER = "https://irsa-team-a-demo-1960e3.s3.us-east-1.amazonaws.com"


def _issuer_condition(name: str, args: list[dict[str, str]] | None = None, **spec: Any) -> dict[str, str]:
    """The IssuerReady condition the function sets for an example, its KCP's extraArgs replaced."""
    from tests.scenarios import by_name, find

    world = by_name(name).world(staged=False)
    if args is not None:
        kcp = find(world.required, "KubeadmControlPlane")
        kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"] = args
    world.xr["spec"].update(spec)
    world.run(2)
    return next(c for c in world.xr["status"]["conditions"] if c["type"] == "IssuerReady")


def _said(cond: dict[str, str]) -> tuple[str, str, str]:
    return cond["status"], cond["reason"], cond["message"]


def test_the_issuer_condition_is_true_when_the_api_server_signs_with_the_trusted_issuer() -> None:
    assert _said(_issuer_condition("selfhosted-full")) == (
        "True",
        "Matches",
        (f"KubeadmControlPlane team-a/demo-control-plane signs with {SELFHOSTED_ISSUER}, the issuer "
        "the add-on roles trust"),
    )
    # Not the first issuer: the API server signs with the first one.
    second = [
        {"name": "service-account-issuer", "value": "https://kubernetes.default.svc.cluster.local"},
        {"name": "service-account-issuer", "value": SELFHOSTED_ISSUER},
    ]
    assert _issuer_condition("selfhosted-full", second)["reason"] == "IssuerMismatch"
    # Where no issuer is trusted or the cluster signs with its own, nothing to compare.
    assert _said(_issuer_condition("eks-pod-identity"))[:2] == ("True", "NotRequired")
    assert _said(_issuer_condition("external-eks"))[:2] == ("True", "ManagedByEKS")


def test_another_issuer_or_none_is_a_condition_naming_both_and_the_fix() -> None:
    other = [{"name": "service-account-issuer", "value": "https://oidc.example.com/demo"}]
    cond = _issuer_condition("selfhosted-full", other)
    assert _said(cond) == (
        "False",
        "IssuerMismatch",
        ("KubeadmControlPlane team-a/demo-control-plane starts the API server with "
        "--service-account-issuer=https://oidc.example.com/demo, but the add-on roles trust "
        f"{SELFHOSTED_ISSUER}: STS refuses the tokens of every add-on; set service-account-issuer "
        f"to {SELFHOSTED_ISSUER}, first, in its spec.kubeadmConfigSpec.clusterConfiguration."
        "apiServer.extraArgs (function-cluster-plugin issuer prints the patch; the control plane "
        "rolls out)"),
    )
    cond = _issuer_condition("selfhosted-full", [{"name": "api-audiences", "value": "sts.amazonaws.com"}])
    assert cond["reason"] == "IssuerNotSet"
    assert "sets no --service-account-issuer, so the API server signs with kubeadm's default " in cond["message"]
    assert "https://kubernetes.default.svc.cluster.local" in cond["message"]
    # External on a kubeadm cluster: the given issuer, or the API server's, must change.
    external = {"mode": "External", "issuerURL": "https://oidc.example.com/demo",
                "oidcProviderARN": "arn:aws:iam::123456789012:oidc-provider/oidc.example.com/demo"}
    cond = _issuer_condition("selfhosted-full", irsa=external)
    assert cond["reason"] == "IssuerMismatch"
    assert "give spec.irsa.issuerURL (and oidcProviderARN) the API server's issuer, or set" in cond["message"]
    assert _issuer_condition("selfhosted-full", other, irsa=external)["reason"] == "Matches"


# What provider-aws v2.5.0 reported in CI (stop 44) after it lost the answer of its own create.
LOST_CREATE = (
    "create failed: async create failed: failed to create the resource: [{0 creating IAM OIDC "
    "Provider: operation error IAM: CreateOpenIDConnectProvider, https response error StatusCode: "
    "409, RequestID: jCp3qYBslyO8UI2nHnh2vGOuD55OTcVO6R2QvO3Utbl9ikCtEn3O, EntityAlreadyExists: "
    "Unknown  []}]"
)


@pytest.mark.parametrize("example", ["selfhosted-full", "cloudfront-shared", "cloudfront-managed"])
def test_an_oidc_provider_stuck_on_its_lost_create_says_what_to_do(example: str) -> None:
    """crossplane/upjet#632: provider-aws has no ARN for an OIDC provider IAM holds (it lost track
    of its own create) and keeps creating it; IAM answers EntityAlreadyExists. The irsa plugin is Blocked, naming the
    provider's URL and the annotation that makes provider-aws adopt it; a Synced=False for
    another reason keeps it waiting."""
    from function import fn, structs
    from tests.scenarios import by_name

    world = by_name(example).world(staged=False)
    for _ in range(40):
        if "irsa-oidc-provider" in world.composed:
            break
        world.run(1)
    assert "irsa-oidc-provider" in world.composed, sorted(world.composed)

    def irsa_with(message: str) -> dict[str, Any]:
        req = world.request()
        observed = req.observed.resources["irsa-oidc-provider"].resource
        conditions = [
            {"type": "Ready", "status": "False", "reason": "Creating"},
            {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message},
        ]
        structs.update(observed, {"status": {"conditions": conditions}})
        status = structs.to_python(fn.run(req).desired.composite.resource.fields["status"])
        return next(p for p in status["plugins"] if p["name"] == "irsa")

    obj = world.composed["irsa-oidc-provider"].obj
    url = obj["spec"]["forProvider"]["url"]
    namespace = obj["metadata"].get("namespace")
    resource = "openidconnectproviders." + obj["apiVersion"].split("/")[0]
    where = f" -n {namespace}" if namespace else ""
    irsa = irsa_with(LOST_CREATE)
    assert irsa["phase"] == "Blocked", irsa
    assert irsa["message"] == (
        f"irsa-oidc-provider: IAM already has an OIDC provider for {url} and the provider, with "
        "no ARN for it, retries the create forever (Synced=False: EntityAlreadyExists; "
        "crossplane/upjet#632): if it is this cluster's, adopt it with kubectl annotate "
        f"{resource}{where} {obj['metadata']['name']} crossplane.io/external-name="
        f"arn:<partition>:iam::<account-id>:oidc-provider/{url.removeprefix('https://')}"
    ), irsa["message"]
    other = irsa_with("create failed: ... StatusCode: 400, InvalidInput: thumbprint list too long")
    assert other["phase"] != "Blocked", other
