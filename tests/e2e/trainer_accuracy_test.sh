#!/usr/bin/env bash
# A bundled trainer, run with its default flags on the full Fashion-MNIST data (5 epochs), must
# reach its published test accuracy: the `result: test_accuracy=A` line it prints must show
# A >= MIN. Skipped (77) without the data.
# With RESULT_FILE, a passing run also writes A there (written whole, then renamed): the ctest
# fixture that lets the mixed-precision and multi-worker tests compare against this float32
# run instead of repeating it (reference_accuracy.sh).
# Usage: trainer_accuracy_test.sh TRAINER MIN [RESULT_FILE]
set -euo pipefail
trainer=$1 min=$2 result_file=${3:-}
[[ -n $result_file ]] && rm -f "$result_file"
data_dir=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data_dir/train-images-idx3-ubyte.gz && ! -e $data_dir/train-images-idx3-ubyte ]]; then
  echo "Fashion-MNIST not found in $data_dir (install dataset-fashion-mnist): skipped"
  exit 77
fi
output=$("$trainer" --verbose=0)
echo "$output"
accuracy=$(sed -n 's/^result: test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$output")
if [[ -z $accuracy ]]; then
  echo "FAIL: $trainer printed no 'result: test_accuracy=' line"
  exit 1
fi
if ! awk -v a="$accuracy" -v m="$min" 'BEGIN { exit !(a >= m) }'; then
  echo "FAIL: $(basename "$trainer") reached test accuracy $accuracy, below its target $min"
  exit 1
fi
echo "$(basename "$trainer"): test accuracy $accuracy >= $min"
if [[ -n $result_file ]]; then
  echo "$accuracy" >"$result_file.tmp"
  mv "$result_file.tmp" "$result_file"
fi
