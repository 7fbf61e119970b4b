"""Make a benchmark server see only what the image installs.

Servers run from the dev venv, which also holds packages the image leaves out.
One of them is imported anyway: structlog (the SDK's logger) imports ``rich``
when it is installed, ~10 MiB of RSS and start-up time that no deployed server
pays. ``loopback.Server`` puts this directory on PYTHONPATH of every server it
starts (the function and its floors alike), so these imports fail as they
would in the image. ``cryptography`` is hidden too: the function must not need
it at run time (issue 5), and if it did, its answers would change and the
harness, which checks every answer's length, would say so. BENCH_NOT_SHIPPED
(comma-separated) overrides the list, e.g. ``rich`` alone to measure code from
before issue 5, whose image still shipped cryptography.
"""

import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

NOT_SHIPPED = tuple(os.environ.get("BENCH_NOT_SHIPPED", "rich,cryptography").split(","))


class _NotShipped(MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,  # noqa: ARG002
        target: ModuleType | None = None,  # noqa: ARG002
    ) -> ModuleSpec | None:
        if fullname.split(".", maxsplit=1)[0] in NOT_SHIPPED:
            msg = f"{fullname} is not installed in the image"
            raise ImportError(msg)
        return None


sys.meta_path.insert(0, _NotShipped())
