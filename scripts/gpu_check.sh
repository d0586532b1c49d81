#!/bin/sh
# The GPU machine's one prepared check (#30): unpacks the bundle scripts/pack_gpu_bundle.sh made,
# runs the CUDA tests and the GPU benchmark on the GPU, and writes a summary into DIR.
#   scripts/gpu_check.sh DIR [BUNDLE]     (BUNDLE: build/gpu-bundle.tar.xz)
# Needs only Python 3 (to unpack xz) and the NVIDIA driver; the CUDA toolkit's libdevice is used
# when present, else the bundle's. DIR gets summary.txt, gpu_tests.xml, gpu_tests.log and
# gpu_bench.json.
# Exit status: the tests'.
set -u
dir=${1:?usage: gpu_check.sh DIR [BUNDLE]}
bundle=${2:-build/gpu-bundle.tar.xz}
mkdir -p "$dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
  "$bundle" "$work" 2>"$dir/unpack.log" || tar -C "$work" -xJf "$bundle" || {
  echo "could not unpack $bundle"; cat "$dir/unpack.log"; exit 2; }
kiln=$work/kiln
export LD_LIBRARY_PATH="$kiln/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${KILN_LIBDEVICE:-}" ]; then
  host=${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc
  if [ -e "$host" ]; then KILN_LIBDEVICE=$host; else KILN_LIBDEVICE=$kiln/lib/libdevice.10.bc; fi
  export KILN_LIBDEVICE
fi
{
  echo "kiln gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sed 's/^/GPU: /' || echo "GPU: nvidia-smi not found"
  echo "libdevice: $KILN_LIBDEVICE"
} > "$dir/summary.txt"
start=$(date +%s)
# The CUDA tests but the random graphs on a host grid (kiln_gpu_tests holds no random graph
# tests for its child to run; kiln_tests runs them on every machine).
"$kiln/bin/kiln_gpu_tests" --gtest_output="xml:$dir/gpu_tests.xml" \
  --gtest_filter='CudaCodegen*:CudaGpu*:CudaGridOnHost.Every*:CudaGridOnHost.AGrid*' \
  > "$dir/gpu_tests.log" 2>&1
status=$?
{
  echo "kiln_gpu_tests: exit $status in $(( $(date +%s) - start )) s"
  sed -n '/^\[==========\] .* ran/,$p' "$dir/gpu_tests.log"
  grep -B1 '^\[  SKIPPED \] .*(' "$dir/gpu_tests.log" | grep -v '^\[\|^--' | sort -u |
    sed 's/^/skip reason: /'
} >> "$dir/summary.txt"
"$kiln/bin/gpu_eltwise_bench" > "$dir/gpu_bench.json" 2>&1
echo "gpu_eltwise_bench: exit $?: $(cat "$dir/gpu_bench.json")" >> "$dir/summary.txt"
cat "$dir/summary.txt"
exit "$status"
