"""Crossplane 1.x: its CLI (cmd/crank of github.com/crossplane/crossplane v1.20) renders the legacy examples.

crank runs the pipeline in process and, knowing no capabilities, answers only the
deprecated ``extra_resources`` requirements (label selectors): the path Crossplane 1.x
users depend on. Its output must be what ``function-cluster-plugin render --crossplane-v1``
prints (e2e/crossplane_render.py compare_crank), and its ``beta validate`` must accept it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e import crossplane_render as xp
from e2e.conftest import ROOT, tool_source
from function_tools.in_memory_crossplane import CLUSTER_KINDS

LEGACY = [
    c for c in (xp.Inputs(n, late) for n in xp.xr_examples() for late in (False, True)) if c.legacy
]


def crank_version() -> str:
    return str(json.loads((ROOT / "e2e" / "tools.json").read_text())["tools"]["crank-1"]["version"])


def test_there_are_legacy_examples() -> None:
    assert LEGACY


def crank_rendered(
    inputs: xp.Inputs, tmp_path: Path, crank: Path, address: str
) -> tuple[xp.Inputs, list[dict]]:
    done = xp.crank_render(crank, address, inputs, tmp_path)
    assert done.returncode == 0, done.stderr
    return inputs, xp.documents(done.stdout)


def validate(crank: Path, inputs: xp.Inputs, docs: list[dict], tmp_path: Path) -> str:
    crds = tool_source("crank-1") / "cluster" / "crds"
    checked = xp.validate_1x(
        crank, inputs, docs, tmp_path, crossplane_crds=crds, version=crank_version()
    )
    return f"exit {checked.returncode}\n{checked.stdout}{checked.stderr}"


@pytest.mark.parametrize("case", LEGACY, ids=str)
def test_crossplane_1_render_agrees_with_ours(
    case: xp.Inputs, tmp_path: Path, crank_1: Path, function_address: str
) -> None:
    inputs, docs = crank_rendered(case, tmp_path, crank_1, function_address)
    ours = xp.our_render(inputs, crossplane_v1=True, now=xp.served_clock(docs))
    assert ours.fatal is None
    assert xp.compare_crank(docs, ours, inputs) == []
    # The CAPI objects reached the function through extra_resources: nothing waits for them.
    waits = {p.get("waitingFor") for p in docs[0]["status"]["plugins"]}
    assert not waits & CLUSTER_KINDS, waits


@pytest.mark.parametrize("case", LEGACY, ids=str)
def test_crossplane_1_validates_what_it_renders(
    case: xp.Inputs, tmp_path: Path, crank_1: Path, function_address: str
) -> None:
    inputs, rendered = crank_rendered(case, tmp_path, crank_1, function_address)
    docs = xp.resources_only(rendered)
    out = validate(crank_1, inputs, docs, tmp_path)
    assert out.startswith("exit 0\n"), out
    assert (
        f"Total {len(docs)} resources: 0 missing schemas, {len(docs)} success cases, 0 failure cases"
        in out
    )
    assert "downloading" not in out  # the seeded cache answered: nothing fetched


def test_crossplane_1_validate_reports_a_broken_resource(
    tmp_path: Path, crank_1: Path, function_address: str
) -> None:
    # The Calico claim's late stage: a Role to break, and a CNI to make two of.
    case = next(c for c in LEGACY if c.name == "calico-legacy-claim" and c.late)
    inputs, rendered = crank_rendered(case, tmp_path, crank_1, function_address)
    docs = xp.resources_only(rendered)
    role = next(d for d in docs if d["kind"] == "Role")
    del role["spec"]["forProvider"]["assumeRolePolicy"]  # a CEL rule of the Role CRD
    role["spec"]["forProvider"]["assumeRolePolicyDocument"] = "{}"  # no such field
    docs[0]["spec"]["networking"]["amazonVPC"] = {}  # the XRD's CEL rule: one CNI
    out = validate(crank_1, inputs, docs, tmp_path)
    assert not out.startswith("exit 0\n"), out
    assert "spec.forProvider.assumeRolePolicy is a required parameter" in out
    assert "assumeRolePolicyDocument" in out and "unknown field" in out
    assert "set at most one of amazonVPC and calico" in out
    assert (
        f"Total {len(docs)} resources: 0 missing schemas, {len(docs) - 2} success cases, 2 failure cases"
        in out
    )
