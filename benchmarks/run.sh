#!/usr/bin/env bash
# The one benchmark runner: builds the benchmarks (Release), runs Kiln's programs and the
# LibTorch peers alternately for several rounds, keeps each figure's best, prints a table and
# writes benchmarks/results.json (see benchmarks/report.py and README.md, "Benchmarks").
#
# Usage: benchmarks/run.sh [--peers | --no-peers] [--rounds N] [--build-dir DIR] [--jobs J]
#   --peers     build and run the LibTorch peers, installing libtorch-dev and
#               libopenblas0-openmp with apt-get first if needed (default: on when
#               libtorch-dev is installed)
#   --rounds N  alternations of Kiln and peer runs; each figure is the best of them (default 3)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-bench"
rounds=3
jobs="$(nproc)"
peers=auto
while [[ $# -gt 0 ]]; do
  case "$1" in
    --peers) peers=on ;;
    --no-peers) peers=off ;;
    --rounds) rounds="$2"; shift ;;
    --build-dir) build="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
if [[ $peers == auto ]]; then
  have_pkg libtorch-dev && peers=on || peers=off
fi
if [[ $peers == on ]] && ! { have_pkg libtorch-dev && have_pkg libopenblas0-openmp; }; then
  echo "== installing the LibTorch peer's packages (libtorch-dev, libopenblas0-openmp)"
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get install -y --no-install-recommends libtorch-dev libopenblas0-openmp
fi
peers_cmake=OFF; [[ $peers == on ]] && peers_cmake=ON

echo "== building in $build (Release, KILN_BENCH_PEERS=$peers_cmake)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCHMARKS=ON \
  -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BENCH_PEERS="$peers_cmake" >/dev/null
targets=(train_step_bench compile_bench sgemm_bench pipeline_bench fit_pipeline_bench)
if [[ $peers == on ]]; then targets+=(libtorch_bench); fi
ninja -C "$build" -j"$jobs" "${targets[@]}"

bin="$build/benchmarks"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
# Runs one program, echoing its output and keeping its RESULT lines.
run() { "$@" | tee /dev/stderr | grep '^RESULT ' >>"$lines" || true; }
# The peer at its best: LibTorch's 2 intra-op threads on one OpenMP pool that OpenBLAS (the
# OpenMP build) shares; with any other BLAS, a single-threaded one. OpenMP threads sleep rather
# than spin when idle (OMP_WAIT_POLICY=passive): on a busy 2-core host, spinning made LibTorch's
# MLP step up to 30x slower. Kiln's pool sleeps on a condition variable already.
openmp_blas=/usr/lib/x86_64-linux-gnu/openblas-openmp
export OMP_WAIT_POLICY=passive  # also for sgemm_bench's Eigen product on OpenMP
torch() {
  if [[ -e $openmp_blas/libblas.so.3 ]]; then
    LD_LIBRARY_PATH="$openmp_blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OMP_NUM_THREADS=2 \
      run "$bin/peers/libtorch_bench" "$@"
  else
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 run "$bin/peers/libtorch_bench" "$@"
  fi
}

for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r of $rounds" >&2
  for c in mlp_b64 mlp_b1024 cnn_b128; do
    run "$bin/train_step_bench" "$c"
    if [[ $peers == on ]]; then torch "$c"; fi
  done
  # Model::fit under the reference interpreter, for the public API's compiled/interpreted ratio.
  KILN_INTERPRET=1 "$bin/train_step_bench" mlp_b64 |
    sed -n 's/^RESULT kiln_/RESULT interpreted_kiln_/p' >>"$lines" || true
  run "$bin/compile_bench"
  run "$bin/sgemm_bench"
  run "$bin/pipeline_bench"
  run "$bin/fit_pipeline_bench"
  if [[ $peers == on ]]; then torch eltwise_chain; fi
done

peer_desc=""
if [[ $peers == on ]]; then
  peer_desc="LibTorch $(dpkg-query -W -f='${Version}' libtorch-dev), 2 threads, "
  [[ -e $openmp_blas/libblas.so.3 ]] && peer_desc+="OpenBLAS OpenMP build sharing its pool" ||
    peer_desc+="OPENBLAS_NUM_THREADS=1"
  peer_desc+=", OMP_WAIT_POLICY=passive"
fi
python3 "$root/benchmarks/report.py" "$lines" "$root/benchmarks/results.json" \
  --rounds "$rounds" --peers "$peer_desc"
