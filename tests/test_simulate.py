"""``function-cluster-plugin simulate``: whole lifecycles end Ready and never delete anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function_tools import input_files, simulate
from function_tools.cli import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NAMES = ("selfhosted-full", "calico-legacy-claim", "external-eks")


def run(name: str, *args: str, xr: Path | None = None) -> tuple[int, dict[str, Any]]:
    ex = EXAMPLES / name
    argv = [
        "simulate",
        str(xr or ex / "xr.yaml"),
        "--required",
        str(ex / "required"),
        "--output",
        "json",
        *args,
    ]
    if (ex / "composition.yaml").is_file():
        # The example's own Composition, as its README says (the versions its CAPI serves).
        argv += ["--composition", str(ex / "composition.yaml")]
    r = CliRunner().invoke(cli, argv, catch_exceptions=False)
    return r.exit_code, json.loads(r.stdout)


def nodes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in doc["nodes"]}


@pytest.mark.parametrize(
    ("name", "crossplane_v1"),
    [*((n, False) for n in NAMES), ("calico-legacy-claim", True)],
)
def test_every_example_ends_ready_without_deletions(name: str, crossplane_v1: bool) -> None:
    code, doc = run(name, *(["--crossplane-v1"] if crossplane_v1 else []))
    assert code == 0, doc["problems"]
    assert doc["ok"] and doc["problems"] == []
    assert doc["deletions"] == []
    assert doc["xrReadyAt"] is not None
    assert doc["xrReadyAtEnd"]
    # Add-on releases need an available control plane (reconcile 8 by default).
    assert doc["xrReadyAt"] > doc["settings"]["availableAt"]
    assert all(n["ready"] is not None and n["ready"] >= n["appeared"] for n in doc["nodes"])
    assert {s["step"] for s in doc["steps"]} == set(range(1, doc["lastStep"] + 1))
    # Nothing happens before the control plane is up that needs it.
    by_name = nodes(doc)
    assert by_name["cni-release"]["appeared"] >= doc["settings"]["initializedAt"]


def test_crossplane_v1_finds_an_eks_control_plane_only_when_told_its_kind(tmp_path: Path) -> None:
    # Crossplane 1.x selects by label only, so the step input names the control-plane kind.
    code, doc = run("external-eks", "--crossplane-v1", "--steps", "12")
    assert code == 1
    # The issuer is the EKS control plane's (status.oidcProvider.arn), which is never found.
    assert doc["steps"][-1]["waiting"]["vpc-cni"] == "control plane"
    assert "CloudProviderReady=Unknown (ControlPlaneNotRead)" in doc["problems"][-1]
    inp = tmp_path / "input.yaml"
    inp.write_text(
        "apiVersion: fn.clusterplugin.dev/v1alpha1\nkind: Input\n"
        "clusterAPI:\n  legacyControlPlaneKind: AWSManagedControlPlane\n"
    )
    code, doc = run("external-eks", "--crossplane-v1", "--input", str(inp))
    assert code == 0, doc["problems"]


def test_order_and_waits_of_the_selfhosted_example() -> None:
    _, doc = run("selfhosted-full")
    n = nodes(doc)
    assert n["irsa-bucket"]["appeared"] == 1
    assert n["irsa-oidc-provider"]["appeared"] > n["irsa-discovery"]["ready"] - 1
    assert "irsa-discovery Ready" in n["irsa-oidc-provider"]["waitedFor"]
    assert "irsa-oidc-provider Ready" in n["vpc-cni-role"]["waitedFor"]
    assert n["vpc-cni-role"]["appeared"] >= n["irsa-oidc-provider"]["ready"]
    assert n["cni-release"]["appeared"] >= n["vpc-cni-role-attachment"]["ready"]
    assert "cni-release Ready" in n["cert-manager-release"]["waitedFor"]
    for release in ("ebs-release", "efs-release", "lbc-release"):
        assert "control plane available" in n[release]["waitedFor"]
        assert n[release]["appeared"] >= doc["settings"]["availableAt"]
        assert n[release]["appeared"] >= n["pod-identity-webhook-release"]["ready"]
    # aws-node is restarted once the webhook can inject its role: one change, never churn.
    assert n["cni-release"]["changed"] == [n["pod-identity-webhook-release"]["ready"]]


@pytest.mark.parametrize(
    "faults",
    [
        ("cni-release@12+3",),
        ("irsa-oidc-provider@6+2",),
        ("cni-release@12+3", "irsa-oidc-provider@6+2", "control-plane@16+2"),
        ("pod-identity-webhook-release@9+4", "irsa-bucket@3"),
    ],
)
def test_flaps_still_end_ready_without_deletions(faults: tuple[str, ...]) -> None:
    args = [a for f in faults for a in ("--fail", f)]
    code, doc = run("selfhosted-full", *args)
    assert code == 0, doc["problems"]
    assert doc["deletions"] == []
    assert doc["xrReadyAtEnd"]
    assert doc["unknownFaults"] == []
    last_fault_end = max(simulate.parse_fault(f).end for f in faults)
    assert doc["lastStep"] >= last_fault_end
    steps = {s["step"]: s for s in doc["steps"]}
    for f in map(simulate.parse_fault, faults):
        if f.node == simulate.CONTROL_PLANE:
            assert not steps[f.start]["controlPlane"]["available"]
            continue
        assert f.node in steps[f.start]["faults"]


def test_a_flapping_cni_makes_the_xr_not_ready_exactly_while_it_is_down() -> None:
    _, doc = run("selfhosted-full", "--fail", "cni-release@16+3")
    n = nodes(doc)
    # 9: the IRSA restart is written (until provider-helm has run it, its Ready=True is the
    # old spec's); 16: the flap.
    assert n["cni-release"]["notReadyAgain"] == [9, 16]
    xr_ready = {s["step"]: s["xrReady"] for s in doc["steps"]}
    assert [xr_ready[i] for i in (15, 16, 17, 18, 19)] == [True, False, False, False, True]
    assert doc["xrReadyAt"] == 12
    # A flap changes no desired body: nothing is upgraded or replaced.
    assert all(16 not in node["changed"] for node in doc["nodes"])


def test_an_oidc_provider_flap_before_the_roles_exist_only_delays_them() -> None:
    _, plain = run("selfhosted-full")
    _, doc = run("selfhosted-full", "--fail", "irsa-oidc-provider@4+2")
    assert doc["deletions"] == []
    assert nodes(doc)["vpc-cni-role"]["appeared"] >= nodes(plain)["vpc-cni-role"]["appeared"]


def test_control_plane_never_available_fails() -> None:
    code, doc = run("selfhosted-full", "--available-at", "40", "--steps", "20")
    assert code == 1
    assert doc["xrReadyAt"] is None
    assert not doc["ok"]
    assert any("never became Ready" in p for p in doc["problems"])
    # What the XR waits for at the end: its plugins' waitingFor, and its conditions not True.
    waits = doc["waitingAtEnd"]
    assert "ebs-csi: control plane available" in waits
    assert doc["judgedAt"] == 20
    assert [c.partition(":")[0] for c in doc["conditionsNotTrue"]] == [
        "PluginsReady=False (Waiting)"
    ]
    assert doc["lastStep"] == 20
    assert doc["deletions"] == []
    n = nodes(doc)
    assert "lbc-release" not in n and "ebs-release" not in n


def test_a_fault_running_past_the_last_step_fails() -> None:
    code, doc = run("external-eks", "--fail", "cni-release@10+50", "--steps", "15")
    assert code == 1
    assert doc["xrReadyAt"] is not None
    assert not doc["xrReadyAtEnd"]
    assert any("not Ready at the last one" in p for p in doc["problems"])


def test_fatal_input_fails_at_once(tmp_path: Path) -> None:
    xr = yaml.safe_load((EXAMPLES / "selfhosted-full" / "xr.yaml").read_text())
    xr["spec"]["networking"]["calico"] = {}
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    code, doc = run("selfhosted-full", xr=path)
    assert code == 1
    assert doc["lastStep"] == 1
    assert "spec.networking" in doc["steps"][0]["fatal"]
    assert any("FATAL" in p for p in doc["problems"])


def test_stops_early_unless_asked_for_all_steps() -> None:
    _, short = run("external-eks")
    assert short["stoppedEarly"]
    assert short["lastStep"] == short["xrReadyAt"] + simulate.SETTLE_STEPS
    _, full = run("external-eks", "--all-steps", "--steps", "25")
    assert not full["stoppedEarly"]
    assert full["lastStep"] == 25
    assert full["xrReadyAt"] == short["xrReadyAt"]
    assert full["deletions"] == []


def test_ready_delay_stretches_the_timeline() -> None:
    _, fast = run("external-eks")
    _, slow = run("external-eks", "--ready-delay", "3")
    assert slow["ok"]
    assert slow["xrReadyAt"] > fast["xrReadyAt"]


def test_unknown_fault_node_is_reported() -> None:
    code, doc = run("external-eks", "--fail", "irsa-bucket@3")
    assert code == 0  # nothing of that name exists: the run is unaffected
    assert doc["unknownFaults"] == ["irsa-bucket"]


@pytest.mark.parametrize("bad", ["cni-release", "cni-release@", "cni-release@0", "x@3+0", "A@1"])
def test_bad_fault_is_a_usage_error(bad: str) -> None:
    ex = EXAMPLES / "external-eks"
    r = CliRunner().invoke(cli, ["simulate", str(ex / "xr.yaml"), "--fail", bad])
    assert r.exit_code == 2
    assert "NODE@STEP" in r.stderr or "at least 1" in r.stderr


def test_plain_text_output_has_the_timeline() -> None:
    ex = EXAMPLES / "selfhosted-full"
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            str(ex / "xr.yaml"),
            "--required",
            str(ex / "required"),
            "--fail",
            "cni-release@12",
        ],
    )
    assert r.exit_code == 0
    out = r.stdout
    assert "reconcile   1 | control plane not initialized" in out
    assert "timeline" in out
    assert "XR Ready at reconcile: 13" in out
    assert "XR conditions not True at reconcile 21 (the last played): none\n" in out
    assert "composed resources deleted: 0 (the cluster's deletion was not played" in out
    assert out.rstrip().endswith(
        "OK: the XR became Ready at reconcile 13 with every condition True, and nothing was deleted"
    )
    assert "fault: cni-release" in out
    line = next(x for x in out.splitlines() if x.startswith("cni-release "))
    assert line.split()[1:3] == ["6", "vpc-cni-role-attachment"]


def test_live_view_renders_the_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    # rich comes with the dev extra (the live view needs it); no skip when it is missing.

    ex = EXAMPLES / "external-eks"
    sim = simulate.Simulator(
        input_files.load_one(ex / "xr.yaml", "XR"), input_files.load_documents([ex / "required"])
    )
    result = simulate.run_live(sim, delay=0)
    out = capsys.readouterr().out
    assert result.ok
    assert "timeline" in out
    assert "lbc-release" in out
    assert "XR Ready at reconcile: 9" in out


def test_fault_parsing() -> None:
    assert simulate.parse_fault("cni-release@12+3") == simulate.Fault("cni-release", 12, 3)
    assert simulate.parse_fault("cni-release@12") == simulate.Fault("cni-release", 12, 1)
    f = simulate.Fault("x", 12, 3)
    assert [s for s in range(10, 17) if f.active(s)] == [12, 13, 14]


# --- a usable cluster: every condition True, through the cluster's deletion ---------------------

CAPA_DEFAULT_CNI = {
    # What CAPA's defaulting webhook stores when the AWSCluster names no CNI rules: Calico's.
    "cniIngressRules": [
        {"description": "bgp (calico)", "protocol": "tcp", "fromPort": 179, "toPort": 179},
        {"description": "IP-in-IP (calico)", "protocol": "4", "fromPort": -1, "toPort": 65535},
    ]
}


def _without_the_vpc_cni_rules(tmp_path: Path) -> Path:
    """selfhosted-full's required objects, the AWSCluster as CAPA defaults it (no VPC CNI rules).

    Its status drops the all-traffic rules CAPA would no longer make.
    """
    docs = input_files.load_documents([EXAMPLES / "selfhosted-full" / "required"])
    out = tmp_path / "required"
    out.mkdir()
    for i, d in enumerate(docs):
        if d["kind"] == "AWSCluster":
            d["spec"]["network"]["cni"] = CAPA_DEFAULT_CNI
            for sg in d["status"]["networkStatus"]["securityGroups"].values():
                sg["ingressRule"] = [
                    r
                    for r in sg.get("ingressRule") or []
                    if r["description"] != "all traffic (vpc-cni)"
                ]
        (out / f"{i}.yaml").write_text(yaml.safe_dump(d))
    return out


def _simulate_text(required: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            str(EXAMPLES / "selfhosted-full" / "xr.yaml"),
            "--required",
            str(required),
            *args,
        ],
    )
    return r.exit_code, r.stdout


def test_a_ready_xr_with_a_condition_not_true_fails_and_says_which(tmp_path: Path) -> None:
    required = _without_the_vpc_cni_rules(tmp_path)
    code, out = _simulate_text(required)
    assert code == 1
    assert "XR Ready at reconcile: 12" in out  # Ready, and still not usable
    lines = out.splitlines()
    at = lines.index("XR conditions not True at reconcile 19 (the last played):")
    assert lines[at + 1].startswith(
        "  SecurityGroupsReady=False (IngressRulesMissing): CAPA-managed security groups lack "
        "ports for vpc-cni-all."
    )
    assert (
        "FAILED: the cluster is not usable at reconcile 19: 1 XR condition(s) not True: "
        "SecurityGroupsReady=False (IngressRulesMissing)"
    ) in lines
    assert not any(line.startswith("OK") for line in lines)
    code, text = _simulate_text(required, "-o", "json")
    doc = json.loads(text)
    assert code == 1 and not doc["ok"]
    assert [c.partition(":")[0] for c in doc["conditionsNotTrue"]] == [
        "SecurityGroupsReady=False (IngressRulesMissing)"
    ]


def test_a_deletion_run_fails_when_the_cluster_was_not_usable_before_it(tmp_path: Path) -> None:
    required = _without_the_vpc_cni_rules(tmp_path)
    code, out = _simulate_text(required, "--delete-cluster-at", "14")
    assert code == 1
    assert "XR conditions not True at reconcile 13 (the last before the deletion):" in out
    assert (
        "FAILED: the cluster is not usable at reconcile 13: 1 XR condition(s) not True: "
        "SecurityGroupsReady=False (IngressRulesMissing)\n"
    ) in out
    # The deletion itself went well, and is still reported.
    assert "composed resources deleted: 49\n" in out
    assert "OK" not in out


def test_a_deletion_before_the_xr_was_ready_fails() -> None:
    code, doc = run("selfhosted-full", "--delete-cluster-at", "6")
    assert code == 1
    assert doc["judgedAt"] == 5
    assert doc["problems"][0] == (
        "the XR never became Ready before the cluster's deletion at reconcile 6 "
        "(delete it later: --delete-cluster-at)"
    )


def _make_demo_argv() -> list[str]:
    """The simulate command line of `make demo`, from the Makefile."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    recipe = text.split("\ndemo:", 1)[1]
    line = next(x for x in recipe.splitlines() if "function-cluster-plugin simulate" in x)
    return line.split("function-cluster-plugin", 1)[1].split()


def test_make_demo_plays_the_deletion_and_says_every_condition_was_true() -> None:
    argv = _make_demo_argv()
    assert "--delete-cluster-at" in argv
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.stdout
    out = r.stdout
    assert "XR Ready at reconcile: 12\n" in out
    assert "XR conditions not True at reconcile 39 (the last before the deletion): none\n" in out
    # One upgrade: the load balancer controller from 1.12.0 to 3.5.0, its IAM policy granting
    # both first (20), the chart moved once it was ready (22), healthy after its soak and the
    # policy narrowed (30).
    assert "  reconcile  20  aws-load-balancer-controller: Healthy 1.12.0 -> 3.5.0" in out
    assert "  reconcile  22  aws-load-balancer-controller: Upgrading 1.12.0 -> 3.5.0" in out
    assert "  reconcile  30  aws-load-balancer-controller: Healthy 3.5.0 (last healthy 3.5.0)" in out
    assert "  IAM policies changed: lbc-policy at 20, 30\n" in out
    assert "composed resources deleted: 49\n" in out
    assert (
        "Releases uninstalled: 0, hanging in an uninstall: 0; composed resources left: 0\n" in out
    )
    # After the deletion every condition says so, with its reason.
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.endswith("(the last played):"))
    assert [x.split(":")[0] for x in lines[at + 1 : at + 4]] == [
        "  PluginsReady=False (ClusterDeleted)",
        "  SecurityGroupsReady=Unknown (ClusterDeleted)",
        "  CloudProviderReady=Unknown (ClusterDeleted)",
    ]
    # A cluster that is gone has no control plane to report on.
    gone = [x for x in lines if "| cluster gone |" in x]
    assert gone and not any("control plane" in x for x in gone)
    assert lines[-1] == (
        "OK: the XR became Ready at reconcile 12 with every condition True; nothing deleted while "
        "the cluster existed, no uninstall, everything deleted in Usage order once it was gone"
    )
