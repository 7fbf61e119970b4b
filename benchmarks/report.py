"""BENCHMARKS.md from the results of one run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPTIMISATIONS = Path(__file__).resolve().parent / "OPTIMISATIONS.md"
MIB = 1024


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f}"


def _fleet(results: dict[str, Any]) -> list[str]:
    """What ten thousand XRs cost, from the measured per-reconcile server CPU."""
    rows = results.get("fleet")
    if not rows:
        return []
    intervals = [k for k in rows[0] if k not in {"server", "cpu_ms_per_reconcile"}]
    n = results["workload"]["reconcile_iterations"]
    return [
        "## What ten thousand ClusterPlugins cost",
        "",
        (
            f"One reconcile of the converged example is {n} calls (Crossplane's required-resources"
            " loop: nothing required yet, then the Cluster and Secret, then the control plane and "
            "infrastructure). Server CPU per call of each, measured on loopback (insecure, "
            "concurrency 8), summed per reconcile; times 10,000 XRs per reconcile interval. "
            "'per-XR caches cold' adds what the function pays when its per-XR caches (spec, "
            "JWKS and discovery document, CAPA's security groups, trust and bucket policies) "
            "miss, as they do once there are more XRs than entries (in-process cold minus warm)."
        ),
        "",
        _table(
            ["server", "CPU ms per reconcile", *(f"10k XRs, every {k}" for k in intervals)],
            [
                [
                    r["server"],
                    f"{r['cpu_ms_per_reconcile']:.2f}",
                    *(f"{r[k]:.0%} of a core" for k in intervals),
                ]
                for r in rows
            ],
        ),
        "",
    ]


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


_FN8 = ("loopback", "function/insecure", "full", "8")
_FN1 = ("loopback", "function/insecure", "full", "1")
# (label, path into the results, unit)
_COMPARED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("in-process CPU, full request", ("inprocess", "full", "function", "cpu_us_per_call"), "us"),
    (
        "in-process CPU, full request, per-XR caches cold",
        ("inprocess", "full", "function_cold", "cpu_us_per_call"),
        "us",
    ),
    ("in-process CPU, first request", ("inprocess", "first", "function", "cpu_us_per_call"), "us"),
    (
        "in-process CPU, one reconcile",
        ("inprocess", "reconcile", "function", "cpu_us_per_call"),
        "us",
    ),
    (
        "in-process CPU, one reconcile, cold",
        ("inprocess", "reconcile", "function_cold", "cpu_us_per_call"),
        "us",
    ),
    ("loopback server CPU per call, c=8", (*_FN8, "server_cpu_ms_per_call"), "ms"),
    ("loopback calls/s, c=8", (*_FN8, "throughput_rps"), "/s"),
    ("loopback p50, c=1", (*_FN1, "p50_ms"), "ms"),
    ("loopback p99, c=1", (*_FN1, "p99_ms"), "ms"),
    (
        "echo floor server CPU per call, c=8",
        ("loopback", "echo/insecure", "full", "8", "server_cpu_ms_per_call"),
        "ms",
    ),
    (
        "server RSS after the soak",
        ("loopback", "function/insecure", "soak", "rss_kib_end"),
        "KiB",
    ),
    ("server RSS at start", ("loopback", "function/insecure", "rss_kib_start"), "KiB"),
    ("cold start, median", ("coldstart", "function", "answered_ms_median"), "ms"),
)


def _comparison(results: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    rows = []
    for label, path, unit in _COMPARED:
        before, after = _get(baseline, *path), _get(results, *path)
        if before is None or after is None:
            continue
        change = f"{(after - before) / before:+.0%}" if before else ""
        shown = "MiB" if unit == "KiB" else unit
        scale = 1 / MIB if unit == "KiB" else 1
        rows.append(
            [label, f"{before * scale:,.4g} {shown}", f"{after * scale:,.4g} {shown}", change]
        )
    if not rows:
        return []
    bm = baseline["machine"]
    return [
        "## Before and after the optimisations",
        "",
        (
            f"Before: {baseline.get('label') or 'an earlier run'}; {bm['date']}, load "
            f"{bm.get('loadavg_at_start', '?')}. After: this run. Same harness, same machine; "
            "the echo row shows how much the machine itself moved between the runs."
        ),
        "",
        _table(["measure", "before", "after", "change"], rows),
        "",
    ]


def markdown(results: dict[str, Any], baseline: dict[str, Any] | None = None) -> str:
    """The whole report."""
    m = results["machine"]
    s = results["settings"]
    w = results["workload"]
    parts = [
        "# Benchmarks",
        "",
        (
            "Generated by `make bench` (`.venv/bin/python -m benchmarks`, ~8 minutes; see "
            "`benchmarks/run.py`; raw figures in `benchmarks/results/latest.json`). Do not edit "
            "by hand: re-run. `python -m benchmarks --quick` checks the harness in seconds "
            "(`tests/test_bench_smoke.py` does in the test suite); `--sections`, `--modes`, "
            "`--kinds`, `--calls`, `--main-calls` narrow a run. Profile with "
            "`.venv/bin/py-spy record -f raw -- .venv/bin/python -m benchmarks --sections "
            "inprocess` or pyinstrument (both from PyPI, not dependencies)."
        ),
        "",
        _table(
            ["date", "CPU", "cores", "Python", "grpcio", "protobuf", "SDK", "commit"],
            [
                [
                    m["date"],
                    m["cpu"],
                    m["cores"],
                    m["python"],
                    m["grpcio"],
                    f"{m['protobuf']} ({m['protobuf_backend']})",
                    m["sdk"],
                    m["commit"],
                ]
            ],
        ),
        "",
        (
            f"Load average at start {m.get('loadavg_at_start', '?')}, at end "
            f"{m.get('loadavg_at_end', '?')} (other work on the machine skews every figure)."
        ),
        "",
    ]
    if results.get("targets"):
        parts += [
            "## Targets (issues 5, 14, 15), against servers measured in the same run",
            "",
            _table(
                ["target", "measured", "met"],
                [
                    [r["target"], r["measured"], "yes" if r["met"] else "**no**"]
                    for r in results["targets"]
                ],
            ),
            "",
        ]
    if baseline:
        parts += _comparison(results, baseline)
    parts += [
        "## Workload",
        "",
        (
            "`examples/selfhosted-full` (5 plugins, SelfHosted IRSA) played to convergence by "
            "`function_tools.in_memory_crossplane.InMemoryCrossplane`, then one reconcile's "
            "requests through the "
            "required-resources loop. Observed objects are made realistic in size "
            "(`benchmarks/workload.py`: metadata with uid/resourceVersion/ownerReferences/"
            "finalizers, upjet's atProvider echoing forProvider plus id/arn/tagsAll, conditions "
            "with lastTransitionTime; the XR carries "
            "`spec.crossplane.resourceRefs`); the run checks that this changes nothing in the "
            "function's answer. Floors: `noop` returns `response.to(req)`; `echo` also copies "
            "every observed resource into desired with `CopyFrom`."
        ),
        "",
        (
            f"- final request: {w['full_request_bytes']:,} bytes, "
            f"{w['full_observed_resources']} observed composed resources "
            f"(mean {w['full_observed_bytes_mean']:,} bytes), {w['full_required_resources']} "
            f"required resources; response {w['full_response_bytes']:,} bytes"
        ),
        f"- one reconcile: {w['reconcile_iterations']} calls of "
        + ", ".join(f"{b:,}" for b in w["reconcile_request_bytes"])
        + " bytes",
        f"- first (empty) reconcile request: {w['first_request_bytes']:,} bytes",
        "",
    ]
    ip = results.get("inprocess")
    if ip:
        rows = []
        for case, per in ip.items():
            for name, r in per.items():
                rows.append(
                    [
                        case,
                        name,
                        r["iterations"],
                        _ms(r["p50_us"]),
                        _ms(r["p99_us"]),
                        _ms(r["cpu_us_per_call"]),
                    ]
                )
        parts += [
            "## In-process RunFunction",
            "",
            (
                "Through each servicer's `RunFunction` (logging configured as `serve` does). "
                "`reconcile` = the calls of one reconcile together. `function_cold` clears the "
                "function's per-XR caches (spec, JWKS and discovery document, CAPA's security "
                "groups, trust and bucket policies; not the step "
                "input's or the partition's, which every XR shares) before every sample."
            ),
            "",
            _table(["request", "runner", "samples", "p50 ms", "p99 ms", "CPU ms/sample"], rows),
            "",
        ]
    lb = results.get("loopback")
    if lb:
        rows = []
        for key, r in lb.items():
            for c, x in r["full"].items():
                rows.append(_lb_row(key, f"full c={c}", x))
            if "first" in r:
                rows.append(_lb_row(key, "first c=8", r["first"]))
            for i, x in r.get("reconcile", {}).items():
                rows.append(_lb_row(key, f"reconcile call {i} c=8", x))
            if "soak" in r:
                rows.append(_lb_row(key, "full c=8, soak", r["soak"]))
        parts += [
            "## Loopback gRPC",
            "",
            (
                f"Real servers as child processes on 127.0.0.1 (`function-cluster-plugin serve`, "
                f"`benchmarks/floor_server.py` on the same serve loop; `function-metrics` is the "
                f"function with `--metrics-address` and a scrape each round, `function-age` with "
                f"`--max-connection-age 3s`, each in the loads listed for it), insecure and mTLS "
                f"(throw-away CA, RSA 2048), one HTTP/2 connection per load, as Crossplane keeps. "
                f"The servers of a mode run side by side; each figure is {s['rounds']} rounds, "
                f"each giving every server the same calls in turn ({s['calls']:,} calls in all per "
                f"figure; scaling points {s['scale_calls']:,}); server CPU per call is given with "
                f"its range over the rounds, and target ratios are medians of per-round ratios, so "
                f"other work on the machine weighs on function and floors alike. Then the soak: "
                f"{s['main_calls']:,} calls to a fresh function server (insecure, concurrency 8) "
                f"for RSS over time from its start (100k for every configuration would take hours "
                f"on {m['cores']} cores). The "
                f"load generator (one asyncio process, pre-serialized requests, answers checked by "
                f"length against the in-process answer) shares the cores with the servers: read "
                f"server CPU per call next to throughput."
            ),
            "",
            _table(
                [
                    "server",
                    "load",
                    "calls",
                    "calls/s",
                    "p50 ms",
                    "p99 ms",
                    "server CPU ms/call",
                    "client CPU ms/call",
                    "errors",
                    "RSS end MiB",
                ],
                rows,
            ),
            "",
            _table(
                ["server", "RSS at start MiB", "peak MiB", "end MiB", "listening after ms"],
                [
                    [
                        key,
                        f"{r['rss_kib_start'] / MIB:.1f}",
                        f"{r.get('rss_kib_peak', 0) / MIB:.1f}",
                        f"{r.get('rss_kib_end', 0) / MIB:.1f}",
                        r["listening_ms"],
                    ]
                    for key, r in lb.items()
                ],
            ),
            "",
        ]
    recon = [(key, r["reconnect"]) for key, r in (lb or {}).items() if "reconnect" in r]
    if recon:
        parts += [
            "### What a new connection costs",
            "",
            (
                "The empty first request, one at a time: on one connection, then each on a "
                "connection of its own (dial, HTTP/2 and for mTLS the TLS handshake, the call, "
                "close). The difference is what a reconnect after a GOAWAY costs the server; "
                "with `--max-connection-age 5m` each client connection pays it once per ~5 "
                "minutes."
            ),
            "",
            _table(
                [
                    "server",
                    "connections",
                    "server CPU ms/call",
                    "server CPU ms/reconnect",
                    "wall ms/call",
                    "wall ms/reconnect",
                ],
                [
                    [
                        key,
                        x["connections"],
                        x["server_cpu_ms_per_call"],
                        x["server_cpu_ms_per_reconnect"],
                        x["wall_ms_per_call"],
                        x["wall_ms_per_reconnect"],
                    ]
                    for key, x in recon
                ],
            ),
            "",
        ]
    cs = results.get("coldstart")
    if cs:
        parts += [
            "## Cold start",
            "",
            (
                "Process exec until the first RunFunction (the empty first request) is answered, "
                "polling the port every millisecond."
            ),
            "",
            _table(
                ["server", "runs", "median ms", "min ms", "max ms", "listening ms", "RSS MiB"],
                [
                    [
                        k,
                        v["repeats"],
                        v["answered_ms_median"],
                        v["answered_ms_min"],
                        v["answered_ms_max"],
                        v["listening_ms_median"],
                        f"{v['rss_kib_after_first_call'] / MIB:.1f}",
                    ]
                    for k, v in cs.items()
                ],
            ),
            "",
        ]
    sc = results.get("scaling")
    if sc or (lb and any("by_resources" in r for r in lb.values())):
        parts += ["## How cost grows", ""]
    if sc:
        for series, per in sc["by_resources"].items():
            counts = [k for k in next(iter(per.values())) if k.isdigit()]
            parts += [
                (
                    f"In-process CPU per call (ms) against observed resources, series `{series}` "
                    "(the configuration's own resources, padded with ~3 KB resources under names "
                    "the function does not know: ignored, but still parsed):"
                ),
                "",
                _table(
                    ["runner", *counts, "slope us/resource"],
                    [
                        [
                            name,
                            *(_ms(pts[c]["cpu_us_per_call"]) for c in counts),
                            pts["slope_cpu_us_per_resource"],
                        ]
                        for name, pts in per.items()
                    ],
                ),
                "",
            ]
        per = sc["by_plugins"]
        keys = [k for k in next(iter(per.values())) if k.isdigit()]
        parts += [
            (
                "In-process CPU per call (ms) against plugins (status.plugins[] entries: 1 = "
                "vpc-cni without IRSA, 2 = + SelfHosted issuer, 3..5 = + EBS, EFS, load balancer "
                "controller); observed resources in brackets; slope per real composed resource:"
            ),
            "",
            _table(
                ["runner", *(f"{k} ({per['function'][k]['observed']})" for k in keys), "slope"],
                [
                    [
                        name,
                        *(_ms(pts[k]["cpu_us_per_call"]) for k in keys),
                        pts["slope_cpu_us_per_resource"],
                    ]
                    for name, pts in per.items()
                ],
            ),
            "",
        ]
    if lb:
        for series in ("1-plugin", "5-plugins"):
            rows = []
            for key, r in lb.items():
                pts = r.get("by_resources", {}).get(series)
                if not pts:
                    continue
                counts = [k for k in pts if k.isdigit()]
                rows.append(
                    [
                        key,
                        *(f"{pts[c]['server_cpu_ms_per_call']:.3f}" for c in counts),
                        pts["slope_server_cpu_us_per_resource"],
                    ]
                )
            if rows:
                parts += [
                    (
                        f"Loopback server CPU per call (ms) against observed resources, `{series}`,"
                        " concurrency 8:"
                    ),
                    "",
                    _table(["server", *counts, "slope us/resource"], rows),
                    "",
                ]
    parts += _fleet(results)
    if OPTIMISATIONS.exists():
        parts += [OPTIMISATIONS.read_text().rstrip(), ""]
    parts += [f"Run took {results.get('duration_s', 0):.0f} s.", ""]
    return "\n".join(parts)


def _lb_row(key: str, load: str, x: dict[str, Any]) -> list[Any]:
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(x["errors"].items())) or "none"
    cpu = f"{x['server_cpu_ms_per_call']:.3f}"
    per_round = x.get("server_cpu_ms_per_call_rounds")
    if per_round and len(per_round) > 1:
        cpu += f" ({min(per_round):.3f}-{max(per_round):.3f})"
    return [
        key,
        load,
        x["calls"],
        f"{x['throughput_rps']:.0f}",
        x["p50_ms"],
        x["p99_ms"],
        cpu,
        x["client_cpu_ms_per_call"],
        errors,
        f"{x['rss_kib_end'] / MIB:.1f}",
    ]
