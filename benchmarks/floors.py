"""The floors: functions on the same SDK that do (almost) nothing.

- ``noop``: ``response.to(req)``, the least any SDK function does;
- ``echo``: also copies every observed composed resource into desired with
  protobuf ``CopyFrom``: the cost of moving the same bytes the function moves.
"""

from __future__ import annotations

import grpc
from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1


def noop(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """The no-op function."""
    return response.to(req)


def echo(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Observed composed resources, copied into desired."""
    rsp = response.to(req)
    for name, r in req.observed.resources.items():
        rsp.desired.resources[name].resource.CopyFrom(r.resource)
    return rsp


RUNNERS = {"noop": noop, "echo": echo}


class FloorRunner(grpcv1.FunctionRunnerServiceServicer):
    """A gRPC servicer around one of the floors."""

    def __init__(self, kind: str) -> None:
        self.run = RUNNERS[kind]

    async def RunFunction(  # the gRPC method name
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        """Answer one request."""
        return self.run(req)
