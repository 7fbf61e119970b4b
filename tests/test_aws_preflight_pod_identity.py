"""``aws preflight`` for EKS Pod Identity: the cluster's associations and leftover annotations.

What the checks decide is tested on plain values (``judge_associations``, ``check_leftovers``).
What the emulator can answer is tested against it, as it really answers: moto 5.2 serves
eks:DescribeCluster but no Pod Identity operation (its EKS routes have none; a call gets its
HTML 404 page), so a cluster that exists can only be reported as "could not check". Reading
ServiceAccounts from a real kube-apiserver is ``e2e/aws/test_pod_identity_leftovers.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function_tools.aws.checks import Status
from function_tools.aws.pod_identity_checks import (
    ASSOCIATIONS_PER_CLUSTER,
    ROLE_ARN_ANNOTATION,
    Wanted,
    check_leftovers,
    judge_associations,
    leftovers_not_run,
)
from function_tools.commands.aws import aws
from tests import aws_helpers as h

EXAMPLE = h.EXAMPLES / "eks-pod-identity"
NODE_ROLE = "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io"
CNI = Wanted("vpc-cni", "kube-system", "aws-node", "payments-prod-vpc-cni-x")
EBS = Wanted("ebs-csi", "kube-system", "ebs-csi-controller-sa", "payments-prod-ebs-csi-x")
LBC = Wanted("lbc", "kube-system", "aws-load-balancer-controller", "payments-prod-lbc-x")
WANTED = [CNI, EBS, LBC]
ARN = "arn:aws:iam::123456789012:role/clusterplugin/"


# --- the decisions, on plain values --------------------------------------------------------------


def test_associations_count_with_those_the_function_adds() -> None:
    check = judge_associations("prod", 7, {}, WANTED)
    assert (check.status, check.message) == (
        Status.PASS,
        "EKS cluster prod has 7 Pod Identity associations; the function adds 3: 10 of 5000",
    )
    # The function's own associations (phase after) are not added again.
    ours = {CNI.key: ARN + CNI.role_name, LBC.key: ARN + LBC.role_name}
    assert judge_associations("prod", 9, ours, WANTED).message.endswith("adds 1: 10 of 5000")


def test_associations_near_and_over_the_limit() -> None:
    near = judge_associations("prod", 4497, {}, WANTED)
    assert near.status is Status.WARN
    assert near.message.endswith("4500 of 5000")
    at = judge_associations("prod", ASSOCIATIONS_PER_CLUSTER - 3, {}, WANTED)
    assert at.status is Status.WARN
    over = judge_associations("prod", ASSOCIATIONS_PER_CLUSTER - 2, {}, WANTED)
    assert over.status is Status.FAIL
    assert over.message.endswith("5001 of 5000: creating them fails")
    assert "not in Service Quotas" in over.fix


def test_an_add_ons_service_account_associated_with_another_role_fails() -> None:
    roles = {CNI.key: ARN + CNI.role_name, EBS.key: "arn:aws:iam::123456789012:role/eksctl-ebs"}
    check = judge_associations("prod", 12, roles, WANTED)
    assert check.status is Status.FAIL
    assert check.message == (
        "EKS cluster prod already associates service account kube-system/ebs-csi-controller-sa "
        "(ebs-csi) with arn:aws:iam::123456789012:role/eksctl-ebs: EKS takes one association per "
        "service account, so the function's cannot be created"
    )
    assert "aws eks delete-pod-identity-association --cluster-name prod" in check.fix


def test_leftover_role_annotations_fail_naming_each_service_account() -> None:
    found = {
        CNI.key: {ROLE_ARN_ANNOTATION: "arn:aws:iam::123456789012:role/old-cni", "x": "y"},
        EBS.key: None,
        LBC.key: {"meta.helm.sh/release-name": "lbc"},
    }
    check = check_leftovers(WANTED, found)
    assert check.status is Status.FAIL
    assert check.message == (
        "ServiceAccount kube-system/aws-node (vpc-cni): eks.amazonaws.com/role-arn="
        "arn:aws:iam::123456789012:role/old-cni: still annotated, so their pods keep using IRSA "
        "(the SDKs try web identity before EKS Pod Identity)"
    )
    assert check.fix.startswith(
        "remove the annotation (kubectl annotate serviceaccount -n kube-system aws-node "
        "eks.amazonaws.com/role-arn-"
    )
    found[LBC.key] = {ROLE_ARN_ANNOTATION: "arn:aws:iam::123456789012:role/old-lbc"}
    assert check_leftovers(WANTED, found).message.startswith(
        "ServiceAccounts kube-system/aws-node (vpc-cni): "
    )


def test_service_accounts_without_the_annotation_pass() -> None:
    found: dict[tuple[str, str], dict[str, str] | None] = {CNI.key: {}, EBS.key: None, LBC.key: {}}
    check = check_leftovers(WANTED, found)
    assert (check.status, check.message) == (
        Status.PASS,
        (
            "ServiceAccounts kube-system/aws-node, kube-system/aws-load-balancer-controller: "
            "no eks.amazonaws.com/role-arn annotation"
        ),
    )
    nothing = check_leftovers(WANTED, dict.fromkeys((w.key for w in WANTED), None))
    assert nothing.status is Status.PASS
    assert nothing.message.startswith("none of the add-ons' ServiceAccounts exists yet")


def test_without_the_workload_cluster_the_leftover_check_says_how_to_run_it() -> None:
    check = leftovers_not_run("prod", exists=True)
    assert check.status is Status.WARN
    assert check.message.startswith("not run:")
    assert check.fix.startswith("pass --workload-kubeconfig FILE")
    assert leftovers_not_run("prod", exists=None).status is Status.WARN
    # No EKS cluster yet: no ServiceAccount can carry the annotation.
    assert leftovers_not_run("prod", exists=False).status is Status.PASS


# --- against the emulator, through the command ---------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


def _preflight(server: h.MotoServer, *args: str) -> tuple[int, dict[str, Any]]:
    argv = ["preflight", str(EXAMPLE / "xr.yaml"), "--required", str(EXAMPLE / "required")]
    r = CliRunner().invoke(aws, [*argv, "--endpoint-url", server.endpoint, "-o", "json", *args])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.output)


def _checks(report: dict[str, Any]) -> dict[str, str]:
    return {
        c["name"]: f"{c['status']}: {c['message']}"
        for c in report["checks"]
        if c["name"].startswith(("pod-identity/associations", "pod-identity/leftovers"))
    }


def _eks_cluster(clients: Any, role_arn: str) -> None:
    """The EKS cluster prod, as CAPA creates it for the AWSManagedControlPlane."""
    subnets = {"subnetIds": ["subnet-1", "subnet-2"]}
    clients.eks.create_cluster(name="prod", roleArn=role_arn, resourcesVpcConfig=subnets)


@pytest.mark.usefixtures("fake_aws_credentials")
def test_on_the_emulator_before_and_after_the_eks_cluster_exists(server: h.MotoServer) -> None:
    server.reset()
    clients = h.make_clients(server.endpoint, region="us-west-2")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    made = clients.iam.create_role(RoleName=NODE_ROLE, AssumeRolePolicyDocument=json.dumps(trust))
    clients.iam.attach_role_policy(RoleName=NODE_ROLE, PolicyArn=h.EKS_WORKER_NODE_POLICY)

    # No EKS cluster prod yet (eks:DescribeCluster answers ResourceNotFoundException).
    code, report = _preflight(server)
    assert code == 0
    assert _checks(report) == {
        "pod-identity/associations/prod": "pass: the EKS cluster prod does not exist yet; the "
        "function adds 3 Pod Identity associations of the 5000 a cluster may have",
        "pod-identity/leftovers": "pass: the EKS cluster prod does not exist yet: no "
        "ServiceAccount of it can carry eks.amazonaws.com/role-arn",
    }
    # Phase after: the associations need the cluster.
    code, report = _preflight(server, "--phase", "after")
    assert code == 1
    assert _checks(report)["pod-identity/associations/prod"].startswith(
        "fail: the EKS cluster prod does not exist yet"
    )

    # CAPA made the cluster: moto has no ListPodIdentityAssociations, which is said, not hidden.
    _eks_cluster(clients, made["Role"]["Arn"])
    code, report = _preflight(server)
    assert code == 0
    assert _checks(report) == {
        "pod-identity/associations/prod": "warn: could not check: "
        "eks:ListPodIdentityAssociations answered 404 (HTTP 404)",
        "pod-identity/leftovers": "warn: not run: whether the add-ons' ServiceAccounts still "
        "carry eks.amazonaws.com/role-arn (which keeps IRSA in use) is read from the workload "
        "cluster",
    }
    fixes = {c["name"]: c["fix"] for c in report["checks"]}
    assert fixes["pod-identity/leftovers"].startswith(
        "pass --workload-kubeconfig FILE, the cluster's kubeconfig (aws eks update-kubeconfig "
        "--name prod"
    )


@pytest.mark.usefixtures("fake_aws_credentials")
def test_an_unreachable_workload_cluster_is_a_warning(server: h.MotoServer, tmp_path: Path) -> None:
    server.reset()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "contexts: [{name: x, context: {cluster: y, user: z}}]\n"
        # Port 1 on loopback: nothing listens there.
        "clusters: [{name: y, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: z, user: {token: t}}]\n"
    )
    clients = h.make_clients(server.endpoint, region="us-west-2")
    made = clients.iam.create_role(RoleName="eks", AssumeRolePolicyDocument="{}")
    _eks_cluster(clients, made["Role"]["Arn"])
    _, report = _preflight(server, "--workload-kubeconfig", str(kubeconfig))
    assert _checks(report)["pod-identity/leftovers"].startswith(
        "warn: could not read the workload cluster's ServiceAccounts: https://127.0.0.1:1: "
    )


def test_the_pod_identity_flags_are_refused_outside_pod_identity(tmp_path: Path) -> None:
    """Read only for PodIdentity: elsewhere a flag nothing reads is refused in one line."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    selfhosted = h.EXAMPLES / "selfhosted-full"
    argv = ["preflight", str(selfhosted / "xr.yaml"), "--required", str(selfhosted / "required")]
    r = CliRunner().invoke(aws, [*argv, "--workload-kubeconfig", str(kubeconfig)])
    assert r.exit_code == 2, r.output
    said = "--workload-kubeconfig is read only with spec.irsa.mode PodIdentity (this XR's is"
    assert r.output.strip().splitlines() == [f"Error: {said} SelfHosted): leave it out"]
    r = CliRunner().invoke(aws, [*argv, "--node-role", "n", "--workload-kubeconfig", str(kubeconfig)])
    assert r.exit_code == 2, r.output
    assert "--node-role and --workload-kubeconfig are read only with" in r.output


# --- the roles the nodes run with (cluster.node_identities) --------------------------------------


def _meta(name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": "payments", "labels": labels}


def _group(kind: str, name: str, infra_kind: str, cluster: str = "prod") -> dict[str, Any]:
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": infra_kind, "name": f"{name}-aws"}
    spec = {"clusterName": cluster, "template": {"spec": {"clusterName": cluster, "infrastructureRef": ref}}}
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "metadata": _meta(name), "spec": spec}


INFRA = "infrastructure.cluster.x-k8s.io/v1beta2"
NODE_GROUPS = [
    # An EKS managed node group with its own role, and one on CAPA's default.
    _group("MachinePool", "managed", "AWSManagedMachinePool"),
    {"apiVersion": INFRA, "kind": "AWSManagedMachinePool", "metadata": _meta("managed-aws"), "spec": {"roleName": "prod-managed-nodes"}},
    {"apiVersion": INFRA, "kind": "AWSManagedMachinePool", "metadata": _meta("other-aws", **{"cluster.x-k8s.io/cluster-name": "prod"}), "spec": {}},
    # Self-managed nodes: an AWSMachinePool and a MachineDeployment's AWSMachineTemplate, each
    # naming an instance profile (by name, by ARN).
    _group("MachinePool", "self", "AWSMachinePool"),
    {"apiVersion": INFRA, "kind": "AWSMachinePool", "metadata": _meta("self-aws"), "spec": {"awsLaunchTemplate": {"iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io"}}},
    _group("MachineDeployment", "md", "AWSMachineTemplate"),
    {"apiVersion": INFRA, "kind": "AWSMachineTemplate", "metadata": _meta("md-aws"), "spec": {"template": {"spec": {"iamInstanceProfile": "arn:aws:iam::123456789012:instance-profile/gpu-nodes"}}}},
    # Not this cluster's: a template no node group of it uses, another cluster's node group.
    {"apiVersion": INFRA, "kind": "AWSMachineTemplate", "metadata": _meta("unused-aws"), "spec": {"template": {"spec": {"iamInstanceProfile": "x"}}}},
    _group("MachineDeployment", "elsewhere", "AWSMachineTemplate", cluster="staging"),
    {"apiVersion": INFRA, "kind": "AWSMachineTemplate", "metadata": _meta("elsewhere-aws"), "spec": {"template": {"spec": {"iamInstanceProfile": "y"}}}},
]


def test_the_node_groups_name_the_roles_their_nodes_run_with() -> None:
    from function.cluster import NodeIdentity, node_identities

    assert node_identities(NODE_GROUPS, "payments", "prod") == (
        NodeIdentity("AWSMachinePool payments/self-aws", instance_profile="nodes.cluster-api-provider-aws.sigs.k8s.io"),
        NodeIdentity(
            "AWSMachineTemplate payments/md-aws",
            instance_profile="arn:aws:iam::123456789012:instance-profile/gpu-nodes",
        ),
        NodeIdentity("AWSManagedMachinePool payments/managed-aws", role="prod-managed-nodes"),
        NodeIdentity("AWSManagedMachinePool payments/other-aws", role=NODE_ROLE),
    )
    assert node_identities(NODE_GROUPS, "other", "prod") == ()


@pytest.mark.usefixtures("fake_aws_credentials")
def test_preflight_checks_the_roles_the_node_groups_use(server: h.MotoServer, tmp_path: Path) -> None:
    """Not CAPA's default node group role alone: self-managed nodes run with the role of their
    instance profile (clusterawsadm's nodes.cluster-api-provider-aws.sigs.k8s.io), managed ones
    with their AWSManagedMachinePool's roleName."""
    server.reset()
    clients = h.make_clients(server.endpoint, region="us-west-2")
    ec2 = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
    for role in (NODE_ROLE, "prod-managed-nodes", "nodes.cluster-api-provider-aws.sigs.k8s.io", "gpu"):
        clients.iam.create_role(RoleName=role, AssumeRolePolicyDocument=ec2)
    for role in (NODE_ROLE, "prod-managed-nodes", "gpu"):
        clients.iam.attach_role_policy(RoleName=role, PolicyArn=h.EKS_WORKER_NODE_POLICY)
    for profile, role in (("nodes.cluster-api-provider-aws.sigs.k8s.io", "nodes.cluster-api-provider-aws.sigs.k8s.io"), ("gpu-nodes", "gpu")):
        clients.iam.create_instance_profile(InstanceProfileName=profile)
        clients.iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=role)
    groups = tmp_path / "node-groups.yaml"
    groups.write_text(yaml.safe_dump_all(NODE_GROUPS))

    code, report = _preflight(server, "--required", str(groups))
    nodes = {c["name"]: f"{c['status']}: {c['message']}" for c in report["checks"] if "node-role" in c["name"]}
    assert code == 1
    assert nodes == {
        f"pod-identity/node-role/{NODE_ROLE}": f"pass: policy {h.EKS_WORKER_NODE_POLICY} of the node role "
        f"{NODE_ROLE} allows eks-auth:AssumeRoleForPodIdentity (used by AWSManagedMachinePool payments/other-aws)",
        "pod-identity/node-role/prod-managed-nodes": f"pass: policy {h.EKS_WORKER_NODE_POLICY} of the node role "
        "prod-managed-nodes allows eks-auth:AssumeRoleForPodIdentity (used by AWSManagedMachinePool "
        "payments/managed-aws)",
        "pod-identity/node-role/gpu": f"pass: policy {h.EKS_WORKER_NODE_POLICY} of the node role gpu allows "
        "eks-auth:AssumeRoleForPodIdentity (used by AWSMachineTemplate payments/md-aws (instance profile gpu-nodes))",
        "pod-identity/node-role/nodes.cluster-api-provider-aws.sigs.k8s.io": "fail: no policy of the node role "
        "nodes.cluster-api-provider-aws.sigs.k8s.io allows eks-auth:AssumeRoleForPodIdentity: the "
        "eks-pod-identity-agent cannot get the add-ons' credentials, and their pods run without them (used by "
        "AWSMachinePool payments/self-aws (instance profile nodes.cluster-api-provider-aws.sigs.k8s.io))",
    }
    # Without the node groups: CAPA's default role, and it says why that one.
    _, report = _preflight(server)
    nodes = {c["name"]: c["message"] for c in report["checks"] if "node-role" in c["name"]}
    assert list(nodes) == [f"pod-identity/node-role/{NODE_ROLE}"]
    assert nodes[f"pod-identity/node-role/{NODE_ROLE}"].endswith(
        "(used by CAPA's default for EKS managed node groups: no node group of the cluster was given; pass its "
        "MachinePools or MachineDeployments and their AWS objects with --required, or --node-role)"
    )
