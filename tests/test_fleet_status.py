"""``function-cluster-plugin fleet status``: readable at 200 clusters, from what the function wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from function_tools.cli import cli
from function_tools.fleet import Fleet
from tests.scenarios import example
from tests.test_fleet import LBC, NEW, OLD, STEP_INPUT, rollout


def _xr(i: int, version: str, upgrade: str, report: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "clusterplugin.dev/v1alpha1",
        "kind": "ClusterPlugin",
        "metadata": {"name": "demo", "namespace": f"team-{i:03d}"},
        "spec": {"clusterName": "demo"},
        "status": {
            "plugins": [
                {"name": "vpc-cni", "phase": "Ready", "version": "1.22.4", "upgrade": "Healthy"},
                {"name": LBC, "phase": "Ready", "version": version, "upgrade": upgrade},
            ],
            "rollout": {"name": "lbc-3-5", "revision": "r", **report},
        },
    }


def _two_hundred() -> list[dict[str, Any]]:
    xrs = []
    for i in range(200):
        if i < 120:
            xrs.append(_xr(i, NEW, "Healthy", {"wave": "wave-1" if i < 50 else "wave-2", "phase": "Healthy"}))
        elif i < 125:
            xrs.append(_xr(i, OLD, "RolledBack", {"wave": "wave-2", "phase": "Failed", "reason": f"{LBC}: chart not found"}))
        elif i < 130:
            xrs.append(_xr(i, OLD, "Healthy", {"phase": "Skipped", "reason": "being deleted"}))
        else:
            xrs.append(_xr(i, OLD, "Healthy", {"phase": "NotAdmitted"}))
    return xrs


def test_two_hundred_clusters_fit_on_a_screen_grouped_by_add_on_wave_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _two_hundred()}))
    result = CliRunner().invoke(cli, ["fleet", "status", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) < 15, result.output
    assert "200 ClusterPlugins" in lines
    assert f"  {LBC}: {OLD} Healthy: 75, {OLD} RolledBack: 5, {NEW} Healthy: 120" in lines
    assert "by wave: not admitted: 75, wave-1: 50, wave-2: 75" in lines
    assert "failed (5):" in lines
    assert f"  {LBC}: chart not found: 5 (team-120/demo, team-121/demo, team-122/demo, team-123/demo, team-124/demo)" in lines
    assert "  being deleted: 5 (team-125/demo, team-126/demo, team-127/demo, team-128/demo, team-129/demo)" in lines
    every = CliRunner().invoke(cli, ["fleet", "status", "--all", str(path)])
    assert len(every.output.splitlines()) == len(lines) + 1 + 200


def test_it_reads_what_the_function_wrote_on_a_fleet_in_memory(tmp_path: Path) -> None:
    xr, required = example("selfhosted-full")
    xr["spec"].pop("storage")
    fleet = Fleet(xr, required, step_input=STEP_INPUT, seconds_per_reconcile=30, helm_poll=2)
    for i in range(3):
        fleet.add(f"team-{i}", {"fleet": "prod", **({"ring": "canary"} if i == 0 else {})})
    fleet.run(10)
    fleet.apply_rollout(rollout())
    fleet.run(2)
    path = tmp_path / "fleet.yaml"
    assert fleet.rollout is not None
    path.write_text(yaml.safe_dump_all([fleet.rollout, *(w.xr for w in fleet.worlds.values())]))
    result = CliRunner().invoke(cli, ["fleet", "status", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("rollout lbc-3-5: Progressing, canary open; 3 selected, 1 admitted")
    assert "by wave: canary: 1, not admitted: 2" in lines, result.output

    # The rollout deleted: the canary keeps the target it took, and says so.
    fleet.delete_rollout("lbc-3-5")
    fleet.run(2)
    path.write_text(yaml.safe_dump_all([w.xr for w in fleet.worlds.values()]))
    lines = CliRunner().invoke(cli, ["fleet", "status", str(path)]).output.splitlines()
    assert "by wave: held: 1, no rollout: 2" in lines, lines
    assert "held (1):" in lines, lines


def test_files_or_a_kubeconfig_one_of_the_two() -> None:
    result = CliRunner().invoke(cli, ["fleet", "status"])
    assert result.exit_code == 2
    assert "give FILEs or --kubeconfig" in result.output
