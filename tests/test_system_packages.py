"""make e2e, release and image name every missing system command in one line, before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scripts import system_packages

SCRIPT = Path(system_packages.__file__)


def run_check(target: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "check", target],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_bare_path_names_every_command_and_package_in_one_line(tmp_path):
    result = run_check("e2e", str(tmp_path))
    assert result.returncode == 1
    line = result.stderr.strip()
    assert "\n" not in line
    for command, package in system_packages.NEEDS["e2e"].items():
        assert command in line and package in line
    assert "Go 1.26" in line


def test_nothing_missing_is_silent(tmp_path):
    for command in system_packages.NEEDS["release"]:
        stub = tmp_path / command
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    result = run_check("release", str(tmp_path))
    assert (result.returncode, result.stderr) == (0, "")
    assert run_check("e2e", str(tmp_path)).stderr.count("docker-registry") == 2  # command, package
