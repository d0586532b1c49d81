#!/usr/bin/env bash
# Installs the Debian packages Kiln builds with. Idempotent: does nothing (and never touches
# apt) when every package is already installed.
set -euo pipefail

packages=(
  llvm-16-dev libzstd-dev libeigen3-dev libprotobuf-dev protobuf-compiler libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin zlib1g-dev
  ninja-build ccache dataset-fashion-mnist cmake g++ mold
  python3  # tests/tools/check_layers.py and the benchmark scripts
  clang libclang-rt-14-dev  # the fuzz targets (fuzz/, KILN_FUZZ)
  libdnnl-dev  # oneDNN: the convolutions' fast path (ops/onednn_conv.cc)
  ocl-icd-opencl-dev  # oneDNN's CMake package requires OpenCL (a recommendation apt skips here)
  # kiln-serve (serving/): REST server (libevent's evhttp), JSON, the gRPC API and its code
  # generator; cpp-httplib is the tests' and serve_bench's HTTP client.
  libevent-dev rapidjson-dev pkg-config libgrpc++-dev protobuf-compiler-grpc libcpp-httplib-dev
  curl  # the README's REST calls, run by tests/e2e/serving_client_test.sh
  libonnx-dev libonnx-testdata  # ONNX import (interop/): the ModelProto classes and the node conformance tests
  python3-onnx  # the ONNX checker the export tests run
  iproute2  # ip netns: tests/distribute/multi_host_test.sh runs two workers as two hosts
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then sudo=(sudo); fi
# Wait for another apt/dpkg to finish rather than fail on its lock.
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get -o DPkg::Lock::Timeout=600 update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
