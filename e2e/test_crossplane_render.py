"""Crossplane's own render of every example agrees with the project's render (issue: real Crossplane).

For every XR example of both flavours, at the first reconcile and at a late one (the
observed composed resources of tests/fixtures/observed, which the project's simulator
writes: tests/test_render.py UPDATE_OBSERVED), ``crossplane render`` with core's real
reconcile calls the served function; its composed resources, XR status, conditions and
results must be what the project's render says, plus exactly what Crossplane documents
adding (e2e/crossplane_render.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e import crossplane_render as xp
from function_tools import input_files, render
from function_tools.in_memory_crossplane import CLUSTER_KINDS

STAGES = [False, True]
CASES = [xp.Inputs(name, late) for name in xp.xr_examples() for late in STAGES]


def test_every_example_is_covered() -> None:
    # Every example directory is an XR example except production/, which holds the
    # Function's production wiring and no XR: nothing to render.
    dirs = sorted(p.name for p in xp.EXAMPLES.iterdir() if p.is_dir())
    assert set(dirs) - set(xp.xr_examples()) == {"production"}
    kinds = {d["kind"] for d in input_files.load_documents([xp.EXAMPLES / "production"])}
    assert "Function" in kinds
    assert not kinds & {"ClusterPlugin", "XClusterPlugin"}
    # Both flavours, and every example has the simulator's late observed state.
    assert {c.legacy for c in CASES} == {True, False}
    for name in xp.xr_examples():
        assert (xp.OBSERVED / name).is_dir() and (xp.OBSERVED / f"{name}.xr.yaml").is_file()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_crossplane_render_agrees_with_ours(
    case: xp.Inputs,
    crossplane: Path,
    crossplane_core: Path,
    function_address: str,
) -> None:
    done = xp.crossplane_render(crossplane, crossplane_core, function_address, case)
    assert done.returncode == 0, done.stderr
    docs = xp.documents(done.stdout)
    ours = our_render(case, now=xp.served_clock(docs))
    step, _ = input_files.step_from_composition(input_files.load_documents([case.composition]))
    assert xp.compare(docs, ours, case, step) == []
    # Each example's Composition asks for its CAPI objects in the versions its files hold:
    # nothing waits for them (both renders hand over only the exact version asked for).
    waits = {p.get("waitingFor") for p in docs[0]["status"]["plugins"]}
    assert not waits & CLUSTER_KINDS, waits


def our_render(inputs: xp.Inputs, now: int | None = None) -> render.Rendered:
    out = xp.our_render(inputs, now=now)
    assert out.fatal is None, out.fatal
    assert out.deleted == [], "our render would delete an observed resource"
    return out


def test_a_fatal_result_stops_crossplane_render_with_our_message(
    tmp_path: Path, crossplane: Path, crossplane_core: Path, function_address: str
) -> None:
    inputs = xp.Inputs("selfhosted-full", late=False)
    xr = yaml.safe_load(inputs.xr.read_text())
    xr["spec"]["networking"]["calico"] = {}  # two CNIs: the function refuses with a FATAL
    bad = tmp_path / "xr.yaml"
    bad.write_text(yaml.safe_dump(xr))
    done = xp.crossplane_render(crossplane, crossplane_core, function_address, inputs, xr=bad)
    assert done.returncode != 0
    fatal = render.render(
        xr,
        required=input_files.load_documents([inputs.required]),
        step_input=input_files.step_from_composition(input_files.load_documents([inputs.composition]))[1],
    ).fatal
    assert fatal and "spec.networking" in fatal
    assert fatal in done.stderr, done.stderr
