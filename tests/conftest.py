"""Session-wide pytest hooks and fixtures."""

from __future__ import annotations

import sys
from typing import Any

import pytest


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Report how much the real helm rendered (tests/test_helm.py), when it ran."""
    helm = sys.modules.get("tests.helm")
    if helm is not None and helm.RENDERER.requests:
        terminalreporter.write_line(helm.RENDERER.summary())


@pytest.fixture
def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials for the AWS emulator, and nothing from this machine's AWS configuration."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
