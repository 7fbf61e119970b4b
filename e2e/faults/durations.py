"""How long each fault lasts: short in ``make e2e``, long in ``make faults`` (``FAULTS_LONG=1``).

The long version holds each fault past the timeouts that decide what the other parts do:
the function down past Crossplane's 2-minute reconcile timeout (its calls wait for the function,
``waitForReady``, until then: internal/xfn/function_runner.go), the workload cluster's API cut
past provider-helm's default 10-minute ``--timeout`` (run with its defaults there), AWS
misbehaving for minutes.
"""

from __future__ import annotations

import os

LONG = os.environ.get("FAULTS_LONG") == "1"


def seconds(short: float, long: float) -> float:
    """``long`` in ``make faults``, ``short`` otherwise."""
    return long if LONG else short
