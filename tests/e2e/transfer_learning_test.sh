#!/usr/bin/env bash
# examples/transfer_learning at its defaults: the frozen extractor (trained on classes 0-4) under
# a new head, and the fine-tuned one, must learn classes 5-9 from 1,000 examples well past chance
# (0.2): the frozen one to >= 0.75, the fine-tuned one to >= 0.9 (seen: 0.84 and 0.95, the model
# from scratch 0.95). Skipped (77) without the data.
# Usage: transfer_learning_test.sh PROGRAM
set -euo pipefail
program=$1
status=0
output=$("$program" --verbose=0) || status=$?
echo "$output"
((status == 77)) && exit 77
((status == 0)) || { echo "FAIL: exit $status"; exit 1; }
line=$(grep '^result: ' <<<"$output") || { echo "FAIL: no result line"; exit 1; }
read -r transfer finetuned scratch < <(sed -E \
  's/^result: transfer_accuracy=([0-9.]+) finetuned_accuracy=([0-9.]+) scratch_accuracy=([0-9.]+)$/\1 \2 \3/' \
  <<<"$line")
awk -v t="$transfer" -v f="$finetuned" -v s="$scratch" 'BEGIN {
  if (t < 0.75) { print "FAIL: frozen extractor reached " t ", below 0.75"; exit 1 }
  if (f < 0.9) { print "FAIL: fine-tuned extractor reached " f ", below 0.9"; exit 1 }
  print "transfer learning: frozen " t ", fine-tuned " f ", from scratch " s
}'
