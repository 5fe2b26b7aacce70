#!/usr/bin/env bash
# Make this machine ready for the docker tests: docker.io, debootstrap, lld-19 and docker-registry
# installed, dockerd running, the local Debian base image present. Idempotent: each step is skipped when
# its result is already there. Each step prints its duration.
#
# Needs root (apt, dockerd, debootstrap). The CI machine has no image registry, hence the
# locally made base image (containers/make-base-image.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"
BASE_IMAGE="${MHA_CI_CPU_BASE:-mha-ci/debian-bookworm:base}"

step() {   # step NAME COMMAND...: run, print how long it took
    local name="$1" t0=$SECONDS; shift
    "$@"
    echo "docker-setup: $name: $((SECONDS - t0)) s"
}

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    # lld-19: Triton 3.4's AMD linking in the host (venv) checksums job (docs/facts.md)
    command -v ld.lld-19 >/dev/null || missing+=(lld-19)
    # docker-registry: a local registry for the publish/pull tests (tests/mha_ci/containers/test_registry.py)
    command -v docker-registry >/dev/null || missing+=(docker-registry)
    if ((${#missing[@]})); then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        echo "installed: ${missing[*]}"
    else
        echo "docker.io, debootstrap, lld-19, docker-registry already installed"
    fi
}

start_dockerd() {
    if docker info >/dev/null 2>&1; then
        echo "dockerd already running"
        return
    fi
    # No systemd in CI containers: start the daemon directly, in the background, logging to a
    # file; setsid so that it outlives this script's process group.
    setsid dockerd >/tmp/dockerd.log 2>&1 < /dev/null &
    local waited=0
    until docker info >/dev/null 2>&1; do
        if ((waited >= DOCKERD_WAIT_S)); then
            echo "dockerd did not answer within ${DOCKERD_WAIT_S} s; its log:" >&2
            tail -20 /tmp/dockerd.log >&2
            exit 3
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "dockerd started (answered after ${waited} s; log /tmp/dockerd.log)"
}

step "packages" install_packages
step "dockerd" start_dockerd
step "base image" containers/make-base-image.sh "$BASE_IMAGE"
