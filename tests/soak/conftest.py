"""The longer runs (``make soak``): collected only with SOAK=1; prints the run's figures.

Without SOAK=1 the files here are not collected at all, so the default run stays fast.
The figures hook is active in every run that collects ``tests/`` (the default run too):
it prints what the property, fault and gRPC tests exercised, from ``tests.strategies.FIGURES``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

collect_ignore_glob = [] if os.environ.get("SOAK") == "1" else ["test_*.py"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the figures the tests recorded (cases, schedules, requests, faults...)."""
    strategies = sys.modules.get("tests.strategies")
    figures = getattr(strategies, "FIGURES", None)
    if not figures:
        return
    terminalreporter.section("figures")
    for group in sorted(figures):
        items = ", ".join(f"{k}={v}" for k, v in sorted(figures[group].items()))
        terminalreporter.write_line(f"{group}: {items}")
