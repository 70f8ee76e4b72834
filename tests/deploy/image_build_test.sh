#!/usr/bin/env bash
# Builds the container image without any container registry and runs it:
#   1. deploy/image/make_base.sh: debootstrap bookworm minbase, podman import
#      (skipped when localhost/debian:bookworm-minbase exists);
#   2. buildah build --pull=never --isolation chroot of deploy/image/Containerfile
#      (BINARIES=prebuilt: build/bin of this tree; BINARIES=build compiles in
#      the image, set TANDEM_IMAGE_BINARIES=build);
#   3. podman run --runtime runc --network none (crun and the default ulimits
#      fail on our machines): `tandem-router --help` succeeds, /usr/local/bin
#      holds exactly the five binaries, the process runs as uid 65532, and
#      tandem-generate on stories260K prints what the host's build prints.
#
#   tests/deploy/image_build_test.sh REPO BIN_DIR MODEL_DIR    (root)
#
# Slow (minutes) and needs Debian's mirror: ctest label `image`, registered
# only with -DTANDEM_IMAGE_TEST=ON; CI runs image_static_test.py instead.
set -euo pipefail
REPO=$(cd "$1" && pwd)
BIN_DIR=$(cd "$2" && pwd)
MODEL_DIR=$(cd "$3" && pwd)
TAG=localhost/tandem:test
BINARIES=${TANDEM_IMAGE_BINARIES:-prebuilt}
# nofile: this shell's hard limit (a higher one is refused).
nofile=$(ulimit -Hn)
RUN=(podman run --rm --runtime runc --network none --ulimit "nofile=$nofile:$nofile"
  --ulimit nproc=4096:4096)

for tool in debootstrap buildah podman runc; do
  command -v "$tool" >/dev/null || {
    echo "image_build_test: $tool is missing: apt-get install debootstrap buildah podman runc" >&2
    exit 1
  }
done

"$REPO/deploy/image/make_base.sh"
if [ "$BINARIES" = prebuilt ] && [ "$BIN_DIR" != "$REPO/build/bin" ]; then
  echo "image_build_test: BINARIES=prebuilt copies build/bin of the context; got $BIN_DIR" >&2
  exit 1
fi
buildah build --pull=never --isolation chroot --layers=false \
  --build-arg BINARIES="$BINARIES" -f "$REPO/deploy/image/Containerfile" -t "$TAG" "$REPO"

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

help=$("${RUN[@]}" "$TAG" tandem-router --help 2>&1) || true
grep -q -- "--config" <<<"$help" || fail "tandem-router --help in the image: $help"

bins=$("${RUN[@]}" "$TAG" /bin/sh -c 'ls /usr/local/bin | sort | tr "\n" " "') || true
[ "$bins" = "tandem tandem-decode tandem-generate tandem-prefill tandem-router " ] ||
  fail "/usr/local/bin holds: $bins"

uid=$("${RUN[@]}" "$TAG" /bin/sh -c 'id -u') || true
[ "$uid" = 65532 ] || fail "runs as uid $uid, want 65532"

args=("--prompt=Once upon a time" --n=24 --threads=1)
want=$("$BIN_DIR/tandem-generate" --model="$MODEL_DIR/stories260K/stories260K.gguf" "${args[@]}" \
  2>/dev/null)
got=$("${RUN[@]}" -v "$MODEL_DIR:/models:ro" "$TAG" tandem-generate \
  --model=/models/stories260K/stories260K.gguf "${args[@]}" 2>/dev/null) ||
  fail "tandem-generate in the image failed"
[ "$got" = "$want" ] || fail "tandem-generate in the image: '$got', on the host: '$want'"

size=$(podman image inspect "$TAG" --format '{{.Size}}')
echo "image $TAG: $((size / 1000000)) MB"
if ((failures)); then
  echo "image_build_test: $failures failure(s)" >&2
  exit 1
fi
echo "image_build_test: OK"
