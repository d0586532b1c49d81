#!/usr/bin/env bash
# Runs one fuzz target for a fixed time, starting from its committed seeds plus the corpus it
# grew in earlier runs (kept in WORK_DIR/corpus; the committed seeds are never written to).
# A crash, leak or timeout fails the run and leaves the input in WORK_DIR/artifacts/: add it to
# fuzz/corpus/<target>/ as crash_<what> once fixed, so every later run replays it.
# Usage: run_fuzzer.sh FUZZER SEED_DIR WORK_DIR SECONDS [more libFuzzer flags]
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4
shift 4
mkdir -p "$work/corpus" "$work/artifacts"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "$seeds"
