#!/usr/bin/env bash
# Makes the image's base, localhost/debian:bookworm-minbase, without a
# container registry: debootstrap --variant=minbase bookworm from Debian's
# mirror (about 1 min), cleaned (apt lists, caches, docs: ~130 MB), then
# `podman import` of its tarball. Skips the work when the image exists.
#
#   deploy/image/make_base.sh [MIRROR]      (root; needs debootstrap and podman)
set -euo pipefail
IMAGE=localhost/debian:bookworm-minbase
MIRROR=${1:-http://deb.debian.org/debian}
if podman image exists "$IMAGE"; then
  echo "make_base: $IMAGE exists"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
debootstrap --variant=minbase bookworm "$dir/root" "$MIRROR"
rm -rf "$dir"/root/var/lib/apt/lists/* "$dir"/root/var/cache/apt/* "$dir"/root/usr/share/doc/* \
  "$dir"/root/usr/share/man/* "$dir"/root/usr/share/locale/*
tar -C "$dir/root" -c . | podman import - "$IMAGE"
echo "make_base: $IMAGE imported"
