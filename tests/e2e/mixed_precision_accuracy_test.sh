#!/usr/bin/env bash
# A bundled trainer under a mixed dtype policy reaches its float32 test accuracy within TOL
# (issue #16): both runs with the default flags (same seed and epochs) on the full
# Fashion-MNIST data. Skipped (77) without the data. The float32 accuracy comes from
# REFERENCE_FILE when the accuracy_TRAINER fixture wrote it (reference_accuracy.sh).
# Usage: mixed_precision_accuracy_test.sh TRAINER POLICY TOL [REFERENCE_FILE]
set -euo pipefail
trainer=$1 policy=$2 tol=$3 reference_file=${4:-}
source "$(dirname "$0")/reference_accuracy.sh"
data_dir=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data_dir/train-images-idx3-ubyte.gz && ! -e $data_dir/train-images-idx3-ubyte ]]; then
  echo "Fashion-MNIST not found in $data_dir (install dataset-fashion-mnist): skipped"
  exit 77
fi
accuracy() {
  local output
  output=$("$trainer" --verbose=0 --dtype_policy="$1")
  echo "$1: $output" >&2
  sed -n 's/^result: test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$output"
}
reference=$(reference_accuracy "$trainer" "$reference_file")
mixed=$(accuracy "$policy")
if [[ -z $reference || -z $mixed ]]; then
  echo "FAIL: $trainer printed no 'result: test_accuracy=' line"
  exit 1
fi
if ! awk -v a="$mixed" -v r="$reference" -v t="$tol" 'BEGIN { d = a - r; exit !(d <= t && -d <= t) }'; then
  echo "FAIL: $(basename "$trainer") under $policy reached $mixed, float32 $reference (tolerance $tol)"
  exit 1
fi
echo "$(basename "$trainer"): $policy $mixed vs float32 $reference, within $tol"
