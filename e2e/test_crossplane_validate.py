"""Crossplane's own validator accepts everything Crossplane renders for every example.

``crossplane resource validate`` (OpenAPI schema, unknown fields, CEL rules, defaults)
against the real CRDs vendored in tests/fixtures/crds and the project's XRDs, offline.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from e2e import crossplane_render as xp
from e2e.test_crossplane_render import CASES

SUMMARY = re.compile(
    r"Total (\d+) resources: (\d+) missing schemas, (\d+) success cases, (\d+) failure cases"
)


def summary(text: str) -> tuple[int, int, int, int]:
    found = SUMMARY.search(text)
    assert found, text
    total, missing, success, failure = (int(g) for g in found.groups())
    return total, missing, success, failure


def rendered(
    inputs: xp.Inputs, tmp_path: Path, crossplane: Path, core: Path, address: str
) -> tuple[xp.Inputs, list[dict]]:
    done = xp.crossplane_render(crossplane, core, address, inputs)
    assert done.returncode == 0, done.stderr
    return inputs, xp.resources_only(xp.documents(done.stdout))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_everything_crossplane_renders_validates(
    case: xp.Inputs, tmp_path: Path, crossplane: Path, crossplane_core: Path, function_address: str
) -> None:
    inputs, docs = rendered(case, tmp_path, crossplane, crossplane_core, function_address)
    done = xp.validate(crossplane, inputs, docs, tmp_path, "--skip-success-results")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # The XR and every composed resource, each checked against its schema.
    assert summary(out) == (len(docs), 0, len(docs), 0), out


def test_the_validator_reports_a_broken_resource(
    tmp_path: Path, crossplane: Path, crossplane_core: Path, function_address: str
) -> None:
    inputs, docs = rendered(
        xp.Inputs("selfhosted-full", late=True),
        tmp_path,
        crossplane,
        crossplane_core,
        function_address,
    )
    broken = copy.deepcopy(docs)
    role = next(d for d in broken if d["kind"] == "Role")
    del role["spec"]["forProvider"]["assumeRolePolicy"]  # a CEL rule of the Role CRD
    role["spec"]["forProvider"]["assumeRolePolicyDocument"] = "{}"  # no such field
    xr = broken[0]
    xr["spec"]["networking"]["calico"] = {}  # the XRD's CEL rule: one CNI
    done = xp.validate(crossplane, inputs, broken, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "spec.forProvider.assumeRolePolicy is a required parameter" in out
    assert "assumeRolePolicyDocument" in out and "unknown field" in out
    assert "set at most one of amazonVPC and calico" in out
    total, missing, _, failure = summary(out)
    assert (total, missing, failure) == (len(docs), 0, 2), out
