#!/usr/bin/env bash
# libkiln_lite and kiln-lite-run load no part of the training framework: ldd lists no libkiln,
# LLVM, protobuf, Eigen (header-only, but checked by name anyway), oneDNN or MPI. Prints the
# library's size.
# Usage: lite_deps_test.sh LIBKILN_LITE KILN_LITE_RUN
set -euo pipefail
status=0
for binary in "$@"; do
  deps=$(ldd "$binary")
  echo "$binary:"
  echo "$deps"
  if grep -Ei 'libkiln\.|libkiln_(onnx|serving|quantize)|LLVM|protobuf|eigen|dnnl|mpi' <<<"$deps"; then
    echo "FAIL: $binary depends on the above"
    status=1
  fi
done
size=$(stat -c %s "$1")
echo "libkiln_lite: $size bytes ($(size "$1" | awk 'NR == 2 { print $1 }') bytes of code)"
exit $status
