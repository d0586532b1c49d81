# Sourced by the accuracy tests that compare a run against the trainer's float32 run with its
# default flags. reference_accuracy TRAINER [RESULT_FILE] prints that run's test accuracy: read
# from RESULT_FILE when trainer_accuracy_test.sh wrote it after the trainer was last built (the
# ctest fixture), else by running the trainer (a test run alone, or a stale file).
reference_accuracy() {
  local trainer=$1 result_file=${2:-} output
  if [[ -n $result_file && -s $result_file && $result_file -nt $trainer ]]; then
    echo "float32 (from $result_file): $(cat "$result_file")" >&2
    cat "$result_file"
    return
  fi
  output=$("$trainer" --verbose=0)
  echo "float32: $output" >&2
  sed -n 's/^result: test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$output"
}
