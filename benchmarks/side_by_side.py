"""Before and after, side by side: another tree's function server beside this one's, same rounds.

``python -m benchmarks.side_by_side --before PATH`` (PATH: a checkout of an earlier commit, e.g.
``git worktree add /tmp/before 4ac54ed``). Each tree serves with its own code (``PYTHONPATH``)
and is sent its own benchmark request (the converged full request its own ``benchmarks.workload``
builds: what that tree's Crossplane would send); the echo floor is sent both. Every round gives
each of the four the same calls in turn, so the machine's load weighs on them alike, and the
ratios are taken round by round: ``make bench`` compares runs made at different times, whose
echo floors alone differed by 70% on this project's machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import loopback

HERE = Path(__file__).resolve().parent.parent
# The request a tree's own workload builds (run in that tree, so its XR and objects are its own).
_REQUEST = (
    "import sys; from benchmarks import workload; "
    "sys.stdout.buffer.write(workload.build(resource_counts=()).full.final.SerializeToString())"
)


def request_of(tree: Path) -> bytes:
    """The converged full request of ``tree``'s benchmark workload."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", _REQUEST], cwd=tree, env=env, capture_output=True, check=True
    )
    return out.stdout


def _server(name: str, argv: list[str], tree: Path, tmp: Path) -> loopback.Server:
    server = loopback.Server(name, argv, tmp / f"{name}.log")
    os.environ["PYTHONPATH"] = str(tree)  # read by loopback.server_env at the spawn
    server.start()
    return server


def main(argv: list[str] | None = None) -> None:
    """Measure and print server CPU per call of both trees and the echo floor."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the earlier tree")
    p.add_argument("--after", type=Path, default=HERE, help="the later tree (this one)")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--calls", type=int, default=400, help="calls per server per round")
    args = p.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    requests = {k: request_of(t) for k, t in trees.items()}
    tmp = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    py = sys.executable
    serve = [py, "-m", "function_tools.cli", "serve"]
    echo = [py, str(HERE / "benchmarks" / "floor_server.py"), "--kind", "echo"]
    servers: dict[str, tuple[loopback.Server, bytes]] = {}
    try:
        for k, tree in trees.items():
            servers[f"function-{k}"] = (_server(f"function-{k}", serve, tree, tmp), requests[k])
            servers[f"echo-{k}"] = (_server(f"echo-{k}", echo, HERE, tmp), requests[k])
        expected = {k: len(loopback.first_call(s, body)) for k, (s, body) in servers.items()}
        cpu: dict[str, list[float]] = {k: [] for k in servers}
        for r in range(args.rounds):
            for k, (s, body) in servers.items():
                x = loopback.load(
                    s,
                    body,
                    expected_len=expected[k],
                    concurrency=8,
                    calls=args.calls,
                    warmup=50 if r == 0 else 0,
                )
                cpu[k].append(x["server_cpu_ms_per_call"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in cpu.items()))
    finally:
        for s, _ in servers.values():
            s.stop()
    _report(cpu, trees, requests)


def _report(
    cpu: dict[str, list[float]], trees: dict[str, Path], requests: dict[str, bytes]
) -> None:
    def per_round(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(cpu[a], cpu[b], strict=True) if y]

    med = {k: statistics.median(v) for k, v in cpu.items()}
    for k in ("before", "after"):
        print(
            f"{k}: {trees[k]} ({len(requests[k]):,} bytes): server CPU per call "
            f"{med[f'function-{k}']:.3f} ms, echo {med[f'echo-{k}']:.3f} ms, "
            f"{statistics.median(per_round(f'function-{k}', f'echo-{k}')):.2f}x echo "
            f"(medians of {len(cpu[f'function-{k}'])} rounds)"
        )
    change = statistics.median(per_round("function-after", "function-before"))
    over_floor = [
        a / b
        for a, b in zip(
            per_round("function-after", "echo-after"),
            per_round("function-before", "echo-before"),
            strict=True,
        )
    ]
    print(f"after / before, server CPU per call: {change:.3f} (median of rounds)")
    print(f"after / before, each over its echo floor: {statistics.median(over_floor):.3f}")


if __name__ == "__main__":
    main()
