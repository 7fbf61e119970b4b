"""Run every benchmark in one process tree and write the results.

    .venv/bin/python -m benchmarks [--quick] [--main-calls N] [--calls N]
        [--sections inprocess,scaling,coldstart,loopback] [--json PATH] [--markdown PATH]

Writes ``benchmarks/results/latest.json`` and ``BENCHMARKS.md`` (machine facts,
targets against the floors measured in the same run, the tables). Servers run as
child processes on 127.0.0.1 and are stopped before the run ends; every load loop
is bounded by a call count and a time limit.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.internal import api_implementation

from benchmarks import floors, inprocess, loopback, report, tls, workload
from function import fn

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"
BASELINE = ROOT / "benchmarks" / "results" / "baseline.json"
MARKDOWN = ROOT / "BENCHMARKS.md"
SECTIONS = ("inprocess", "scaling", "coldstart", "loopback")
MIB = 1024
# The function server as issue 14 and 15 run it, beside the plain one in the same rounds:
# (extra serve flags, the phases it takes part in: (load, concurrency)).
METRICS_ON = ["--metrics-address", "127.0.0.1:{free_port}"]
AGE_S = 3
CONNECTION_AGE = ["--max-connection-age", f"{AGE_S}s", "--max-connection-age-grace", "10s"]
VARIANTS: dict[str, tuple[list[str], set[tuple[str, ...]]]] = {
    "function-metrics": (METRICS_ON, {("full", "1"), ("full", "8"), ("full", "64"), ("first",)}),
    "function-age": (CONNECTION_AGE, {("full", "8")}),
}
RECONNECTS = 300


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """The function logs JSON lines to stdout (on plugin transitions): keep them off the terminal.

    The write still happens (to /dev/null), so its cost stays measured.
    """
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def log(msg: str) -> None:
    """Progress, on stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """Facts about where the figures come from."""
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "function"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
        if dirty:
            commit += " (function/ modified)"

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_at_start": loadavg(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "grpcio": version("grpcio"),
        "protobuf": version("protobuf"),
        "protobuf_backend": api_implementation.Type(),
        "sdk": version("crossplane-function-sdk-python"),
        "commit": commit,
    }


def loadavg() -> str:
    """/proc/loadavg's 1, 5 and 15 minute figures: others' work on the machine skews results."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def describe(wl: workload.Workload) -> dict[str, Any]:
    """Sizes of the requests."""
    full = wl.full.final
    n = len(full.observed.resources)
    return {
        "full_request_bytes": full.ByteSize(),
        "full_observed_resources": n,
        "full_observed_bytes_mean": round(full.observed.ByteSize() / n) if n else 0,
        "full_required_resources": len(full.required_resources),
        "full_response_bytes": fn.run(full).ByteSize(),
        "reconcile_iterations": len(wl.full.requests),
        "reconcile_request_bytes": [r.ByteSize() for r in wl.full.requests],
        "first_request_bytes": wl.first.ByteSize(),
        "by_plugins_observed": {
            str(k): len(r.observed.resources) for k, r in wl.by_plugins.items()
        },
    }


# --- in process -------------------------------------------------------------------


def run_inprocess(
    wl: workload.Workload, *, iterations: int, cold_iterations: int, warmup: int = 20
) -> dict[str, Any]:
    """Latency and CPU per call, function and floors, same requests."""
    runners = inprocess.runners()
    out: dict[str, Any] = {}
    cases = {
        "full": [wl.full.final],
        "first": [wl.first],
        "reconcile": wl.full.requests,
    }
    with quiet_stdout():
        for case, reqs in cases.items():
            its = iterations if case != "reconcile" else max(1, iterations // 3)
            out[case] = {
                name: inprocess.measure(run, reqs, iterations=its, warmup=warmup)
                for name, run in runners.items()
            }
        for case in ("full", "reconcile"):
            reqs = cases[case]
            its = cold_iterations if case == "full" else max(1, cold_iterations // 3)
            out[case]["function_cold"] = inprocess.measure(
                runners["function"], reqs, iterations=its, warmup=warmup, cold=True
            )
    return out


def run_scaling(wl: workload.Workload, *, iterations: int, warmup: int = 5) -> dict[str, Any]:
    """In-process cost against observed resources and against plugins."""
    runners = inprocess.runners()
    out: dict[str, Any] = {"by_resources": {}, "by_plugins": {}}
    with quiet_stdout():
        for series, reqs in wl.by_resources.items():
            out["by_resources"][series] = {
                name: {
                    str(n): inprocess.measure(run, [r], iterations=iterations, warmup=warmup)
                    for n, r in reqs.items()
                }
                for name, run in runners.items()
            }
        out["by_plugins"] = {
            name: {
                str(n): {
                    "observed": len(r.observed.resources),
                    **inprocess.measure(run, [r], iterations=iterations, warmup=warmup),
                }
                for n, r in wl.by_plugins.items()
            }
            for name, run in runners.items()
        }
    for series, per_runner in out["by_resources"].items():
        for _name, points in per_runner.items():
            points["slope_cpu_us_per_resource"] = round(
                inprocess.slope({int(n): p["cpu_us_per_call"] for n, p in points.items()}), 3
            )
        out["by_resources"][series] = per_runner
    for _name, points in out["by_plugins"].items():
        points["slope_cpu_us_per_resource"] = round(
            inprocess.slope({p["observed"]: p["cpu_us_per_call"] for p in points.values()}), 3
        )
    return out


# --- cold start -----------------------------------------------------------------------


def run_coldstart(wl: workload.Workload, *, repeats: int, tmp: Path) -> dict[str, Any]:
    """Exec until the first RunFunction (the empty first request) is answered."""
    req = wl.first.SerializeToString()
    commands = {
        "function": (loopback.function_command(), []),
        "function-metrics": (loopback.function_command(), METRICS_ON),
        "noop": (loopback.floor_command("noop"), []),
    }
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in commands}
    for name, (argv, extra) in commands.items():  # one discarded run each: bytecode, page cache
        loopback.cold_start(argv, req, tmp / f"cold-{name}.log", extra)
    for _ in range(repeats):
        for name, (argv, extra) in commands.items():
            samples[name].append(loopback.cold_start(argv, req, tmp / f"cold-{name}.log", extra))
    out: dict[str, Any] = {}
    for name, runs in samples.items():
        answered = [r["answered_s"] for r in runs]
        out[name] = {
            "repeats": len(runs),
            "answered_ms_median": round(statistics.median(answered) * 1e3, 1),
            "answered_ms_min": round(min(answered) * 1e3, 1),
            "answered_ms_max": round(max(answered) * 1e3, 1),
            "listening_ms_median": round(
                statistics.median(r["listening_s"] for r in runs) * 1e3, 1
            ),
            "rss_kib_after_first_call": round(statistics.median(r["rss_kib"] for r in runs)),
        }
    return out


# --- loopback -------------------------------------------------------------------------


def _expected(kind: str, req: fnv1.RunFunctionRequest) -> int:
    run = fn.run if kind.startswith("function") else floors.RUNNERS[kind]
    with quiet_stdout():
        return run(req).ByteSize()


def _combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure set from interleaved rounds (latencies pooled; CPU and time summed)."""
    latencies = [x for r in rounds for x in r.pop("latencies")]
    calls = sum(r["calls"] for r in rounds)
    wall = sum(r["wall_s"] for r in rounds)
    errors: dict[str, int] = {}
    for r in rounds:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    server_cpu = sum(r["server_cpu_s"] for r in rounds)
    client_cpu = sum(r["client_cpu_s"] for r in rounds)
    last = rounds[-1]
    return {
        "concurrency": last["concurrency"],
        "rounds": len(rounds),
        "calls": calls,
        "ok": sum(r["ok"] for r in rounds),
        "errors": errors,
        "wall_s": round(wall, 3),
        "throughput_rps": round(calls / wall, 1) if wall else 0.0,
        "p50_ms": round(inprocess.pct(latencies, 0.5) * 1e3, 3) if latencies else None,
        "p99_ms": round(inprocess.pct(latencies, 0.99) * 1e3, 3) if latencies else None,
        "server_cpu_ms_per_call": round(server_cpu / calls * 1e3, 3) if calls else None,
        "server_cpu_ms_per_call_rounds": [r["server_cpu_ms_per_call"] for r in rounds],
        "throughput_rps_rounds": [r["throughput_rps"] for r in rounds],
        "server_cpu_cores": round(server_cpu / wall, 3) if wall else None,
        "client_cpu_ms_per_call": round(client_cpu / calls * 1e3, 3) if calls else None,
        "rss_kib_end": last["rss_kib_end"],
        "rss_kib_peak": last["rss_kib_peak"],
        "stopped_by_time_limit": any(r["stopped_by_time_limit"] for r in rounds),
    }


def run_loopback(
    wl: workload.Workload,
    *,
    tmp: Path,
    calls: int,
    main_calls: int,
    scale_calls: int,
    kinds: tuple[str, ...] = ("function", "noop", "echo", "function-metrics", "function-age"),
    modes: tuple[str, ...] = ("insecure", "mtls"),
    concurrencies: tuple[int, ...] = (1, 8, 64),
    scaling: bool = True,
    max_seconds: float = 900.0,
    warmup: int = 50,
    rounds: int = 5,
) -> dict[str, Any]:
    """Every server kind, insecure and mTLS: concurrency 1/8/64, first request, scaling.

    The servers of one mode run side by side (an idle server costs nothing) and every
    measurement goes round by round, each round giving every server the same calls in
    turn: others' work on the machine then weighs on the function and its floors alike,
    and the ratios are taken round by round. Then the soak: ``main_calls`` calls to a
    fresh function server (insecure, concurrency 8) for RSS over time.
    """
    server_dir, client_dir = tls.generate(tmp / "tls") if "mtls" in modes else (None, None)
    out: dict[str, Any] = {}
    for mode in modes:
        servers: dict[str, loopback.Server] = {}
        for kind in kinds:
            argv = (
                loopback.function_command()
                if kind.startswith("function")
                else loopback.floor_command(kind)
            )
            servers[kind] = loopback.Server(
                f"{kind}-{mode}",
                argv,
                tmp / f"{kind}-{mode}.log",
                extra=VARIANTS.get(kind, ([], set()))[0],
                tls_server_dir=server_dir if mode == "mtls" else None,
                tls_client_dir=client_dir if mode == "mtls" else None,
            )
        res: dict[str, dict[str, Any]] = {}
        try:
            for kind, server in servers.items():
                log(f"loopback {kind}/{mode}: starting {' '.join(server.command()[:2])}")
                server.start()
                res[kind] = {
                    "command": " ".join(
                        Path(a).name if i == 0 else a for i, a in enumerate(server.argv)
                    ),
                    "listening_ms": round(server.listening_s * 1e3, 1),
                    "rss_kib_start": server.memory_at_start["VmRSS"],
                }
            # (where in the results, request, concurrency, calls)
            phases: list[tuple[tuple[str, ...], fnv1.RunFunctionRequest, int, int]] = [
                (("full", str(c)), wl.full.final, c, calls) for c in concurrencies
            ]
            phases.append((("first",), wl.first, 8, calls))
            if mode == "insecure":
                phases += [
                    (("reconcile", str(i)), req, 8, calls)
                    for i, req in enumerate(wl.full.requests, start=1)
                ]
                if scaling:
                    phases += [
                        (("by_resources", series, str(count)), req, 8, scale_calls)
                        for series, reqs in wl.by_resources.items()
                        for count, req in reqs.items()
                    ]
            for where, req, c, n in phases:
                if n <= 0:
                    continue
                log(f"loopback */{mode}: {'/'.join(where)}, concurrency {c}, {n} calls each")
                body = req.SerializeToString()
                taking = {
                    k: s
                    for k, s in servers.items()
                    if k not in VARIANTS or where[:2] in VARIANTS[k][1]
                }
                expected = {kind: _expected(kind, req) for kind in taking}
                per_round = max(1, n // rounds)
                got: dict[str, list[dict[str, Any]]] = {kind: [] for kind in taking}
                for r in range(min(rounds, n)):
                    for kind, server in taking.items():
                        x = loopback.load(
                            server,
                            body,
                            expected_len=expected[kind],
                            concurrency=c,
                            calls=per_round,
                            warmup=warmup if r == 0 else 0,
                            max_seconds=max_seconds / rounds,
                            keep_latencies=True,
                        )
                        x.pop("rss_samples", None)
                        # Scraped once a round, as Prometheus would now and then.
                        x["scrape_bytes"] = len(server.scrape())
                        got[kind].append(x)
                for kind, xs in got.items():
                    node = res[kind]
                    for key in where[:-1]:
                        node = node.setdefault(key, {})
                    node[where[-1]] = _combine(xs)
            if "function" in servers and main_calls:
                n = min(RECONNECTS, main_calls)
                log(f"loopback function/{mode}: cost of a new connection, {n} of them")
                res["function"]["reconnect"] = loopback.reconnect_cost(
                    servers["function"], wl.first.SerializeToString(), n
                )
            if mode == "insecure" and "function" in servers and main_calls:
                res["function"]["soak"] = _soak(
                    servers["function"], wl, tmp=tmp, calls=main_calls, max_seconds=max_seconds
                )
            for kind, server in servers.items():
                mem = loopback.proc_memory_kib(server.pid)
                res[kind]["rss_kib_end"] = mem["VmRSS"]
                res[kind]["rss_kib_peak"] = mem["VmHWM"]
                for pts in res[kind].get("by_resources", {}).values():
                    pts["slope_server_cpu_us_per_resource"] = round(
                        1e3
                        * inprocess.slope(
                            {int(k): p["server_cpu_ms_per_call"] for k, p in pts.items()}
                        ),
                        3,
                    )
        finally:
            for kind, server in servers.items():
                if kind in res:
                    res[kind]["exit_code"] = server.stop()
                else:
                    server.stop()
        for kind, figures in res.items():
            out[f"{kind}/{mode}"] = figures
    return out


def _soak(
    like: loopback.Server,
    wl: workload.Workload,
    *,
    tmp: Path,
    calls: int,
    max_seconds: float,
) -> dict[str, Any]:
    """``calls`` calls at concurrency 8 to a fresh function server: RSS from its start.

    Fresh, so growth is measured from a known start and not from what the heavier
    loads before it (concurrency 64, 300-resource requests) left in the allocator.
    """
    server = loopback.Server("function-soak", like.argv, tmp / "function-soak.log")
    log(f"loopback function/insecure: soak on a fresh server, concurrency 8, {calls} calls")
    server.start()
    try:
        soak = loopback.load(
            server,
            wl.full.final.SerializeToString(),
            expected_len=_expected("function", wl.full.final),
            concurrency=8,
            calls=calls,
            warmup=0,
            max_seconds=max_seconds,
        )
        soak["rss_kib_start"] = server.memory_at_start["VmRSS"]
    finally:
        soak_exit = server.stop()
    soak["exit_code"] = soak_exit
    soak.pop("server_cpu_s", None)
    soak.pop("client_cpu_s", None)
    return soak


def _round_ratios(a: dict[str, Any], b: dict[str, Any], key: str) -> list[float]:
    """a/b round by round (the rounds ran side by side)."""
    return [x / y for x, y in zip(a[f"{key}_rounds"], b[f"{key}_rounds"], strict=True) if y]


# --- fleet ------------------------------------------------------------------------------

FLEET = 10_000
INTERVALS = {"1m (Crossplane's default --poll-interval)": 60, "10m": 600}


def fleet(results: dict[str, Any]) -> list[dict[str, Any]]:
    """What ten thousand XRs cost per reconcile interval, from measured server CPU.

    Per reconcile: the server CPU per call of each call of Crossplane's
    required-resources loop (loopback, concurrency 8), summed. For the function,
    also with its per-XR caches cold (in-process cold minus warm, added): what each
    XR pays when there are more XRs than cache entries.
    """
    lb = results.get("loopback", {})
    ip = results.get("inprocess", {}).get("reconcile", {})
    rows = []
    for kind in ("function", "echo", "noop"):
        rec = lb.get(f"{kind}/insecure", {}).get("reconcile")
        if not rec:
            continue
        per_reconcile = sum(r["server_cpu_ms_per_call"] for r in rec.values())
        variants = [(kind, per_reconcile)]
        if kind == "function" and "function_cold" in ip:
            extra = (
                ip["function_cold"]["cpu_us_per_call"] - ip["function"]["cpu_us_per_call"]
            ) / 1e3
            variants.append(("function, per-XR caches cold", per_reconcile + max(0.0, extra)))
        for label, ms in variants:
            row: dict[str, Any] = {"server": label, "cpu_ms_per_reconcile": round(ms, 3)}
            for name, seconds in INTERVALS.items():
                row[name] = round(FLEET / seconds * ms / 1e3, 4)  # cores
            rows.append(row)
    return rows


# --- targets ----------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of issue 5, against the floors measured in the same run."""
    rows: list[dict[str, Any]] = []
    lb = results.get("loopback", {})
    fn_ins, echo_ins = lb.get("function/insecure"), lb.get("echo/insecure")
    if fn_ins and echo_ins and "8" in fn_ins.get("full", {}) and "8" in echo_ins.get("full", {}):
        f8, e8 = fn_ins["full"]["8"], echo_ins["full"]["8"]
        cpu = statistics.median(_round_ratios(f8, e8, "server_cpu_ms_per_call"))
        rows.append(
            {
                "target": "server CPU per full-XR call <= 1.5x echo (insecure, concurrency 8)",
                "measured": f"{f8['server_cpu_ms_per_call']:.3f} ms vs echo "
                f"{e8['server_cpu_ms_per_call']:.3f} ms: {cpu:.2f}x (median of "
                f"{len(f8['server_cpu_ms_per_call_rounds'])} side-by-side rounds)",
                "met": cpu <= 1.5,
                "ratio": round(cpu, 3),
            }
        )
        tput = statistics.median(_round_ratios(f8, e8, "throughput_rps"))
        rows.append(
            {
                "target": "loopback throughput at concurrency 8 >= 70% of echo",
                "measured": f"{f8['throughput_rps']:.0f} vs echo {e8['throughput_rps']:.0f} "
                f"calls/s: {tput:.0%} (median of rounds)",
                "met": tput >= 0.7,
                "ratio": round(tput, 3),
            }
        )
    soak = (fn_ins or {}).get("soak")
    if fn_ins and soak:
        samples = soak.get("rss_samples") or []
        peak = soak["rss_kib_peak"] / MIB
        growth = None
        if len(samples) >= 3:
            # After the first 10% of calls (warm-up: caches, allocator arenas) to the end.
            total = samples[-1][0]
            base = next(rss for done, rss in samples if done >= total * 0.1)
            growth = (samples[-1][1] - base) / MIB
        rows.append(
            {
                "target": "server RSS < 60 MiB, no growth over the main run",
                "measured": (
                    f"fresh server: start {soak.get('rss_kib_start', 0) / MIB:.1f} MiB; after "
                    f"{soak['calls']:,} calls at c=8 {soak['rss_kib_end'] / MIB:.1f} MiB, peak "
                    f"{peak:.1f} MiB, growth after the first 10% {growth:+.1f} MiB. (The "
                    f"server of the other loads, incl. c=64 and 300-resource requests: peak "
                    f"{fn_ins['rss_kib_peak'] / MIB:.1f} MiB, end "
                    f"{fn_ins['rss_kib_end'] / MIB:.1f} MiB)"
                    if growth is not None
                    else f"peak {peak:.1f} MiB"
                ),
                "met": peak < 60 and (growth is None or growth <= 1.0),
            }
        )
    cs = results.get("coldstart")
    if cs:
        rows.append(
            {
                "target": "cold start (exec to first answer) < 500 ms",
                "measured": f"{cs['function']['answered_ms_median']:.0f} ms (no-op "
                f"{cs['noop']['answered_ms_median']:.0f} ms), median of "
                f"{cs['function']['repeats']}",
                "met": cs["function"]["answered_ms_median"] < 500,
            }
        )
    if fn_ins and echo_ins and "by_resources" in fn_ins:
        series = "1-plugin"
        fs = fn_ins["by_resources"][series]["slope_server_cpu_us_per_resource"]
        es = echo_ins["by_resources"][series]["slope_server_cpu_us_per_resource"]
        rows.append(
            {
                "target": "per-resource slope within 2x echo (server CPU, observed 2..300)",
                "measured": f"{fs:.1f} us vs echo {es:.1f} us per resource = {fs / es:.2f}x"
                if es
                else f"{fs:.1f} us",
                "met": es > 0 and fs <= 2 * es,
            }
        )
    return rows


def serving(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issues 14 and 15: metrics on and a connection age against the plain server, same rounds."""
    lb = results.get("loopback", {})
    rows: list[dict[str, Any]] = []
    for mode in ("insecure", "mtls"):
        plain = lb.get(f"function/{mode}")
        if not plain or "8" not in plain.get("full", {}):
            continue
        base = plain["full"]["8"]
        for kind, limit, what in (
            ("function-metrics", 1.03, "metrics on"),
            ("function-age", 1.05, f"connection age {AGE_S}s"),
        ):
            other = lb.get(f"{kind}/{mode}", {}).get("full", {}).get("8")
            if not other:
                continue
            cpu = statistics.median(_round_ratios(other, base, "server_cpu_ms_per_call"))
            p99 = other["p99_ms"] / base["p99_ms"] if base["p99_ms"] else 0.0
            rows.append(
                {
                    "target": f"{what} ({mode}, c=8): server CPU per call within "
                    f"{limit - 1:.0%} of the plain server's",
                    "measured": f"{other['server_cpu_ms_per_call']:.3f} vs "
                    f"{base['server_cpu_ms_per_call']:.3f} ms: {cpu - 1:+.1%} (median of "
                    f"{len(base['server_cpu_ms_per_call_rounds'])} side-by-side rounds); p99 "
                    f"{other['p99_ms']:.2f} vs {base['p99_ms']:.2f} ms ({p99 - 1:+.1%}); errors "
                    f"{sum(other['errors'].values())}",
                    "met": cpu <= limit and not other["errors"],
                    "ratio": round(cpu, 4),
                    "p99_ratio": round(p99, 4),
                }
            )
            on = lb[f"{kind}/{mode}"]
            if kind == "function-metrics" and "first" in plain and "first" in on:
                rss, rss_m = plain["first"]["rss_kib_end"], on["first"]["rss_kib_end"]
                rows.append(
                    {
                        "target": f"metrics on ({mode}): RSS within 3% of the plain server's "
                        "after the same loads",
                        "measured": f"{rss_m / MIB:.1f} vs {rss / MIB:.1f} MiB "
                        f"({rss_m / rss - 1:+.1%})",
                        "met": rss_m <= rss * 1.03,
                        "ratio": round(rss_m / rss, 4),
                    }
                )
    cs = results.get("coldstart", {})
    if "function-metrics" in cs and "function" in cs:
        on, off = cs["function-metrics"], cs["function"]
        rows.append(
            {
                "target": "metrics on: cold start (exec to first answer) < 500 ms",
                "measured": f"{on['answered_ms_median']:.0f} ms vs "
                f"{off['answered_ms_median']:.0f} ms off",
                "met": on["answered_ms_median"] < 500,
            }
        )
    return rows


# --- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny counts: checks the harness only")
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    p.add_argument("--main-calls", type=int, default=100_000, help="function/insecure at c=8")
    p.add_argument("--calls", type=int, default=4_000, help="every other loopback config")
    p.add_argument("--scale-calls", type=int, default=1_200, help="each loopback scaling point")
    p.add_argument("--iterations", type=int, default=1_000, help="in-process samples")
    p.add_argument("--warmup", type=int, default=20, help="calls before measuring (loopback: 50)")
    p.add_argument("--coldstart-repeats", type=int, default=7)
    p.add_argument(
        "--kinds",
        default="function,noop,echo,function-metrics,function-age",
        help="loopback servers",
    )
    p.add_argument("--modes", default="insecure,mtls", help="loopback modes")
    p.add_argument("--max-seconds", type=float, default=900.0, help="cap on each load loop")
    p.add_argument("--rounds", type=int, default=5, help="side-by-side rounds per loopback figure")
    p.add_argument("--label", default="", help="what this run measures (stored in the results)")
    p.add_argument(
        "--baseline",
        type=Path,
        default=BASELINE,
        help="an earlier results file to compare with in the Markdown (if it exists)",
    )
    p.add_argument("--json", type=Path, default=RESULTS)
    p.add_argument("--markdown", type=Path, default=MARKDOWN)
    args = p.parse_args(argv)
    if args.quick:
        args.main_calls = min(args.main_calls, 40)
        args.calls = min(args.calls, 20)
        args.scale_calls = min(args.scale_calls, 10)
        args.iterations = min(args.iterations, 5)
        args.coldstart_repeats = min(args.coldstart_repeats, 1)
        args.warmup = min(args.warmup, 1)
        args.rounds = min(args.rounds, 2)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the selected sections; write JSON and Markdown; return the results."""
    args = parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        msg = f"unknown sections {sorted(unknown)}; choose from {SECTIONS}"
        raise SystemExit(msg)
    inprocess.configure_logging()
    t0 = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "settings": vars(args).copy()}
    results["settings"]["json"] = str(args.json)
    results["settings"]["markdown"] = str(args.markdown)
    results["settings"]["baseline"] = str(args.baseline)
    results["label"] = args.label
    log("building requests (playing the example to convergence)")
    wl = workload.build()
    workload.check_realism(workload.converge(workload.xr_with_plugins(5)))
    results["workload"] = describe(wl)
    with tempfile.TemporaryDirectory(prefix="bench-") as d:
        tmp = Path(d)
        if "inprocess" in sections:
            log("in-process latency")
            results["inprocess"] = run_inprocess(
                wl,
                iterations=args.iterations,
                cold_iterations=max(1, args.iterations // 4),
                warmup=args.warmup,
            )
        if "scaling" in sections:
            log("in-process scaling")
            results["scaling"] = run_scaling(
                wl, iterations=max(1, args.iterations // 5), warmup=max(1, args.warmup // 4)
            )
        if "coldstart" in sections:
            log("cold start")
            results["coldstart"] = run_coldstart(wl, repeats=args.coldstart_repeats, tmp=tmp)
        if "loopback" in sections:
            results["loopback"] = run_loopback(
                wl,
                tmp=tmp,
                calls=args.calls,
                main_calls=args.main_calls,
                scale_calls=args.scale_calls,
                kinds=tuple(k for k in args.kinds.split(",") if k),
                modes=tuple(m for m in args.modes.split(",") if m),
                max_seconds=args.max_seconds,
                warmup=50 if args.warmup >= 20 else args.warmup,
                rounds=args.rounds,
            )
    results["machine"]["loadavg_at_end"] = loadavg()
    results["fleet"] = fleet(results)
    results["targets"] = targets(results) + serving(results)
    results["duration_s"] = round(time.perf_counter() - t0, 1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    baseline = None
    if args.baseline.exists() and args.baseline.resolve() != args.json.resolve():
        baseline = json.loads(args.baseline.read_text())
    args.markdown.write_text(report.markdown(results, baseline))
    log(f"done in {results['duration_s']} s: {args.json}, {args.markdown}")
    for row in results["targets"]:
        log(f"{'MET ' if row['met'] else 'MISS'} {row['target']}: {row['measured']}")
    return results


if __name__ == "__main__":
    main()
