"""Loopback gRPC: servers as subprocesses on 127.0.0.1, a bounded async load generator.

The load generator sends pre-serialized request bytes and does not parse the
responses (it checks their length against the in-process answer), so its own
CPU use stays small; it still shares the machine's cores with the server, so
server CPU per request (all threads: /proc/<pid>/task/*/schedstat, or
/proc/<pid>/stat when a thread came or went) is reported next to throughput.
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from benchmarks.inprocess import pct

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
BENCH_DIR = Path(__file__).resolve().parent
AS_SHIPPED = BENCH_DIR / "as_shipped"


def server_env() -> dict[str, str]:
    """The environment of every server: packages the image does not install hidden."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(AS_SHIPPED), env.get("PYTHONPATH")) if p)
    return env


TICK = os.sysconf("SC_CLK_TCK")
MAX_MESSAGE = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
]


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def function_command() -> list[str]:
    """``function-cluster-plugin serve``: the installed console script of this venv."""
    script = Path(sys.executable).parent / "function-cluster-plugin"
    if script.exists():
        return [str(script), "serve"]
    return [sys.executable, "-m", "function_tools.cli", "serve"]


def floor_command(kind: str) -> list[str]:
    """The floor server of ``kind`` (noop or echo)."""
    return [sys.executable, str(BENCH_DIR / "floor_server.py"), "--kind", kind]


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid`` (clock ticks: 10 ms resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def threads_cpu_ns(pid: int) -> dict[str, int]:
    """Nanoseconds on CPU of each live thread of ``pid`` (/proc/<pid>/task/*/schedstat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


class CpuMeter:
    """Server CPU over a load: per-thread schedstat (ns) when no thread came or went,
    else /proc/<pid>/stat (which keeps the time of threads that exited)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.threads = threads_cpu_ns(pid)
        self.ticks = proc_cpu_seconds(pid)

    def seconds(self) -> float:
        """CPU seconds since construction."""
        threads = threads_cpu_ns(self.pid)
        ticks = proc_cpu_seconds(self.pid) - self.ticks
        if threads.keys() == self.threads.keys():
            return sum(threads[t] - self.threads[t] for t in threads) / 1e9
        return ticks


def proc_memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid``, KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in {"VmRSS", "VmHWM"}:
                out[key] = int(value.split()[0])
    return out


@dataclass
class Server:
    """A function server on a loopback port, insecure or mTLS."""

    name: str
    argv: list[str]
    log_path: Path
    # More flags; "{free_port}" in one becomes a free loopback port at each spawn.
    extra: list[str] = field(default_factory=list)
    tls_server_dir: Path | None = None
    tls_client_dir: Path | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    listening_s: float = 0.0
    memory_at_start: dict[str, int] = field(default_factory=dict)
    resolved: list[str] = field(default_factory=list)  # ``extra`` as last spawned

    @property
    def target(self) -> str:
        """host:port."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server's pid."""
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        """The full command line."""
        argv = [*self.argv, *self.resolved, "--address", self.target]
        if self.tls_server_dir is None:
            return [*argv, "--insecure"]
        return [*argv, "--tls-server-certs-dir", str(self.tls_server_dir)]

    def spawn(self) -> subprocess.Popen[bytes]:
        """Exec the server on a free port (as shipped: see ``server_env``); do not wait."""
        self.port = free_port()
        self.resolved = [a.replace("{free_port}", str(free_port())) for a in self.extra]
        with self.log_path.open("ab") as log:
            self.started_at = time.perf_counter()
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_env(),
            )
        return self.proc

    def start(self, *, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections."""
        self.spawn()
        self.listening_s = wait_listening(self.port, self.proc, timeout=timeout)
        self.memory_at_start = proc_memory_kib(self.pid)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Client mTLS credentials, or None when insecure."""
        if self.tls_client_dir is None:
            return None
        d = self.tls_client_dir
        return grpc.ssl_channel_credentials(
            root_certificates=(d / "ca.crt").read_bytes(),
            private_key=(d / "tls.key").read_bytes(),
            certificate_chain=(d / "tls.crt").read_bytes(),
        )

    def stop(self) -> int | None:
        """SIGTERM (the SDK stops gracefully), then SIGKILL if it lingers."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


    def scrape(self) -> str:
        """Its /metrics page (with --metrics-address), or "" without."""
        if "--metrics-address" not in self.resolved:
            return ""
        address = self.resolved[self.resolved.index("--metrics-address") + 1]
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
            return r.read().decode()


def wait_listening(port: int, proc: subprocess.Popen[bytes], *, timeout: float) -> float:
    """Seconds until ``port`` accepts a TCP connection (polled every millisecond)."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            msg = f"server exited with {proc.returncode} before listening"
            raise RuntimeError(msg)
        with socket.socket() as s:
            s.settimeout(0.05)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                time.sleep(0.001)
                continue
        return time.perf_counter() - t0
    msg = f"server did not listen on {port} within {timeout}s"
    raise RuntimeError(msg)


def channel(server: Server) -> grpc.aio.Channel:
    """An aio channel to ``server`` (one HTTP/2 connection, as Crossplane keeps)."""
    creds = server.credentials()
    if creds is None:
        return grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(
        server.target,
        creds,
        options=[*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", "localhost")],
    )


async def _load(
    server: Server,
    request: bytes,
    *,
    expected_len: int,
    concurrency: int,
    calls: int,
    warmup: int,
    call_timeout: float,
    max_seconds: float,
    rss_every: float,
    keep_latencies: bool,
) -> dict[str, Any]:
    ch = channel(server)
    try:
        await asyncio.wait_for(ch.channel_ready(), timeout=20)
        rpc = ch.unary_unary(METHOD)  # bytes in, bytes out
        for _ in range(warmup):
            await rpc(request, timeout=call_timeout)

        latencies: list[float] = []
        errors: collections.Counter[str] = collections.Counter()
        issued = 0
        done = 0
        deadline = time.perf_counter() + max_seconds
        rss_samples: list[tuple[int, int]] = []

        async def worker() -> None:
            nonlocal issued, done
            while issued < calls and time.perf_counter() < deadline:
                issued += 1
                t = time.perf_counter()
                try:
                    out = await rpc(request, timeout=call_timeout)
                except grpc.aio.AioRpcError as err:
                    errors[err.code().name] += 1
                    continue
                finally:
                    done += 1
                latencies.append(time.perf_counter() - t)
                if len(out) != expected_len:
                    errors["WRONG_RESPONSE"] += 1

        async def sampler() -> None:
            while True:
                rss_samples.append((done, proc_memory_kib(server.pid)["VmRSS"]))
                await asyncio.sleep(rss_every)

        meter = CpuMeter(server.pid)
        client0 = time.process_time()
        t0 = time.perf_counter()
        sample_task = asyncio.create_task(sampler())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        sample_task.cancel()
        server_cpu = meter.seconds()
        client_cpu = time.process_time() - client0
    finally:
        await ch.close()

    mem = proc_memory_kib(server.pid)
    rss_samples.append((done, mem["VmRSS"]))
    ok = len(latencies)
    extra: dict[str, Any] = {"latencies": latencies} if keep_latencies else {}
    return {
        **extra,
        "server_cpu_s": server_cpu,
        "client_cpu_s": client_cpu,
        "concurrency": concurrency,
        "calls": done,
        "ok": ok,
        "errors": dict(errors),
        "wall_s": round(wall, 3),
        "throughput_rps": round(done / wall, 1) if wall else 0.0,
        "p50_ms": round(pct(latencies, 0.5) * 1e3, 3) if latencies else None,
        "p99_ms": round(pct(latencies, 0.99) * 1e3, 3) if latencies else None,
        "server_cpu_ms_per_call": round(server_cpu / done * 1e3, 3) if done else None,
        "server_cpu_cores": round(server_cpu / wall, 3) if wall else None,
        "client_cpu_ms_per_call": round(client_cpu / done * 1e3, 3) if done else None,
        "rss_kib_end": mem["VmRSS"],
        "rss_kib_peak": mem["VmHWM"],
        "rss_samples": _thin(rss_samples, 40),
        "stopped_by_time_limit": done < calls,
    }


def _thin(samples: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    if len(samples) <= n:
        return samples
    step = (len(samples) - 1) / (n - 1)
    return [samples[round(i * step)] for i in range(n)]


def load(
    server: Server,
    request: bytes,
    *,
    expected_len: int,
    concurrency: int,
    calls: int,
    warmup: int = 50,
    timeout: float = 30.0,
    max_seconds: float = 900.0,
    rss_every: float = 1.0,
    keep_latencies: bool = False,
) -> dict[str, Any]:
    """``calls`` RunFunction calls with ``concurrency`` in flight (bounded by ``max_seconds``)."""
    return asyncio.run(
        _load(
            server,
            request,
            expected_len=expected_len,
            concurrency=concurrency,
            calls=calls,
            warmup=warmup,
            call_timeout=timeout,
            max_seconds=max_seconds,
            rss_every=rss_every,
            keep_latencies=keep_latencies,
        )
    )


def first_call(server: Server, request: bytes, *, timeout: float = 30.0) -> bytes:
    """One blocking call (readiness check, cold start)."""
    creds = server.credentials()
    if creds is None:
        ch = grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS)
    else:
        ch = grpc.secure_channel(
            server.target,
            creds,
            options=[*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", "localhost")],
        )
    with ch:
        rpc = ch.unary_unary(METHOD)
        return rpc(request, timeout=timeout, wait_for_ready=True)


async def _reconnects(server: Server, request: bytes, n: int) -> dict[str, float]:
    on_one: list[float] = []
    meter = CpuMeter(server.pid)
    ch = channel(server)
    async with ch:
        rpc = ch.unary_unary(METHOD)
        await rpc(request, timeout=30)
        meter = CpuMeter(server.pid)
        t0 = time.perf_counter()
        for _ in range(n):
            await rpc(request, timeout=30)
        on_one.append(time.perf_counter() - t0)
        call_cpu = meter.seconds()
    meter = CpuMeter(server.pid)
    t0 = time.perf_counter()
    for _ in range(n):
        async with channel(server) as fresh:
            await fresh.unary_unary(METHOD)(request, timeout=30)
    wall = time.perf_counter() - t0
    conn_cpu = meter.seconds()
    return {
        "connections": n,
        "server_cpu_ms_per_call": round(call_cpu / n * 1e3, 3),
        "server_cpu_ms_per_connection_and_call": round(conn_cpu / n * 1e3, 3),
        "server_cpu_ms_per_reconnect": round((conn_cpu - call_cpu) / n * 1e3, 3),
        "wall_ms_per_call": round(on_one[0] / n * 1e3, 3),
        "wall_ms_per_reconnect": round((wall - on_one[0]) / n * 1e3, 3),
    }


def reconnect_cost(server: Server, request: bytes, n: int) -> dict[str, float]:
    """What a new connection costs: ``n`` calls on one channel vs ``n`` on a fresh channel each."""
    return asyncio.run(_reconnects(server, request, n))


def cold_start(
    argv: list[str], request: bytes, log_path: Path, extra: list[str] | None = None
) -> dict[str, float]:
    """Seconds from exec until listening, and until the first RunFunction is answered."""
    server = Server("cold", argv, log_path, extra=extra or [])
    try:
        proc = server.spawn()
        t0 = server.started_at
        listening = wait_listening(server.port, proc, timeout=30)
        first_call(server, request)
        answered = time.perf_counter() - t0
        rss = proc_memory_kib(server.pid)["VmRSS"]
    finally:
        server.stop()
    return {"listening_s": listening, "answered_s": answered, "rss_kib": rss}
