#!/usr/bin/env bash
# A bundled trainer trains the same on the emulated GPU (#30): with KILN_TEST_ONLY_DEVICE every
# compiled step is a device program (loops and dots on the emulated device, the rest on the
# host, values copied between the two memories as compiler/run_device.cc decides), and its
# test accuracy and loss come within TOL of the CPU run with the same flags and seed. Skipped
# (77) without the data.
# Usage: emulated_gpu_trainer_test.sh TRAINER TOL FLAGS...
set -euo pipefail
trainer=$1 tol=$2
shift 2
data_dir=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data_dir/train-images-idx3-ubyte.gz && ! -e $data_dir/train-images-idx3-ubyte ]]; then
  echo "Fashion-MNIST not found in $data_dir (install dataset-fashion-mnist): skipped"
  exit 77
fi
cpu=$("$trainer" --verbose=0 "$@" | grep '^result:')
gpu=$(KILN_TEST_ONLY_DEVICE=emulated-gpu "$trainer" --verbose=0 "$@" | grep '^result:')
echo "cpu:          $cpu"
echo "emulated gpu: $gpu"
field() { sed -n "s/.* $1=\([0-9.]*\) .*/\1/p" <<<"$2"; }
for f in test_accuracy test_loss; do
  a=$(field "$f" "$cpu") b=$(field "$f" "$gpu")
  if [[ -z $a || -z $b ]]; then
    echo "FAIL: no $f in a result line"
    exit 1
  fi
  if ! awk -v a="$a" -v b="$b" -v t="$tol" 'BEGIN { d = a - b; exit !(d <= t && -d <= t) }'; then
    echo "FAIL: $(basename "$trainer") $f: cpu $a, emulated gpu $b (tolerance $tol)"
    exit 1
  fi
done
echo "$(basename "$trainer"): the emulated GPU's run is within $tol of the CPU's"
