#!/usr/bin/env bash
# The fast tier's gtest cases (`make check`): every case but the exhaustive float sweeps, run in
# JOBS shard processes side by side instead of one process per case as ctest does (starting
# kiln_tests costs about 0.1 s, which over 2,400 cases was most of the fast tier's time).
# Usage: check_gtests.sh BUILD_DIR JOBS
set -uo pipefail
build=$1 jobs=$2
filter='-*EveryFloat.*:*.*EveryFloat'  # the `exhaustive` label's cases (tests/CMakeLists.txt)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for ((i = 0; i < jobs; ++i)); do
  GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i KILN_VERIFY_PASSES=1 \
    "$build/tests/kiln_tests" --gtest_filter="$filter" --gtest_brief=1 >"$logs/$i.log" 2>&1 &
  pids+=($!)
done
status=0
for ((i = 0; i < jobs; ++i)); do
  wait "${pids[$i]}" || status=1
  echo "shard $((i + 1)) of $jobs:"
  cat "$logs/$i.log"  # --gtest_brief: the failures in full, then the counts
done
exit "$status"
