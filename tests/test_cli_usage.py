"""click's usage errors (a missing file, an unknown option, a missing argument) take one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMAND = [sys.executable, "-m", "function_tools.cli"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["render", "/nonexistent/xr.yaml"], "File '/nonexistent/xr.yaml' does not exist"),
        (["simulate", "--bogus", "x.yaml"], "No such option '--bogus'"),
        (["aws", "preflight"], "Missing argument 'XR.yaml'"),
        (["no-such-command"], "No such command 'no-such-command'"),
    ],
)
def test_a_usage_error_is_one_line_with_the_help_hint(args, words):
    result = subprocess.run([*COMMAND, *args], capture_output=True, text=True, check=False)
    assert result.returncode == 2, result
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ") and words in line, line
    assert line.endswith("--help')"), line


def test_help_and_version_still_exit_zero():
    for args in (["--help"], ["--version"], ["render", "--help"]):
        result = subprocess.run([*COMMAND, *args], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result
        assert result.stdout and result.stderr == ""
