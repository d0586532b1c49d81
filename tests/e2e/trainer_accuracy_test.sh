#!/usr/bin/env bash
# A bundled trainer, run with its default flags on the full Fashion-MNIST data (5 epochs), must
# reach its published test accuracy: the `result: test_accuracy=A` line it prints must show
# A >= MIN. Skipped (77) without the data.
# Usage: trainer_accuracy_test.sh TRAINER MIN
set -euo pipefail
trainer=$1 min=$2
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
