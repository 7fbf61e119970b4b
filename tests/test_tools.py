"""scripts/tools.py and e2e/tools.json: the pinned Go tools of make e2e, checked without Go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "scripts" / "tools.py"
LOCK = json.loads((ROOT / "e2e" / "tools.json").read_text())

sys.path.insert(0, str(ROOT / "scripts"))
import tools  # noqa: E402


def test_every_tool_is_pinned_with_its_module_and_checksums() -> None:
    assert tools.load_lock() == LOCK  # versions agree with their scratch modules
    for name, tool in LOCK["tools"].items():
        module = LOCK["modules"][tool["scratch"]]
        requires = dict(r.split(" ") for r in module["requires"])
        assert requires[tool["module"]] == tool["version"], name
        assert tool["package"].startswith(tool["module"]), name
        replaces = {old: (new, v) for old, new, v in map(tools.replace_of, module["replaces"])}
        sums = {tuple(line.split(" ")[:2]) for line in module["go_sum"]}
        # Every required module (at its replacement's version) has its go.mod hash.
        for path, version in requires.items():
            path_of, version_of = replaces.get(path, (path, version))
            assert (path_of, f"{version_of}/go.mod") in sums, (name, path)
        assert (tool["module"], tool["version"]) in sums, name


def test_kubernetes_staging_modules_are_pinned_at_the_release() -> None:
    module = LOCK["modules"]["kubernetes"]
    replaces = dict(r.split(" ") for r in module["replaces"])
    assert replaces["k8s.io/api"] == module["staging"]
    assert replaces["k8s.io/apiserver"] == module["staging"]
    assert set(replaces.values()) == {module["staging"]}
    text = tools.go_mod_text(LOCK, "kubernetes", resolved=True)
    assert f"\tk8s.io/api => k8s.io/api {module['staging']}\n" in text
    assert "tool k8s.io/kubernetes/cmd/kube-apiserver\n" in text


def test_provider_aws_is_built_with_its_terraform_fork_hashed() -> None:
    module = LOCK["modules"]["provider-aws"]
    fork = "github.com/upbound/terraform-provider-aws"
    (old, new, version), *_ = (tools.replace_of(r) for r in module["replaces"])
    assert (old, new) == ("github.com/hashicorp/terraform-provider-aws", fork)
    assert module["replace"][old] == f"{fork} {version}"
    text = tools.go_mod_text(LOCK, "provider-aws", resolved=True)
    assert f"\t{old} => {fork} {version}\n" in text
    # Both hashes of the fork, which the checksum database does not know.
    assert {line.split(" ")[1] for line in module["go_sum"] if line.startswith(f"{fork} ")} == {
        version,
        f"{version}/go.mod",
    }


def test_a_malformed_replace_entry_is_refused() -> None:
    with pytest.raises(tools.ToolError, match="'PATH VERSION' or 'PATH NEW_PATH VERSION'"):
        tools.replace_of("only-a-path")


def test_version_ldflags() -> None:
    flags = tools.ldflags(LOCK["tools"]["kube-apiserver"])
    assert flags.startswith("-s -w ")
    assert "-X k8s.io/component-base/version.gitVersion=v1.35.8" in flags
    assert "-X k8s.io/component-base/version.gitMinor=35" in flags
    assert "crossplane-runtime/v2/pkg/version.version=v2.4.0" in tools.ldflags(
        LOCK["tools"]["crossplane-core"]
    )


def test_path_without_go_fails_saying_why(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(TOOLS), "path", "crossplane"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "go is not on PATH" in done.stderr and "Go 1.26" in done.stderr


def test_unknown_tool_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOLS), "path", "no-such-tool"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "unknown tool 'no-such-tool'" in done.stderr
