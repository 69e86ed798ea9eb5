#!/usr/bin/env bash
# Make the local base image orch-base:bookworm (a minimal Debian 12 root) without a registry:
# debootstrap a root file system and `docker import` it. Idempotent: does nothing if the image exists.
# Needs root, debootstrap and a running engine. Usage: scripts/ci-base-image.sh [IMAGE] (default
# orch-base:bookworm); then build with ORCH_BASE_IMAGE=IMAGE.
set -euo pipefail

image="${1:-orch-base:bookworm}"
suite="${ORCH_BASE_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "ci-base-image: $image already present"
    exit 0
fi

rootfs="$(mktemp -d /tmp/orch-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT

echo "ci-base-image: debootstrap $suite into $rootfs"
if ! debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
    echo "ci-base-image: debootstrap failed; last lines of $rootfs.log:" >&2
    tail -n 30 "$rootfs.log" >&2
    exit 1
fi
rm -f "$rootfs.log"
# Keep the image lean, as the official slim images do.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -c . | docker import \
    --change 'CMD ["bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$image"
echo "ci-base-image: imported $image"
