"""The CAPA cluster template (templates/cluster-template-clusterplugin.yaml) and ``template-values``.

No Go here: the template is substituted as clusterctl does for its two variable forms
(``tests/capa_template.py``); ``e2e/controlplane/test_capa_template.py`` runs the real
clusterctl and API server.
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function import fn
from function.addons import vpc_cni
from function_tools import issuer, template_values
from function_tools.cli import cli
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests import capa_template
from tests.kube_schema import CRDRegistry, assert_valid, validate_with_schema

ROOT = Path(__file__).resolve().parent.parent
XRD = ROOT / "apis" / "v2" / "definition.yaml"
# CAPA v2.11.1's templates/cluster-template.yaml: its kinds, and the variables it asks for.
CAPA_KINDS = {
    "Cluster": 1,
    "AWSCluster": 1,
    "KubeadmControlPlane": 1,
    "AWSMachineTemplate": 2,
    "MachineDeployment": 1,
    "KubeadmConfigTemplate": 1,
    "ClusterResourceSet": 2,
    "ConfigMap": 2,
}
CAPA_VARIABLES = {
    "CLUSTER_NAME",
    "AWS_REGION",
    "AWS_SSH_KEY_NAME",
    "CONTROL_PLANE_MACHINE_COUNT",
    "KUBERNETES_VERSION",
    "AWS_CONTROL_PLANE_MACHINE_TYPE",
    "WORKER_MACHINE_COUNT",
    "AWS_NODE_MACHINE_TYPE",
    "KUBERNETES_AWS_CCM_VERSION",  # the crs-ccm ConfigMap's image, gone with it
}
NAMESPACE, CLUSTER, REGION = "team-b", "blue", "eu-west-1"
CAPA_VALUES = {
    "KUBERNETES_VERSION": "v1.33.4",
    "CONTROL_PLANE_MACHINE_COUNT": "3",
    "WORKER_MACHINE_COUNT": "2",
    "AWS_SSH_KEY_NAME": "default",
    "AWS_CONTROL_PLANE_MACHINE_TYPE": "t3.large",
    "AWS_NODE_MACHINE_TYPE": "t3.large",
}


def _values(*args: str) -> dict[str, str]:
    """What ``template-values -o env`` exports (a shell would read it the same way)."""
    result = CliRunner().invoke(
        cli,
        ["template-values", CLUSTER, "--namespace", NAMESPACE, "--region", REGION, *args, "-o", "env"],
    )
    assert result.exit_code == 0, result.output
    out = {}
    for line in result.output.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            (out[name],) = shlex.split(value)
    return out


def _objects(values: dict[str, str]) -> list[dict[str, Any]]:
    text = capa_template.substitute(
        capa_template.text(), {"CLUSTER_NAME": CLUSTER, **CAPA_VALUES, **values}
    )
    return capa_template.objects(text, NAMESPACE)


def _documented_variables() -> set[str]:
    """The first column of docs/capa-template.md's Variables table."""
    section = capa_template.DOC.read_text().split("## Variables", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z_]+)` \|", section, re.MULTILINE))


def test_the_variables_are_capas_and_the_documented_ones() -> None:
    found = capa_template.variables(capa_template.text())
    ours = {
        template_values.ISSUER_VARIABLE,
        template_values.COMPOSITION_VARIABLE,
    }
    assert set(found) == (CAPA_VARIABLES - {"KUBERNETES_AWS_CCM_VERSION"}) | ours
    assert set(found) == _documented_variables()
    # Only the Composition has a default: the package's Composition, the XRD's default.
    assert {k: v for k, v in found.items() if v is not None} == {
        template_values.COMPOSITION_VARIABLE: "clusterplugins.clusterplugin.dev"
    }
    # What template-values exports is a template variable, every one it is the source of.
    assert set(_values()) <= set(found)


def test_capas_kinds_without_the_cluster_resource_sets_and_with_the_clusterplugin() -> None:
    kinds = {k: len(v) for k, v in capa_template.by_kind(_objects(_values())).items()}
    expected = {k: n for k, n in CAPA_KINDS.items() if k not in {"ClusterResourceSet", "ConfigMap"}}
    assert kinds == {**expected, "ClusterPlugin": 1}
    cluster = capa_template.one(_objects(_values()), "Cluster")
    # CAPA's crs-ccm and crs-csi select clusters by these labels: none may select this one.
    assert not {"ccm", "csi"} & set(cluster["metadata"].get("labels") or {})


def test_every_object_validates_against_the_vendored_crds() -> None:
    template_crds = CRDRegistry(capa_template.TEMPLATE_CRDS).load()
    xrd = yaml.safe_load(XRD.read_text())
    (version,) = xrd["spec"]["versions"]
    objs = _objects(_values())
    for obj in [*objs, *capa_template.settled(objs)]:
        if obj["kind"] == "ClusterPlugin":
            # spec.crossplane (compositionRef) is Crossplane's: it adds it to the XR's CRD.
            ours = copy.deepcopy(obj)
            del ours["spec"]["crossplane"]
            errors = validate_with_schema(ours, version["schema"]["openAPIV3Schema"])
            assert not errors, errors
        elif template_crds.has(obj["apiVersion"], obj["kind"]):
            errors = template_crds.compiled(obj["apiVersion"], obj["kind"]).errors(obj)
            assert not errors, (obj["kind"], errors)
        else:
            assert_valid(obj)


def test_the_vendored_template_crds_are_the_releases_the_project_pins() -> None:
    """The extra CRDs come from the same releases as tests/fixtures/crds (PROVENANCE.md)."""
    provenance = (capa_template.TEMPLATE_CRDS / "PROVENANCE.md").read_text()
    shared = (ROOT / "tests" / "fixtures" / "crds" / "PROVENANCE.md").read_text()
    for repository in ("kubernetes-sigs/cluster-api", "kubernetes-sigs/cluster-api-provider-aws"):
        row = next(line for line in shared.splitlines() if line.startswith(f"| {repository} |"))
        tag = row.split("|")[2].strip()
        assert f"| {repository} | {tag} |" in provenance, (repository, tag)
    for path in capa_template.TEMPLATE_CRDS.glob("*/*.yaml"):
        assert f"`{path.parent.name}/{path.name}`" in provenance, path


@pytest.mark.parametrize("prefix", ["", "acme-"])
def test_the_issuer_flag_is_the_issuer_of_the_clusterplugin_it_makes(prefix: str, tmp_path: Path) -> None:
    composition = yaml.safe_load((ROOT / "apis" / "v2" / "composition.yaml").read_text())
    (step,) = composition["spec"]["pipeline"]
    step["input"]["namePrefix"] = prefix
    path = tmp_path / "composition.yaml"
    path.write_text(yaml.safe_dump(composition))
    values = _values("--composition", str(path))
    objs = _objects(values)
    xr = capa_template.one(objs, "ClusterPlugin")
    assert xr["spec"]["crossplane"]["compositionRef"]["name"] == composition["metadata"]["name"]
    computed = issuer.compute(xr, step_input=step["input"])
    assert computed.url == values[template_values.ISSUER_VARIABLE]
    assert computed.url.startswith(f"https://{prefix}irsa-{NAMESPACE}-{CLUSTER}-")
    assert computed.region == REGION
    # The flags `issuer` prints, and kubeadm's keys from <cluster>-sa.
    args = capa_template.api_server_args(capa_template.one(objs, "KubeadmControlPlane"))
    assert {a["name"]: a["value"] for a in computed.extra_args_v1beta2()}.items() <= args.items()
    assert args == {
        "service-account-issuer": computed.url,
        "api-audiences": issuer.STS_AUDIENCE,
        "service-account-key-file": "/etc/kubernetes/pki/sa.pub",
        "service-account-signing-key-file": "/etc/kubernetes/pki/sa.key",
    }


def test_the_cni_ingress_rules_are_what_the_vpc_cni_needs() -> None:
    awscluster = capa_template.one(_objects(_values()), "AWSCluster")
    assert awscluster["spec"]["network"]["cni"]["cniIngressRules"] == [
        need.capa_entry() for need in vpc_cni.PORTS
    ]


def test_the_function_takes_the_generated_cluster_to_a_ready_xr() -> None:
    """From the objects the template makes, with what CAPI and CAPA then report: every add-on
    installed, the issuer the control plane was started with, CAPA's groups enough."""
    objs = _objects(_values())
    xr = capa_template.one(objs, "ClusterPlugin")
    required = [*capa_template.settled(objs), capa_template.sa_secret(NAMESPACE, CLUSTER)]
    world = InMemoryCrossplane(copy.deepcopy(xr), required, ready_delay=1, runner=fn.run)
    for _ in range(40):
        rec = world.reconcile()
        assert rec.fatal is None, rec.fatal
        if world.xr_ready and not rec.created:
            break
    status = world.xr["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert world.xr_ready, conditions
    assert conditions["SecurityGroupsReady"]["reason"] == "Available", conditions
    args = capa_template.api_server_args(capa_template.one(objs, "KubeadmControlPlane"))
    assert status["issuerURL"] == args["service-account-issuer"]
    releases = {n for n in world.composed if n.endswith("-release")}
    assert {"ccm-release", "cni-release", "ebs-release"} <= releases, sorted(world.composed)


def test_without_the_awsclusters_rules_the_function_says_they_are_missing() -> None:
    """The check above can fail: CAPA's default (Calico) rules leave the VPC CNI's ports shut."""
    objs = _objects(_values())
    del capa_template.one(objs, "AWSCluster")["spec"]["network"]["cni"]
    xr = capa_template.one(objs, "ClusterPlugin")
    required = [*capa_template.settled(objs), capa_template.sa_secret(NAMESPACE, CLUSTER)]
    world = InMemoryCrossplane(copy.deepcopy(xr), required, ready_delay=1, runner=fn.run)
    world.reconcile()
    conditions = {c["type"]: c for c in world.xr["status"]["conditions"]}
    assert conditions["SecurityGroupsReady"]["reason"] == "IngressRulesMissing", conditions


def test_the_missing_rules_fix_names_the_referenced_awscluster_and_its_clusterclass() -> None:
    """A Cluster made from a ClusterClass (CAPA's simple-clusterclass flavour): its AWSCluster is
    generated (another name) and owned by the topology controller, which reverts a direct edit."""
    objs = _objects(_values())
    aws_cluster = capa_template.one(objs, "AWSCluster")
    del aws_cluster["spec"]["network"]["cni"]
    generated = f"{CLUSTER}-x7k2p"
    aws_cluster["metadata"]["name"] = generated
    cluster = capa_template.one(objs, "Cluster")
    cluster["spec"]["infrastructureRef"]["name"] = generated
    xr = capa_template.one(objs, "ClusterPlugin")
    required = [*capa_template.settled(objs), capa_template.sa_secret(NAMESPACE, CLUSTER)]

    def message(topology: dict[str, object] | None) -> str:
        objects = copy.deepcopy(required)
        if topology is not None:
            capa_template.one(objects, "Cluster")["spec"]["topology"] = topology
        world = InMemoryCrossplane(copy.deepcopy(xr), objects, ready_delay=1, runner=fn.run)
        world.reconcile()
        got = {c["type"]: c for c in world.xr["status"]["conditions"]}["SecurityGroupsReady"]
        assert got["reason"] == "IngressRulesMissing", got
        return str(got["message"])

    plain = message(None)
    assert f"Set AWSCluster {NAMESPACE}/{generated} spec.network.cni.cniIngressRules" in plain
    assert "ClusterClass" not in plain
    for topology in (
        {"classRef": {"name": "quick-start"}, "version": "v1.33.4"},  # v1beta2
        {"class": "quick-start", "version": "v1.33.4"},  # v1beta1
    ):
        fix = message(topology)
        assert (
            f"The Cluster is made from ClusterClass quick-start: the topology controller owns "
            f"AWSCluster {NAMESPACE}/{generated} and reverts a direct edit" in fix
        ), fix
        assert "AWSClusterTemplate" in fix


def test_template_values_says_which_prefix_it_used() -> None:
    runner = CliRunner()
    base = ["template-values", CLUSTER, "--namespace", NAMESPACE, "--region", REGION]
    text = runner.invoke(cli, base)
    assert text.exit_code == 0, text.output
    assert 'namePrefix "", the default: neither --composition nor --input' in text.output
    env = runner.invoke(cli, [*base, "-o", "env"])
    assert env.output.startswith(f'# ClusterPlugin {NAMESPACE}/{CLUSTER}: namePrefix ""')
    data = yaml.safe_load(runner.invoke(cli, [*base, "-o", "yaml"]).output)
    assert data["namePrefix"] == ""
    assert data["variables"] == _values()
    from_env = runner.invoke(cli, base[:4], env={"AWS_REGION": REGION})
    assert "from AWS_REGION" in from_env.output, from_env.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Blue_1", "--namespace", NAMESPACE, "--region", REGION], "'Blue_1' is not a Kubernetes name"),
        ([CLUSTER, "--namespace", NAMESPACE, "--region", "mars-1"], "'mars-1' is not an AWS region"),
        ([CLUSTER, "--namespace", NAMESPACE], "Missing option '--region'"),
        (
            [CLUSTER, "--namespace", NAMESPACE, "--region", REGION, "--composition",
             str(ROOT / "examples" / "calico-legacy-claim" / "composition.yaml")],
            "the flavours differ",
        ),
    ],
)
def test_template_values_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["template-values", *args], env={"AWS_REGION": None})
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def _template_values(*args: str) -> Any:
    return CliRunner().invoke(cli, ["template-values", CLUSTER, "--namespace", NAMESPACE, "--region", REGION, *args])


def test_template_values_checks_the_templates_issuer_before_anything_is_composed(tmp_path: Path) -> None:
    """The template's KubeadmControlPlane must start the API server with the issuer the roles will
    trust: a template that names another, or none, is refused (exit 1) naming both and the fix."""
    template = capa_template.text()
    assert "${CLUSTER_PLUGIN_ISSUER_URL}" in template
    ours = tmp_path / "ours.yaml"
    ours.write_text(template)
    assert _template_values("--template", str(ours)).exit_code == 0
    issuer_url = _values()[template_values.ISSUER_VARIABLE]
    other = tmp_path / "other.yaml"
    other.write_text(template.replace('"${CLUSTER_PLUGIN_ISSUER_URL}"', "https://oidc.example.com/blue"))
    result = _template_values("--template", str(other))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: {other}: the KubeadmControlPlane {NAMESPACE}/{CLUSTER}-control-plane starts the API "
        f"server with --service-account-issuer=https://oidc.example.com/blue, but the add-on roles trust "
        f"{issuer_url}: STS refuses the tokens of every add-on; set service-account-issuer to "
        f"${{CLUSTER_PLUGIN_ISSUER_URL}} ({issuer_url}), first, in its spec.kubeadmConfigSpec."
        "clusterConfiguration.apiServer.extraArgs (function-cluster-plugin issuer prints the patch; the "
        "control plane rolls out)"
    )
    unset = tmp_path / "unset.yaml"
    unset.write_text(
        template.replace('        - name: service-account-issuer\n          value: "${CLUSTER_PLUGIN_ISSUER_URL}"\n', "")
    )
    assert "name: service-account-issuer" not in unset.read_text()
    result = _template_values("--template", str(unset))
    assert result.exit_code == 1
    assert "sets no --service-account-issuer, so the API server signs with kubeadm's default" in result.output
    # A ClusterClass template (CAPA's simple-clusterclass: a Cluster with spec.topology and no
    # KubeadmControlPlane of its own): said why, and where the issuer goes.
    clusterclass = tmp_path / "clusterclass.yaml"
    clusterclass.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": "${CLUSTER_NAME}"},
                "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.4"}},
            }
        )
    )
    result = _template_values("--template", str(clusterclass))
    assert result.exit_code == 1
    assert f"{clusterclass} makes its Cluster from ClusterClass quick-start (spec.topology)" in result.output
    assert f"--service-account-issuer ${{CLUSTER_PLUGIN_ISSUER_URL}} ({issuer_url})" in result.output
    # Not a template at all: one line, exit 2.
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [")
    result = _template_values("--template", str(broken))
    assert result.exit_code == 2
    assert f"{broken}: not valid YAML or JSON" in result.output
