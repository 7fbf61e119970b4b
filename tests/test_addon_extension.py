"""A new add-on is one module and one line (plus its place in the API: spec field, chart default).

``tests/fixtures/addon_extension/fluent_bit.py`` is a throwaway add-on written
only against the declarations (``function/graph.py``). This test copies the
package, makes exactly the changes a new add-on needs, and plays an XR that asks
for it in a separate interpreter:

- the module, with its spec model, into ``function/addons/``;
- one line in ``function/registry.py`` (and its import);
- ``spec.logging.fluentBit`` in the frame (``function/spec.py``) and its chart default in
  ``function/step_input.py``;
- then ``make generate`` (``function_tools/apigen.py``) writes the XRDs, the Input CRD
  and the Compositions' chart defaults from the models and the declarations.

Then it checks that everything derived from the declarations picks it up: its
nodes compose in order, gated on the CNI, the CCM and the webhook, and validate
against the real CRDs; its Usages; ``status.roleARNs``; the owned values and
"did you mean" refusals; ``aws preflight``'s role checks; the provider policy;
the issuer's warning; the metrics' plugin label. Nothing else was edited.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube_schema import assert_valid

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "addon_extension" / "fluent_bit.py"

# Its place in the spec model (single-quoted: it holds docstrings).
SPEC_MODELS = '''

class LoggingSpec(StrictModel):
    """Log shipping."""

    fluent_bit: FluentBitSpec | None = Field(
        default=None,
        alias="fluentBit",
        description="Install Fluent Bit (charts.fluentBit) with an IRSA role for CloudWatch.",
    )


'''
SPEC_FIELD = """\
    logging: LoggingSpec = Field(
        default_factory=LoggingSpec, description="Log shipping (fluentBit)."
    )

"""
CHART_DEFAULT = """
    fluent_bit: ChartSource = Field(
        default=ChartSource(repository=EKS_CHARTS, name="aws-for-fluent-bit", version="0.1.35"),
        alias="fluentBit",
        description="The aws-for-fluent-bit chart (spec.logging.fluentBit).",
    )
"""


def _insert_before(text: str, anchor: str, insert: str) -> str:
    at = text.index(anchor)
    return text[:at] + insert + text[at:]


def _extend(package: Path) -> list[str]:
    """Make the changes a new add-on needs; return the files touched."""
    shutil.copy(FIXTURE, package / "addons" / "fluent_bit.py")
    registry = package / "registry.py"
    text = registry.read_text()
    text = text.replace(
        "from function.addons import calico,",
        "from function.addons import fluent_bit\nfrom function.addons import calico,",
    )
    text = _insert_before(text, "\n)\n", "\n    fluent_bit.ADDON,")
    registry.write_text(text)
    spec = package / "spec.py"
    text = spec.read_text()
    text = text.replace(
        "from function.addons.external_dns import",
        "from function.addons.fluent_bit import FluentBitSpec\nfrom function.addons.external_dns import",
    )
    text = _insert_before(text, "\nclass ClusterPluginSpec(", SPEC_MODELS)
    cls = text.index("\nclass ClusterPluginSpec(")
    validator = text.index("    @field_validator", cls)
    text = text[:validator] + SPEC_FIELD + text[validator:]
    spec.write_text(text)
    step_input = package / "step_input.py"
    text = _insert_before(step_input.read_text(), "\n\n\ndef _seconds(", CHART_DEFAULT.rstrip("\n"))
    step_input.write_text(text)
    return [
        "function/addons/fluent_bit.py",
        "function/registry.py",
        "function/spec.py",
        "function/step_input.py",
    ]


PROBE = Path(__file__).resolve().parent / "fixtures" / "addon_extension" / "probe.py"


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("extended")
    for package in ("function", "function_tools"):
        shutil.copytree(
            ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    touched = _extend(root / "function")
    # make generate reads the function package's metadata (maintainer, source, licence).
    (root / "package").mkdir()
    shutil.copy(ROOT / "package" / "crossplane.yaml", root / "package" / "crossplane.yaml")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, str(PROBE), str(ROOT)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout)
    out["touched"] = touched
    generate = subprocess.run(
        [sys.executable, "-m", "function_tools.apigen", "--root", str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert generate.returncode == 0, generate.stderr
    out["generated"] = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.yaml")
        if "function" not in p.parts and p != root / "package" / "crossplane.yaml"
    )
    out["xrd"] = yaml.safe_load((root / "apis" / "v2" / "definition.yaml").read_text())
    out["composition"] = yaml.safe_load((root / "apis" / "v2" / "composition.yaml").read_text())
    return out


def test_the_files_a_new_addon_needs(played: dict[str, Any]) -> None:
    assert played["touched"] == [
        "function/addons/fluent_bit.py",
        "function/registry.py",
        "function/spec.py",
        "function/step_input.py",
    ]
    assert played["plugin_names"][-1] == "fluent-bit"
    # What make generate writes from them; nothing else is edited by hand.
    assert played["generated"] == [
        "apis/v1/composition.yaml",
        "apis/v1/crossplane.yaml",
        "apis/v1/definition.yaml",
        "apis/v1/rollout-composition.yaml",
        "apis/v1/rollout-definition.yaml",
        "apis/v2/composition.yaml",
        "apis/v2/crossplane.yaml",
        "apis/v2/definition.yaml",
        "apis/v2/rollout-composition.yaml",
        "apis/v2/rollout-definition.yaml",
        "package/input/fn.clusterplugin.dev_inputs.yaml",
    ]


def test_make_generate_puts_it_in_the_api(played: dict[str, Any]) -> None:
    schema = played["xrd"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    fluent_bit = schema["spec"]["properties"]["logging"]["properties"]["fluentBit"]
    assert "serviceAccount.name" in fluent_bit["properties"]["values"]["description"]
    roles = schema["status"]["properties"]["roleARNs"]["properties"]
    assert roles["fluentBit"]["description"] == "Fluent Bit's role."
    (step,) = played["composition"]["spec"]["pipeline"]
    assert step["input"]["charts"]["fluentBit"]["name"] == "aws-for-fluent-bit"


def test_it_composes_after_what_it_waits_for_and_ends_ready(played: dict[str, Any]) -> None:
    assert played["ready"]
    assert played["deletions"] == []
    first = {name: i for i, created in enumerate(played["order"]) for name in created}
    assert first["fluent-bit-role"] > first["irsa-oidc-provider"]
    assert first["fluent-bit-role-attachment"] > first["fluent-bit-role"]
    for before in (
        "cni-release",
        "ccm-release",
        "pod-identity-webhook-release",
        "fluent-bit-role-attachment",
    ):
        assert first["fluent-bit-release"] > first[before], before


def test_what_it_composes_validates_against_the_real_crds(played: dict[str, Any]) -> None:
    objects = played["objects"]
    ours = [n for n in objects if "fluent-bit" in n]
    assert sorted(ours) == [
        "fluent-bit-release",
        "fluent-bit-role",
        "fluent-bit-role-attachment",
        "usage-fluent-bit-release-cni-release",
        "usage-fluent-bit-release-fluent-bit-role",
        "usage-fluent-bit-release-fluent-bit-role-attachment",
        "usage-fluent-bit-role-attachment-fluent-bit-role",
        "usage-fluent-bit-role-irsa-oidc-provider",
    ]
    for name in ours:
        assert_valid(objects[name])
    release = objects["fluent-bit-release"]["spec"]["forProvider"]
    assert release["namespace"] == "kube-system"
    sa = release["values"]["serviceAccount"]
    assert sa["name"] == "aws-for-fluent-bit"
    assert (
        sa["annotations"]["eks.amazonaws.com/role-arn"] == played["status"]["roleARNs"]["fluentBit"]
    )
    trust = json.loads(objects["fluent-bit-role"]["spec"]["forProvider"]["assumeRolePolicy"])
    condition = trust["Statement"][0]["Condition"]["StringEquals"]
    assert "system:serviceaccount:kube-system:aws-for-fluent-bit" in condition.values()
    attachment = objects["fluent-bit-role-attachment"]["spec"]["forProvider"]
    assert attachment["policyArn"] == "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"


def test_everything_derived_from_the_declarations_knows_it(played: dict[str, Any]) -> None:
    assert played["roles"][-1] == {
        "addon": "fluent-bit",
        "namespace": "kube-system",
        "service_account": "aws-for-fluent-bit",
        "managed_policy": "policy/CloudWatchAgentServerPolicy",
    }
    assert played["owned"] == (
        "spec.logging.fluentBit.values.serviceAccount.name: is set by the function and cannot "
        "be overridden in values; remove it"
    )
    assert played["typo"] == "spec.logging.fluentBitt: unknown field (did you mean fluentBit?)"
    assert "fluentBit" in played["warning"][0]
    assert "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy" in played["attachable"]
    assert any('phase="Ready"' in line for line in played["metrics"]), played["metrics"]
    assert [tuple(u) for u in played["usages"]] == [
        (
            "fluent-bit-release",
            "fluent-bit-role",
            "Fluent Bit uses this role until it is uninstalled",
        ),
        (
            "fluent-bit-release",
            "cni-release",
            "pods of Fluent Bit need the CNI until they are gone",
        ),
        (
            "fluent-bit-release",
            "fluent-bit-role-attachment",
            "its pods need the role's permissions until they are gone",
        ),
        (
            "fluent-bit-role-attachment",
            "fluent-bit-role",
            "a role with attached policies cannot be deleted",
        ),
        ("fluent-bit-role", "irsa-oidc-provider", "the role trusts this OIDC provider"),
        (
            "fluent-bit-release",
            "fluent-bit-role-association",
            "its pods get their credentials through this association",
        ),
        (
            "fluent-bit-release",
            "pod-identity-agent-release",
            "its pods get their credentials from the agent",
        ),
        ("fluent-bit-role-association", "fluent-bit-role", "the association names this role"),
    ]
