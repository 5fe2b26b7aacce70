# Local entry points. The README names two: `make ci` and `make test`; both do all set-up.
# The orchestrating side lives in .venv (requirements-dev.lock: no torch, no triton); kernel
# payloads run in per-toolchain environments that `mha-ci` builds from containers/*/requirements.lock.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
MHA_CI  := $(BIN)/mha-ci
OUT     ?= out
STAMP   := $(VENV)/.installed-$(shell cat requirements-dev.lock pyproject.toml | sha256sum | cut -c1-12)
# ld.lld 19 links Triton 3.4's AMD code objects (docs/facts.md: Debian's default lld 14 cannot).
LLD     := /usr/lib/llvm-19/bin/ld.lld
export TRITON_HIP_LLD_PATH ?= $(LLD)
# Toolchain environments, compile caches and image build contexts live in the machine's cache,
# $MHA_CI_CACHE else ~/.cache/mha-ci (mha_ci/cache.py), shared by every clone: a second clone's
# `make ci` reuses what the first one built. `mha-ci cache info/prune` show and trim it.
# pytest-xdist workers for the runner's own tests: in one process they keep one core busy (a test
# waits on one payload or interpreter run at a time), so one worker per core (`auto`) uses all of
# CI's two (docs/ci-timings.md). TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= auto

.PHONY: setup system-deps docker-setup ci ci-all lint test test-fast test-runner test-docker test-cuda-images validate plan checksums perf containers containers-cuda nightly export durations clean

$(STAMP): requirements-dev.lock pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements-dev.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

setup: $(STAMP) system-deps

# System packages the jobs need; installed only when missing (CI machines start bare).
# lld-19 links Triton 3.4's AMD code objects; shellcheck lets actionlint check run: scripts.
system-deps:
	@missing=""; test -x $(LLD) || missing="$$missing lld-19"; \
	  command -v shellcheck >/dev/null || missing="$$missing shellcheck"; \
	  if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

# dockerd, debootstrap and the local Debian base image (containers/ and the docker executor).
docker-setup:
	.ci/docker-setup.sh

validate: $(STAMP)
	$(MHA_CI) validate

plan: $(STAMP)
	$(MHA_CI) plan $(PLAN_ARGS)

# The pull-request pipeline, locally, on the default venv executor, for the changes git shows
# against the default branch (commits since the merge base, staged, unstaged, untracked): a
# docs-only change plans only the docs check (seconds). With nothing to compare against (a clean clone of main,
# not a git checkout) every path counts as changed. CI_ARGS=--all always runs everything.
# Jobs that need a GPU are listed as not run, with the reason.
ci: setup
	$(MHA_CI) run --event pull_request --out $(OUT)/ci $(CI_ARGS)

# `make ci` with every path changed, whatever git shows: the step of `make test`.
ci-all: setup
	$(MHA_CI) run --event pull_request --out $(OUT)/ci --all

# ruff check over src/ and tests/, then mypy over src/mha_ci and src/mha (both configured in pyproject.toml),
# then the generated workflows: actionlint (syntax, expressions, shell via shellcheck) and zizmor
# (security: its strictest persona, offline; each accepted finding carries its reason inline).
# Check only, no autoformat.
lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/actionlint -config-file .github/actionlint.yaml .github/workflows/*.yml
	$(BIN)/zizmor --offline --persona auditor --no-progress --quiet .github/workflows

# Unit tests only (no toolchain environments, no docker): seconds.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/mha_ci -q -m "not slow and not docker"

# The runner's tests that need no docker: unit tests plus real venv environments and compiles.
test-runner: setup
	$(BIN)/python -m pytest tests/mha_ci -q -ra -m "not docker" --durations=15 -n $(TEST_WORKERS)

# dockerd, the CPU images of both toolchains, then the docker executor, equivalence and registry
# tests.
test-docker: setup containers
	$(BIN)/python -m pytest tests/mha_ci -q -ra -m "docker and not cuda_image" --durations=10

# The sm90 (CUDA) images of both toolchains, then their tests. Not part of `make test`: the two
# builds alone take ~16 min on the CI machine (docs/containers.md), past what .ci/run may add.
test-cuda-images: setup containers-cuda
	$(BIN)/python -m pytest tests/mha_ci -q -ra -m cuda_image --durations=10

# Every test: lint first (seconds), then the runner's own, the docker ones, then the kernel tests
# of tests/mha in both pinned toolchains through the pull-request pipeline (interpreter
# correctness + checksums), always the full pipeline (--all), never narrowed by git.
test: lint test-runner test-docker ci-all

checksums: setup
	$(MHA_CI) checksums verify --out $(OUT)/checksums

perf: $(STAMP)
	$(MHA_CI) perf measure --out $(OUT)/perf

# CPU images of every toolchain (the ROCm ones need a registry this machine cannot reach), both
# at once: each build is mostly one process unpacking, copying and committing layers, so the two
# together take little more than the longer one (docs/ci-timings.md).
containers: $(STAMP) docker-setup
	$(MHA_CI) containers build --jobs 2

# sm90 images of every toolchain (~3.5 GB of wheels and a ~7.5 GB image each; docs/containers.md).
containers-cuda: $(STAMP) docker-setup
	$(MHA_CI) containers build --platform cuda

nightly: setup
	$(MHA_CI) perf refresh --out $(OUT)/nightly

export: $(STAMP)
	$(MHA_CI) export github

# Re-record per-test durations of the interpreter shards (sharding input) from a real run.
durations: setup
	$(MHA_CI) run --event pull_request --all --out $(OUT)/durations \
	  $(foreach j,$(shell $(MHA_CI) plan --all --format json | $(BIN)/python -c 'import json,sys; print(" ".join(j["id"] for j in json.load(sys.stdin)["jobs"] if j["kind"]=="correctness" and j["arch"]=="interpreter"))'),--job $(j))
	cp $(OUT)/durations/test_durations/interpreter.json perf_baselines/test_durations/

clean:
	rm -rf $(VENV) .cache $(OUT) build src/*.egg-info
