# syntax=docker/dockerfile:1
# (The syntax line enables RUN --mount, used below for BuildKit cache and bind mounts.)

# What goes into the image is image.toml's (scripts/build_image.py builds the same
# image without a Docker engine); tests/test_image_definition.py fails when this file
# says otherwise: release, packages, venv, pip options, user, port, entrypoint, labels.

# The one knob for the base-image pair. Both stages read it, so build and runtime
# cannot drift apart: crossplane/function-template-python builds on Debian 13
# (Python 3.13) but runs on distroless debian12 (Python 3.11), and that venv
# cannot import (function-template-python#167). The Python version is not a
# separate choice: it is whatever python3 this Debian release ships
# (13 "trixie" -> 3.13). It has to satisfy requires-python in pyproject.toml;
# tests/test_dockerfile.py checks that.
ARG DEBIAN_RELEASE=13

# No --platform=$BUILDPLATFORM here (unlike the template): this stage installs
# grpcio and pydantic-core, which carry native code, so it must
# run on the target architecture, or an arm64 image gets amd64 .so files.
FROM debian:${DEBIAN_RELEASE}-slim AS build

# Debian's own python3 is the same interpreter the distroless runtime ships.
# python3-venv brings ensurepip (pip for the venv); no compiler and no git are
# needed, because every dependency has a manylinux wheel and the wheel build
# (hatchling) takes the version from function/__version__.py, not from git.
# docker-clean is removed so the apt cache mounts actually keep the downloads.
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install --yes --no-install-recommends python3 python3-venv

# No .pyc files from anything Python runs in this stage; no pip version check
# (nothing to act on in an image build).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The runtime venv. It must live at the same path in both stages: its scripts'
# shebangs (#!/venv/fn/bin/python3) and its bin/python3 symlink to
# /usr/bin/python3 are absolute. /usr/bin/python3 is also the interpreter of the
# distroless image, which is why the Debian releases must match.
# This layer does not depend on the source, so it stays cached across edits.
RUN python3 -m venv /venv/fn

# Build the function's wheel, then install it with its dependencies.
# - The source is bind-mounted (filtered by .dockerignore) rather than copied,
#   so it never becomes a layer. "rw" only lets a build backend write scratch
#   files, which BuildKit discards; hatchling builds from a read-only tree too.
# - pip wheel --no-deps fetches hatchling (the pyproject build backend) into an
#   isolated, throwaway build environment; hatchling never lands in /venv/fn.
# - --only-binary=:all: makes a missing wheel fail the build loudly instead of
#   trying to compile with a compiler that is deliberately not installed.
# - --no-compile: no .pyc in the image (see the clean-up step below).
# - -c constraints.txt: the exact versions CI tested (every runtime dependency
#   has a cp313 / abi3 / pure wheel at those versions).
# - The pip cache mount keeps downloads between builds without adding a layer.
RUN --mount=type=bind,target=/src,rw \
    --mount=type=cache,target=/root/.cache/pip \
    /venv/fn/bin/pip wheel --no-deps --wheel-dir /dist /src \
    && /venv/fn/bin/pip install --no-compile --only-binary=:all: -c /src/constraints.txt /dist/*.whl

# The runtime needs neither pip nor bytecode caches. ensurepip in Python 3.12+
# no longer installs setuptools, so pip is the only installer to remove (the
# setuptools name is kept so a future ensurepip that adds it back is covered;
# pip only warns when it is absent). The find removes any __pycache__ that
# slipped through. Last, a smoke test on the target Python: the console script
# imports the whole function and its "serve" subcommand exists, so a broken
# import fails here rather than in a crash-looping pod.
RUN /venv/fn/bin/python3 -m pip uninstall --yes pip setuptools \
    && find /venv/fn -depth -type d -name __pycache__ -exec rm -rf {} + \
    && /venv/fn/bin/function-cluster-plugin serve --help >/dev/null

# Distroless: no shell, no package manager, no compiler; just Debian's python3.
# The :nonroot tag defaults to the nonroot user (uid 65532).
FROM gcr.io/distroless/python3-debian${DEBIAN_RELEASE}:nonroot AS image
WORKDIR /
COPY --from=build /venv/fn /venv/fn
# The build without Docker also sets version, revision, created and base name.
LABEL org.opencontainers.image.title="function-cluster-plugin" \
      org.opencontainers.image.description="Crossplane composition function: the cloud controller manager, CNI, CSI drivers, load balancer controller and external-dns, staged, with IRSA, for Cluster API clusters on AWS" \
      org.opencontainers.image.licenses="Apache-2.0"
# The SDK's default --address is 0.0.0.0:9443, which Crossplane dials.
EXPOSE 9443
# The numeric form of distroless' nonroot:nonroot. Kubernetes can only verify
# runAsNonRoot against a numeric USER; a user name makes the kubelet refuse to
# start the pod whenever a runtime config sets runAsNonRoot without runAsUser.
USER 65532:65532
ENTRYPOINT ["/venv/fn/bin/function-cluster-plugin", "serve"]
