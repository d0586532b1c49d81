#!/usr/bin/env bash
# Installs Kiln into a fresh prefix, checks that the installed headers include only the
# standard library and Kiln's own headers, then builds examples/cmake_project against the
# package and runs it.
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

# Public headers must not leak Abseil, protobuf, LLVM, Eigen, CUDA or MPI to users: every
# #include is either a Kiln header or a standard header (<name>, no directory, no ".h").
include_dir="$work/prefix/include"
[[ -f $include_dir/kiln/kiln.h ]] || { echo "kiln/kiln.h is not installed" >&2; exit 1; }
bad=$(grep -rnE '^[[:space:]]*#[[:space:]]*include' "$include_dir" |
  grep -vE '#[[:space:]]*include[[:space:]]*("kiln/[A-Za-z0-9_/]+\.h"|<kiln/[A-Za-z0-9_/]+\.h>|<[a-z_]+>)' || true)
if [[ -n $bad ]]; then
  echo "installed headers include headers other than Kiln's and the standard library's:" >&2
  echo "$bad" | sed "s|$include_dir/||" >&2
  exit 1
fi
stray=$(find "$include_dir" -type f ! -path "$include_dir/kiln/*")
if [[ -n $stray ]]; then
  echo "files installed outside include/kiln: $stray" >&2
  exit 1
fi

cmake -S "$src/examples/cmake_project" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
