"""The fault table: one row per fault case (fault, point, state at the fault, how long the
part was down, the time to recover, and the assertions that held), printed at the end of the
run and appended as JSON lines to ``$FAULT_REPORT`` when set (``make faults`` and the docs'
table read it)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROWS: list[Row] = []


@dataclass
class Row:
    """One fault case."""

    fault: str
    point: str
    state: str = ""  # what was composed and Ready, or left, when the fault came
    down_s: float = 0.0  # from the fault to its repair (the part serving again, the path restored)
    recovery_s: float = 0.0  # from the repair to converged (Ready, or ClusterDeleted)
    held: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def holds(self, assertion: str, problems: list[str]) -> None:
        """Assert that ``assertion`` held (no problems); record it as held."""
        assert not problems, f"{self.fault} {self.point}: {assertion} did not hold:\n" + "\n".join(problems)
        self.held.append(assertion)

    def done(self) -> Row:
        """Record the row (the case's assertions all held)."""
        ROWS.append(self)
        path = os.environ.get("FAULT_REPORT")
        if path:
            with Path(path).open("a") as out:
                out.write(json.dumps({k: v for k, v in asdict(self).items() if k != "started"}) + "\n")
        return self


def table(rows: list[Row]) -> str:
    """The rows as the Markdown table of docs/operating.md."""
    lines = [
        "| fault | point | at the fault | down | recovered in | assertions held |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.fault} | {r.point} | {r.state} | {r.down_s:.0f} s | {r.recovery_s:.0f} s | {', '.join(r.held)} |" for r in rows
    ]
    return "\n".join(lines)
