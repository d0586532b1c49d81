#!/bin/sh
# Checks with ptxas that the CUDA code generator's PTX assembles for sm_90, for every fused kernel
# the test suite's compiled graphs produce: runs those tests with KILN_PTX_DIR (each fusion a
# compile() JITs for the CPU is also lowered to PTX, compiler/executable.cc), then ptxas on every
# file.
#   scripts/check_ptx.sh BUILD_DIR [GTEST_FILTER]
# Exits 0 when every kernel assembles, 1 listing the failures, 77 (a skip) without ptxas or
# libdevice.
set -u
build=${1:?usage: check_ptx.sh BUILD_DIR [GTEST_FILTER]}
filter=${2:-'Shard/CompiledRandomGraphs.MatchTheInterpreter/0:Shard/CompiledRandomKernelOpGraphs.MatchTheInterpreter/0:Shard/CompiledRandomGradients.MatchTheInterpreter/0:Fusion*:IndexMapFusion*:NarrowFusion*:MlpStep*:Executable*:Generators*:SplitReductions*'}
ptxas=${KILN_PTXAS:-${CUDA_HOME:-/usr/local/cuda}/bin/ptxas}
if [ ! -x "$ptxas" ]; then
  echo "SKIP: no ptxas at $ptxas (the CUDA toolkit): PTX not checked"
  exit 77
fi
libdevice=${KILN_LIBDEVICE:-${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc}
if [ ! -e "$libdevice" ]; then
  echo "SKIP: no libdevice at $libdevice: kernels with transcendental functions cannot be linked"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/kiln_ptx.XXXXXX")
trap 'rm -rf "$dir"' EXIT
KILN_PTX_DIR=$dir GTEST_TOTAL_SHARDS=1 GTEST_SHARD_INDEX=0 KILN_RANDOM_GRAPHS_PER_SHARD=40 \
  "$build/tests/kiln_tests" --gtest_filter="$filter" --gtest_brief=1 > "$dir/tests.log" 2>&1 || {
  echo "FAIL: the tests themselves failed:"; tail -20 "$dir/tests.log"; exit 1; }
modules=$(ls "$dir" | grep -c '\.ptx$')
if [ "$modules" -eq 0 ]; then echo "FAIL: the tests compiled no fusion"; exit 1; fi
failed=0
for err in "$dir"/*.err; do
  [ -e "$err" ] || continue
  echo "FAIL: compiling PTX: $(cat "$err")"; failed=$((failed + 1))
done
# Two ptxas at a time; each failure leaves a .log beside its module.
ls "$dir"/*.ptx | xargs -P 2 -I{} sh -c \
  '"$0" -arch=sm_90 "{}" -o /dev/null > "{}.log" 2>&1 && [ ! -s "{}.log" ] && rm -f "{}.log"' "$ptxas"
for log in "$dir"/*.ptx.log; do
  [ -e "$log" ] || continue
  echo "FAIL: ptxas on ${log%.log}:"; head -5 "$log"; failed=$((failed + 1))
done
entries=$(cat "$dir"/*.ptx | grep -c '^\.visible \.entry')
if [ "$failed" -ne 0 ]; then echo "$failed of $modules modules failed"; exit 1; fi
echo "ptxas accepted all $modules PTX modules ($entries kernels) for sm_90"
