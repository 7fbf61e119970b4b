"""``aws preflight --workload-kubeconfig`` against a real kube-apiserver (issue 28, leftovers).

The EKS cluster ``prod`` of examples/external-eks gets its add-ons' credentials through IRSA:
its Releases, rendered by the real helm, annotate ``aws-node`` and the load balancer
controller's ServiceAccount with ``eks.amazonaws.com/role-arn``. Switching that cluster to
examples/eks-pod-identity, preflight reads those ServiceAccounts from the workload cluster (etcd
and kube-apiserver built from the Go module proxy, the harness's certificates) and fails naming
both, since IRSA's web identity comes first in the SDKs' credential chain. Once the Pod Identity
example's Releases are applied over them (server-side apply drops the annotation, as helm's
upgrade does), it passes. An identity without RBAC on ServiceAccounts is a warning saying why,
never a crash. The AWS side is moto (its answers are tests/test_aws_preflight_pod_identity.py's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from e2e.aws.tokens import addon_renderings, apply_service_accounts
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.harness import ROOT, ControlPlane, kubeconfig_file
from function_tools.commands.aws import aws
from tests import aws_helpers as h
from tests.helm import ROLE_ARN_ANNOTATION
from tests.scenarios import by_name

EXAMPLE = ROOT / "examples" / "eks-pod-identity"
LEFTOVERS = "pod-identity/leftovers"
NODE_ROLE = "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io"


class ApiServer(ControlPlane):
    """etcd and kube-apiserver only: ServiceAccounts need no controller."""

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("certificates", self._certificates),
            ("etcd", self._etcd),
            ("kube-apiserver", self._apiserver),
        ]


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_control_plane(tmp_path_factory.mktemp("pod-identity-workload"), ApiServer) as cp:
        yield cp


@pytest.fixture(scope="module")
def moto() -> Iterator[h.MotoServer]:
    """The account of the cluster in use: its EKS cluster, its nodes' role as CAPA makes it."""
    server = h.MotoServer()
    clients = h.make_clients(server.endpoint, region="us-west-2")
    trust = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    node = clients.iam.create_role(RoleName=NODE_ROLE, AssumeRolePolicyDocument=json.dumps(trust))
    clients.iam.attach_role_policy(RoleName=NODE_ROLE, PolicyArn=h.EKS_WORKER_NODE_POLICY)
    subnets = {"subnetIds": ["subnet-1", "subnet-2"]}
    clients.eks.create_cluster(name="prod", roleArn=node["Role"]["Arn"], resourcesVpcConfig=subnets)
    yield server
    server.stop()


def releases(example: str) -> list[dict[str, Any]]:
    """The Releases the function composes for the example, converged in the in-memory Crossplane."""
    world = by_name(example).world(staged=False)
    world.run(20)
    assert world.xr_ready, example
    return [c.obj for c in world.composed.values() if c.obj["kind"] == "Release"]


def preflight(moto: h.MotoServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any], str]:
    """The command on the Pod Identity example: exit code, its JSON report, its text lines."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    argv = [
        "preflight", str(EXAMPLE / "xr.yaml"), "--required", str(EXAMPLE / "required"),
        "--endpoint-url", moto.endpoint, "--workload-kubeconfig", str(kubeconfig),
    ]
    as_json = CliRunner().invoke(aws, [*argv, "-o", "json"])
    assert as_json.exit_code in (0, 1), as_json.output
    as_text = CliRunner().invoke(aws, argv)
    assert as_text.exit_code == as_json.exit_code, as_text.output
    print(as_text.output)
    return as_json.exit_code, json.loads(as_json.output), as_text.output


def leftovers(report: dict[str, Any]) -> dict[str, str]:
    return next(c for c in report["checks"] if c["name"] == LEFTOVERS)


def test_irsa_annotations_fail_until_the_pod_identity_releases_replace_them(
    workload: ControlPlane, moto: h.MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    irsa = addon_renderings(releases("external-eks"))
    apply_service_accounts(workload.kube, irsa)
    aws_node = workload.kube.get("v1", "ServiceAccount", "aws-node", "kube-system")
    assert aws_node is not None
    arn = aws_node["metadata"]["annotations"][ROLE_ARN_ANNOTATION]
    lbc_arn = arn.replace("-vpc-cni-", "-lbc-")

    code, report, text = preflight(moto, workload.kubeconfig, monkeypatch)
    check = leftovers(report)
    assert (code, check["status"]) == (1, "fail")
    assert report["summary"]["fail"] == 1, report
    assert check["message"] == (
        f"ServiceAccounts kube-system/aws-node (vpc-cni): {ROLE_ARN_ANNOTATION}={arn}, "
        f"kube-system/aws-load-balancer-controller (lbc): {ROLE_ARN_ANNOTATION}={lbc_arn}: still "
        "annotated, so their pods keep using IRSA (the SDKs try web identity before EKS Pod Identity)"
    )
    assert f"FAIL  {LEFTOVERS}" in text
    assert "kubectl annotate serviceaccount -n kube-system aws-node eks.amazonaws.com/role-arn-" in check["fix"]

    # The Pod Identity example's Releases over them: no annotation, and the EBS driver's too.
    apply_service_accounts(workload.kube, addon_renderings(releases("eks-pod-identity")))
    code, report, text = preflight(moto, workload.kubeconfig, monkeypatch)
    check = leftovers(report)
    assert (code, check["status"]) == (0, "pass"), check
    assert check["message"] == (
        "ServiceAccounts kube-system/aws-node, kube-system/ebs-csi-controller-sa, "
        f"kube-system/aws-load-balancer-controller: no {ROLE_ARN_ANNOTATION} annotation"
    )
    assert f"PASS  {LEFTOVERS}" in text


def test_an_identity_without_rbac_is_a_warning_saying_why(
    workload: ControlPlane, moto: h.MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nobody = workload.ca.leaf("nobody", client=True)
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", workload.server, workload.ca.path, nobody)
    _, report, _ = preflight(moto, kubeconfig, monkeypatch)
    check = leftovers(report)
    assert check["status"] == "warn", check
    assert check["message"].startswith(
        f"could not read the workload cluster's ServiceAccounts: {workload.server}: get serviceaccount "
    )
    assert "forbidden" in check["message"]
