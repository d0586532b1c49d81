#!/usr/bin/env bash
# Fashion-MNIST through TFRecord: convert a 2000-example subset of each split with
# fashion_mnist_to_tfrecord, then train one epoch on it with fashion_mnist_tfrecord_mlp, which
# must read every record back and learn well above chance (0.10). Skipped (77) without the data.
# Usage: fashion_mnist_tfrecord_test.sh CONVERTER TRAINER WORK_DIR
set -euo pipefail
converter=$1 trainer=$2 work=$3
data_dir=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data_dir/train-images-idx3-ubyte.gz && ! -e $data_dir/train-images-idx3-ubyte ]]; then
  echo "Fashion-MNIST not found in $data_dir (install dataset-fashion-mnist): skipped"
  exit 77
fi
rm -rf "$work"
"$converter" --data_dir="$data_dir" --out_dir="$work" --limit=2000
output=$("$trainer" --data_dir="$work" --epochs=1 --batch_size=32 --verbose=0 \
  --logdir="$work/logs" --min_accuracy=0.6)
echo "$output"
grep -q "trained 63 steps per epoch, testing on 2000 examples" <<<"$output"  # 2000 / 32
ls "$work"/logs/train/events.out.tfevents.* >/dev/null
rm -rf "$work"
