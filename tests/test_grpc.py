"""The real `serve` over loopback gRPC answers exactly what the in-process runner does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1

from function import fn
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import example


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "function_tools.cli",
            "serve",
            "--insecure",
            "--address",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=20)
        yield channel
    finally:
        channel.close()
        proc.terminate()
        proc.wait(timeout=15)


def test_serve_matches_in_process(server: grpc.Channel) -> None:
    xr, required = example("selfhosted-full")
    world = InMemoryCrossplane(xr, required)
    world.run(6)
    req = world.request()
    world._fill(req, fn.run(req))
    stub = grpcv1.FunctionRunnerServiceStub(server)
    got = stub.RunFunction(req, timeout=10)
    assert got == fn.run(req)
    assert len(got.desired.resources) > 5


def test_serve_answers_the_v1beta1_service(server: grpc.Channel) -> None:
    xr, _ = example("external-eks")
    req = fnv1beta1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    got = grpcv1beta1.FunctionRunnerServiceStub(server).RunFunction(req, timeout=10)
    assert "helm-provider-config" in got.desired.resources


def test_serve_answers_bad_input_with_fatal_not_an_error(server: grpc.Channel) -> None:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(
        {
            "apiVersion": "clusterplugin.dev/v1alpha1",
            "kind": "ClusterPlugin",
            "metadata": {"name": "x", "namespace": "a"},
            "spec": {},
        }
    )
    t = time.monotonic()
    got = grpcv1.FunctionRunnerServiceStub(server).RunFunction(req, timeout=10)
    assert time.monotonic() - t < 5
    assert [r.severity for r in got.results] == [fnv1.SEVERITY_FATAL]
