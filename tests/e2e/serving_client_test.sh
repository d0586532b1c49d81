#!/usr/bin/env bash
# The README's serving walk-through end to end: train the MLP for one epoch and export it,
# serve it with kiln-serve (gRPC and REST on free ports), then call it with
# examples/serving_client over gRPC (the generated stub) and with curl over REST. The
# accuracy the client computes from the server's predictions over the 10000 test images must
# equal the trainer's own test accuracy, and SIGTERM must stop the server with status 0.
# Skipped (77) without the data.
# Usage: serving_client_test.sh TRAINER KILN_SERVE CLIENT WORK_DIR
set -euo pipefail
trainer=$1 serve=$2 client=$3 work=$4
data_dir=${KILN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data_dir/t10k-images-idx3-ubyte.gz && ! -e $data_dir/t10k-images-idx3-ubyte ]]; then
  echo "Fashion-MNIST not found in $data_dir (install dataset-fashion-mnist): skipped"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
trained=$("$trainer" --data_dir="$data_dir" --epochs=1 --verbose=0 --export_dir="$work/model")
echo "$trained"
accuracy=$(sed -n 's/.*test_accuracy=\([0-9.]*\).*/\1/p' <<<"$trained")

"$serve" --model_name=fashion_mnist --model_base_path="$work/model" --port=0 --rest_api_port=0 \
  >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "REST API at" "$work/serve.log" && break
  kill -0 $pid 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
cat "$work/serve.log"
grpc_port=$(sed -n 's/.*gRPC API at [0-9.]*:\([0-9]*\).*/\1/p' "$work/serve.log")
rest_port=$(sed -n 's|.*REST API at http://[0-9.]*:\([0-9]*\)/.*|\1|p' "$work/serve.log")

served=$("$client" --server="127.0.0.1:$grpc_port" --model_name=fashion_mnist --images=10000 \
  --batch_size=250 --data_dir="$data_dir")
echo "$served"
grep -q "accuracy $accuracy over 10000 test images" <<<"$served"
"$client" --server="127.0.0.1:$grpc_port" --model_name=fashion_mnist --images=50 --batch_size=1 \
  --data_dir="$data_dir"

status=$(curl -sS "http://127.0.0.1:$rest_port/v1/models/fashion_mnist")
echo "$status"
grep -q '"state": "AVAILABLE"' <<<"$status"
row=$(python3 -c 'import json; print(json.dumps({"instances": [[0.5] * 784]}))' |
  curl -sS -d @- "http://127.0.0.1:$rest_port/v1/models/fashion_mnist:predict")
echo "$row"
grep -q '^{"predictions": \[\[' <<<"$row"

kill -TERM $pid
wait $pid
trap - EXIT
grep -q "kiln-serve: stopped" "$work/serve.log"
rm -rf "$work"
