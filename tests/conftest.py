"""Session-wide pytest hooks."""

from __future__ import annotations

import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Report how much the real helm rendered (tests/test_helm.py), when it ran."""
    helm = sys.modules.get("tests.helm")
    if helm is not None and helm.RENDERER.requests:
        terminalreporter.write_line(helm.RENDERER.summary())
