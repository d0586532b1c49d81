#!/bin/sh
# Packs what scripts/gpu_check.sh runs on a GPU machine that has CUDA and Python but none of
# Debian's packages (no LLVM, protobuf, oneDNN, MPI): kiln_gpu_tests (the CUDA tests),
# gpu_bench (benchmarks/gpu_bench.cc), libkiln, libkiln_nccl and libkiln_cuda, every library
# they load that is not glibc's, the CUDA driver's or the CUDA toolkit's (cudart, cuBLASLt, NCCL:
# the GPU machine has its own), and libdevice; binaries stripped, packed with xz.
#   scripts/pack_gpu_bundle.sh BUILD_DIR [OUT]      (OUT: BUILD_DIR/gpu-bundle.tar.xz)
# Build BUILD_DIR without KILN_NATIVE (the default), so that the code runs on any x86-64 host.
# The device tool carries at most 64 MiB: the script fails above 60 MiB.
set -eu
build=${1:?usage: pack_gpu_bundle.sh BUILD_DIR [OUT]}
out=${2:-$build/gpu-bundle.tar.xz}
ninja -C "$build" -j2 kiln_gpu_tests gpu_bench kiln > "${TMPDIR:-/tmp}/kiln_gpu_bundle_build.log" ||
  { tail -30 "${TMPDIR:-/tmp}/kiln_gpu_bundle_build.log"; exit 1; }
stage=$(mktemp -d "${TMPDIR:-/tmp}/kiln_gpu_bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/kiln/bin" "$stage/kiln/lib"
cp "$build/tests/kiln_gpu_tests" "$build/benchmarks/gpu_bench" "$stage/kiln/bin/"
for lib in "$build"/libkiln.so.* "$build"/libkiln_nccl.so "$build"/libkiln_cuda.so; do
  [ -e "$lib" ] && cp -P "$lib" "$stage/kiln/lib/"
done
# The libraries the test binary and the CUDA plugins load, but glibc's (the GPU machine's own,
# which must be as new as this one's), the driver's and the CUDA toolkit's.
for f in "$build/tests/kiln_gpu_tests" "$build"/libkiln_nccl.so "$build"/libkiln_cuda.so; do
  [ -e "$f" ] || continue
  if ldd "$f" | grep -q "not found"; then
    echo "$f: a library it needs is not found:"; ldd "$f" | grep "not found"; exit 1
  fi
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r path; do
  case $(basename "$path") in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*) continue ;;
    libkiln*) continue ;;
  esac
  case $path in /usr/local/cuda*) continue ;; esac
  cp -L "$path" "$stage/kiln/lib/"
done
libdevice=${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc
[ -e "$libdevice" ] && cp "$libdevice" "$stage/kiln/lib/"
strip --strip-unneeded "$stage"/kiln/bin/* "$stage"/kiln/lib/*.so* 2>/dev/null || true
cp "$(dirname "$0")/gpu_check.sh" "$stage/kiln/"
python3 - "$stage" "$out" <<'PY'
import sys, tarfile
stage, out = sys.argv[1], sys.argv[2]
with tarfile.open(out + ".tmp", "w:xz", preset=6) as t:
    t.add(stage + "/kiln", arcname="kiln")
import os
os.replace(out + ".tmp", out)
PY
size=$(stat -c %s "$out")
echo "packed $out: $((size / 1048576)) MiB, $(ls "$stage/kiln/lib" | wc -l) libraries"
if [ "$size" -gt $((60 * 1048576)) ]; then
  echo "the bundle is over 60 MiB: the device tool carries 64 MiB at most"; exit 1
fi
