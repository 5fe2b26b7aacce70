#!/usr/bin/env bash
# Make the local Debian bookworm base image the CPU toolchain images build FROM.
#
# Why local: no image registry is reachable from these machines (docs/facts.md), so `FROM debian`
# cannot be pulled. debootstrap builds the same minimal root file system from the Debian
# mirror apt already uses, and `docker import` turns it into an image.
#
# Usage: containers/make-base-image.sh [IMAGE_TAG]     (default mha-ci/debian-bookworm:base)
# Env:   MHA_CI_DEBIAN_MIRROR (default http://deb.debian.org/debian), FORCE=1 to remake.
# Idempotent: does nothing when the tag already exists (unless FORCE=1).
set -euo pipefail

tag="${1:-mha-ci/debian-bookworm:base}"
mirror="${MHA_CI_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists; nothing to do (FORCE=1 remakes it)"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 3; }
[[ $(id -u) == 0 ]] || { echo "debootstrap needs root" >&2; exit 3; }

rootfs="$(mktemp -d /tmp/mha-ci-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT

# python3 3.11 is bookworm's: it matches the cp311 wheels of the toolchain locks.
# ca-certificates: so pip in a derived image can verify TLS if it is ever given network.
start=$SECONDS
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -20 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"
# Package lists and caches only make the image bigger.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
echo "debootstrap: $((SECONDS - start)) s"

start=$SECONDS
tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase bookworm from $mirror" - "$tag" >/dev/null
echo "docker import: $((SECONDS - start)) s -> $tag ($(docker image inspect -f '{{.Id}}' "$tag"))"
