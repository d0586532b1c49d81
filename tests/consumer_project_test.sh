#!/usr/bin/env bash
# Installs Kiln into a fresh prefix and moves it (the package is relocatable), checks that every
# installed program and library finds its libraries and that the installed tools run, that the
# installed headers include only the standard library and Kiln's own headers, then builds
# examples/cmake_project against the package and runs it.
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/installed" >/dev/null
mv "$work/installed" "$work/prefix"
prefix=$work/prefix

# No installed binary may depend on the build tree or the install-time prefix to find libkiln:
# each resolves every library it needs (the tools through a RUNPATH relative to $ORIGIN).
while IFS= read -r file; do
  if ! file_ldd=$(ldd "$file" 2>&1); then continue; fi  # not a dynamic ELF file
  if grep -q 'not found' <<<"$file_ldd"; then
    echo "installed ${file#"$prefix"/} cannot find its libraries:" >&2
    grep 'not found' <<<"$file_ldd" >&2
    exit 1
  fi
done < <(find "$prefix" -type f \( -perm -u+x -o -name '*.so*' \))

# Every installed program starts; kiln-inspect prints its usage and reads (here: fails to find)
# a checkpoint through the installed libkiln.
for program in "$prefix"/bin/*; do
  status=0
  output=$("$program" --help 2>&1) || status=$?
  if ((status == 126 || status == 127 || status >= 128)); then
    echo "installed bin/$(basename "$program") does not start (exit $status): $output" >&2
    exit 1
  fi
done
inspect=$prefix/bin/kiln-inspect
[[ -x $inspect ]] || { echo "bin/kiln-inspect is not installed" >&2; exit 1; }
status=0
output=$("$inspect" --help 2>&1) || status=$?
if ((status != 0)) || ! grep -q '^usage: kiln-inspect' <<<"$output"; then
  echo "installed kiln-inspect --help: exit $status, expected 0 and its usage: $output" >&2
  exit 1
fi
status=0
output=$("$inspect" "$work/no_such_checkpoint" 2>&1) || status=$?
if ((status != 1)) || ! grep -q 'no checkpoint at' <<<"$output"; then
  echo "installed kiln-inspect on a missing checkpoint: exit $status, expected 1 and" \
    "'no checkpoint at': $output" >&2
  exit 1
fi

# Public headers must not leak Abseil, protobuf, LLVM, Eigen, CUDA or MPI to users: every
# #include is either a Kiln header or a standard header (<name>, no directory, no ".h").
include_dir="$prefix/include"
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

cmake -S "$src/examples/cmake_project" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
