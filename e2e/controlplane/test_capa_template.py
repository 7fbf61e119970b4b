"""The CAPA cluster template with the real tools (docs/capa-template.md).

``clusterctl`` v1.14.0, built from the Go module proxy (``e2e/tools.json``), generates the
manifest from ``templates/cluster-template-clusterplugin.yaml`` in a shell that first
evaluates ``function-cluster-plugin template-values -o env``, as a user runs it; the e2e
control plane (kube-apiserver with the Cluster API, CAPA and ClusterPlugin CRDs, Crossplane,
the function, the providers played) creates every object of it and takes the statuses
Cluster API and CAPA would write (``tests/capa_template.py``); the function, given exactly
the objects as the API server returns them, publishes the issuer the KubeadmControlPlane
starts the API server with, finds CAPA's security groups open enough and composes every
add-on; and Crossplane, running it on the ClusterPlugin of the manifest, makes it Ready.
"""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import tool_path, tool_source
from e2e.controlplane import model
from e2e.controlplane.checks import subset_differences
from e2e.controlplane.composite import condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ROOT, ControlPlane
from function_tools import render, template_values
from tests import capa_template

NAMESPACE, CLUSTER, REGION = "capa-template", "green", "us-west-2"
CAPA_VARIABLES = {
    "AWS_SSH_KEY_NAME": "default",
    "AWS_CONTROL_PLANE_MACHINE_TYPE": "t3.large",
    "AWS_NODE_MACHINE_TYPE": "t3.large",
}
KUBERNETES_VERSION = "v1.33.4"


@dataclass
class Generated:
    """What the user's shell held and what clusterctl printed."""

    values: dict[str, str]
    manifest: str
    objects: list[dict[str, Any]]


def _shell(script: str, home: Path, clusterctl: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a POSIX shell with nothing but the two commands on PATH and CAPA's variables."""
    env = {
        "PATH": os.pathsep.join([str(clusterctl.parent), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home),
        # No management cluster, no clusterctl.yaml, no call home for a newer release.
        "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
        **CAPA_VARIABLES,
    }
    return subprocess.run(["/bin/sh", "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def clusterctl() -> Path:
    return tool_path("clusterctl")


@pytest.fixture(scope="module")
def composition_file(namespaced_api: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Composition installed on the control plane: the one the ClusterPlugin will use."""
    path = tmp_path_factory.mktemp("capa-template") / "composition.yaml"
    path.write_text(yaml.safe_dump(namespaced_api))
    return path


@pytest.fixture(scope="module")
def generated(clusterctl: Path, composition_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Generated:
    home = tmp_path_factory.mktemp("home")
    values_cmd = (
        f"function-cluster-plugin template-values {CLUSTER} --namespace {NAMESPACE} "
        f"--region {REGION} --composition {shlex.quote(str(composition_file))} -o env"
    )
    generate = (
        f"clusterctl generate cluster {CLUSTER} --target-namespace {NAMESPACE} "
        f"--kubernetes-version {KUBERNETES_VERSION} --worker-machine-count 2 "
        f"--from {capa_template.TEMPLATE.relative_to(ROOT)}"
    )
    script = f'set -e\neval "$({values_cmd})"\n{generate}\n'
    done = _shell(script, home, clusterctl)
    assert done.returncode == 0, f"{script}\nexited {done.returncode}:\n{done.stderr}"
    exported = _shell(f"set -e\n{values_cmd}\n", home, clusterctl)
    values = {}
    for line in exported.stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            (values[name],) = shlex.split(value)
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]
    return Generated(values, done.stdout, objs)


@pytest.fixture(scope="module")
def template_crds(control_plane: ControlPlane) -> None:
    """The template's kinds that the control plane does not start with (tests/fixtures/template-crds)."""
    crds = [yaml.safe_load(p.read_text()) for p in sorted(capa_template.TEMPLATE_CRDS.glob("*/*.yaml"))]
    control_plane.kube.wait_established([control_plane.kube.apply_crd(crd) for crd in crds])


@pytest.fixture(scope="module")
def created(
    control_plane: ControlPlane,
    namespaced_providers: Providers,
    template_crds: None,
    generated: Generated,
) -> Iterator[list[dict[str, Any]]]:
    """Every generated object created on the API server (as ``kubectl create -f`` does); then the
    statuses of the Cluster, control plane and AWSCluster, and ``<cluster>-sa``, as Cluster API
    and CAPA write them. The objects as created."""
    kube = control_plane.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    made = [kube.create(copy.deepcopy(obj)) for obj in generated.objects]
    for obj in generated.objects:
        status = capa_template.status_of(obj)
        if status is not None:
            meta = obj["metadata"]
            kube.patch_status(obj["apiVersion"], obj["kind"], meta["name"], {"status": status}, meta["namespace"])
    kube.create(capa_template.sa_secret(NAMESPACE, CLUSTER))
    yield made


def _served(control_plane: ControlPlane, generated: Generated) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the ClusterPlugin, the objects the function reads of its cluster), as the API server returns them."""
    kube = control_plane.kube
    read = []
    for obj in generated.objects:
        if obj["kind"] in (*capa_template.CLUSTER_API_KINDS, "ClusterPlugin"):
            got = kube.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], NAMESPACE)
            assert got is not None, obj["metadata"]
            read.append(got)
    sa = kube.get("v1", "Secret", f"{CLUSTER}-sa", NAMESPACE)
    assert sa is not None
    xr = next(o for o in read if o["kind"] == "ClusterPlugin")
    return xr, [o for o in read if o is not xr] + [sa]


def test_clusterctl_asks_for_the_documented_variables(clusterctl: Path, tmp_path: Path) -> None:
    done = _shell(
        f"clusterctl generate cluster {CLUSTER} --target-namespace {NAMESPACE} --from {capa_template.TEMPLATE.relative_to(ROOT)} --list-variables",
        tmp_path,
        clusterctl,
    )
    assert done.returncode == 0, done.stderr
    required, optional = done.stdout.split("Optional Variables:")
    listed_required = {line.strip(" -") for line in required.splitlines() if line.strip().startswith("- ")}
    listed_optional = {line.split()[1] for line in optional.splitlines() if line.strip().startswith("- ")}
    ours = capa_template.variables(capa_template.text())
    # clusterctl fills these from its flags, with defaults of its own.
    from_flags = {"CLUSTER_NAME", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT"}
    assert listed_required | listed_optional == set(ours)
    assert listed_optional == from_flags | {k for k, v in ours.items() if v is not None}


def test_clusterctl_generates_the_manifest_from_the_printed_values(generated: Generated) -> None:
    assert set(generated.values) == {
        template_values.REGION_VARIABLE,
        template_values.COMPOSITION_VARIABLE,
        template_values.ISSUER_VARIABLE,
    }
    # clusterctl's own substitution agrees with the tests' (tests/capa_template.py) on every byte
    # that is not clusterctl's reformatting: the same objects.
    ours = capa_template.objects(
        capa_template.substitute(
            capa_template.text(),
            {
                "CLUSTER_NAME": CLUSTER,
                "KUBERNETES_VERSION": KUBERNETES_VERSION,
                "CONTROL_PLANE_MACHINE_COUNT": "1",
                "WORKER_MACHINE_COUNT": "2",
                **CAPA_VARIABLES,
                **generated.values,
            },
        ),
        NAMESPACE,
    )
    assert generated.objects == ours
    assert all(o["metadata"]["namespace"] == NAMESPACE for o in generated.objects)
    kcp = capa_template.one(generated.objects, "KubeadmControlPlane")
    assert capa_template.api_server_args(kcp)["service-account-issuer"] == generated.values[template_values.ISSUER_VARIABLE]


def test_the_vendored_cluster_api_crds_are_clusterctls_release() -> None:
    """The CRDs the control plane and the unit tests validate with are those of the module
    clusterctl is built from (sigs.k8s.io/cluster-api v1.14.0, checked against go.sum)."""
    module = tool_source("clusterctl")
    bases = {p.name: p for p in module.glob("*/config/crd/bases/*.yaml")}
    bases |= {p.name: p for p in module.glob("*/*/config/crd/bases/*.yaml")}
    vendored = [
        *(ROOT / "tests" / "fixtures" / "crds" / "cluster-api").glob("*.yaml"),
        *(capa_template.TEMPLATE_CRDS / "cluster-api").glob("*.yaml"),
    ]
    assert len(vendored) == 4
    for path in vendored:
        assert path.read_bytes() == bases[path.name].read_bytes(), path


def test_the_control_plane_accepts_every_object(control_plane: ControlPlane, generated: Generated, created: list[dict[str, Any]]) -> None:
    kube = control_plane.kube
    assert [(o["kind"], o["metadata"]["name"]) for o in created] == [
        (o["kind"], o["metadata"]["name"]) for o in generated.objects
    ]
    for obj in generated.objects:
        got = kube.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], NAMESPACE)
        assert got is not None, obj["metadata"]
        # Nothing the template says was pruned or rewritten (the API server drops unknown fields).
        assert subset_differences(obj["spec"], got["spec"]) == [], obj["kind"]
    # The statuses Cluster API and CAPA write were taken as well.
    awscluster = kube.get("infrastructure.cluster.x-k8s.io/v1beta2", "AWSCluster", CLUSTER, NAMESPACE)
    assert awscluster is not None
    assert set(awscluster["status"]["networkStatus"]["securityGroups"]) == set(capa_template.GROUPS)


def test_the_function_composes_from_exactly_those_objects(
    control_plane: ControlPlane, generated: Generated, composition_file: Path, created: list[dict[str, Any]]
) -> None:
    xr, required = _served(control_plane, generated)
    (step,) = yaml.safe_load(composition_file.read_text())["spec"]["pipeline"]
    fresh = model.clean(xr)
    fresh.pop("status", None)
    out = render.render(fresh, required=[model.clean(o) for o in required], step_input=dict(step["input"]))
    assert out.fatal is None, out.fatal
    rendered = out.documents[0]
    kcp = next(o for o in required if o["kind"] == "KubeadmControlPlane")
    issuer = capa_template.api_server_args(kcp)["service-account-issuer"]
    assert rendered["status"]["issuerURL"] == issuer
    assert conditions(rendered)["SecurityGroupsReady"]["reason"] == "Available", conditions(rendered)
    names = {d["metadata"]["annotations"]["crossplane.io/composition-resource-name"] for d in out.documents[1:] if "annotations" in d.get("metadata", {})}
    # The first reconcile: the issuer's bucket, and the cloud controller manager (the control
    # plane is initialized); the rest waits for them to be Ready.
    assert {"irsa-bucket", "helm-provider-config", "ccm-release"} <= names, sorted(names)
    # Reconciled on, the same objects take the XR to Ready with every add-on.
    world = model.converge(model.world(fresh, required, {"spec": {"pipeline": [step]}}))
    assert world.xr_ready, world.xr.get("status")
    assert {"ccm-release", "cni-release", "ebs-release"} <= set(world.composed), sorted(world.composed)


def test_crossplane_makes_the_generated_clusterplugin_ready(
    control_plane: ControlPlane, generated: Generated, created: list[dict[str, Any]]
) -> None:
    """The ClusterPlugin of the manifest, created with the cluster, on real Crossplane."""
    kube = control_plane.kube
    ours = capa_template.one(generated.objects, "ClusterPlugin")

    def ready() -> dict[str, Any] | None:
        xr = kube.get(ours["apiVersion"], ours["kind"], CLUSTER, NAMESPACE)
        return xr if condition_status(xr, "Ready") == "True" else None

    try:
        xr = kube.wait_for(ready, f"ClusterPlugin {NAMESPACE}/{CLUSTER} Ready", timeout_s=240, interval_s=0.5)
    except TimeoutError:
        xr = kube.get(ours["apiVersion"], ours["kind"], CLUSTER, NAMESPACE)
        pytest.fail(f"not Ready: {conditions(xr)}\n{(xr or {}).get('status', {}).get('plugins')}", pytrace=False)
    kcp = capa_template.one(generated.objects, "KubeadmControlPlane")
    assert xr["status"]["issuerURL"] == capa_template.api_server_args(kcp)["service-account-issuer"]
    assert condition_status(xr, "SecurityGroupsReady") == "True", conditions(xr)
