#!/usr/bin/env bash
# The one benchmark runner: builds the benchmarks (Release), then runs Kiln's programs and the
# LibTorch peers alternately for several rounds, each program under benchmarks/measure.py, which
# records the CPU time other processes used while it ran. benchmarks/report.py discards noisy
# runs, computes each ratio per round from that round's two figures, and writes the median,
# range and kept-round count of each to benchmarks/results.json with the CPU model, ISA path and
# the peer's configuration (see README.md, "Benchmarks").
#
# Usage: benchmarks/run.sh [--peers | --no-peers] [--rounds N] [--max-other-cores C]
#                          [--build-dir DIR] [--jobs J] [--independent-peer BIN]
#   --peers     build and run the LibTorch peers, installing libtorch-dev and
#               libopenblas0-openmp with apt-get first if needed (default: on when
#               libtorch-dev is installed)
#   --rounds N  alternations of Kiln and peer runs (default 5)
#   --max-other-cores C
#               discard a run during which other processes used more than C cores on average
#               (default 0.1)
#   --independent-peer BIN
#               also run BIN, the independent LibTorch program (../shared/peers/train_torch.cpp,
#               built as its README says), on each trainer case in each round, right after
#               Kiln's trainer and libtorch_bench's, and report how libtorch_bench's figure
#               compares with it (trainer_*_libtorch_bench_vs_independent)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-bench"
rounds=5
max_other=0.1
jobs="$(nproc)"
peers=auto
independent=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --peers) peers=on ;;
    --no-peers) peers=off ;;
    --rounds) rounds="$2"; shift ;;
    --max-other-cores) max_other="$2"; shift ;;
    --build-dir) build="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --independent-peer) independent="$(realpath "$2")"; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
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
# A fresh build directory gets the benchmarks only; an existing one (--build-dir build, the
# `make build` tree) keeps its other settings and gains the benchmarks and peers.
fresh=(); [[ -e $build/CMakeCache.txt ]] || fresh=(-G Ninja -DCMAKE_BUILD_TYPE=Release
  -DKILN_BUILD_TESTS=OFF)
cmake -S "$root" -B "$build" "${fresh[@]}" -DKILN_BUILD_BENCHMARKS=ON \
  -DKILN_BENCH_PEERS="$peers_cmake" >/dev/null
targets=(train_step_bench compile_bench sgemm_bench pipeline_bench fit_pipeline_bench
  lowp_gemm_bench lite_bench fashion_mnist_mlp fashion_mnist_cnn)
if [[ $peers == on ]]; then targets+=(libtorch_bench); fi
# Built only where Kiln has its MPI backend (and run only where mpirun is).
if ninja -C "$build" -t targets all | grep -q '^allreduce_vs_mpi:'; then
  targets+=(allreduce_vs_mpi mlp_2workers_step_vs_1)
fi
ninja -C "$build" -j"$jobs" "${targets[@]}"

bin="$build/benchmarks"
runs="$root/benchmarks/runs.jsonl"  # every run of this invocation, with its noise (measure.py)
rm -f "$runs"
# Runs one program in round $r under benchmarks/measure.py: its output is echoed, its RESULT
# lines and the CPU time other processes used meanwhile go to $runs.
# `run LABEL [--rename OLD:NEW] [--trainer NAME] [--independent NAME] COMMAND...`; --rename
# renames the prefix of its RESULT keys; --trainer reads a bundled trainer's result line,
# --independent the independent LibTorch program's epoch lines (measure.py).
run() {
  local label="$1" extra=()
  shift
  while [[ $1 == --rename || $1 == --trainer || $1 == --independent ]]; do
    extra+=("$1" "$2")
    shift 2
  done
  python3 "$root/benchmarks/measure.py" --out "$runs" --round "$r" --label "$label" \
    "${extra[@]}" -- "$@" ||
    echo "run.sh: $label failed in round $r (kept in $runs, discarded by report.py)" >&2
}
# The peer at its best: LibTorch's 2 intra-op threads on one OpenMP pool that OpenBLAS (the
# OpenMP build) shares; with any other BLAS, a single-threaded one. Each case runs under the
# default OpenMP wait policy and under OMP_WAIT_POLICY=passive with 2 threads, and with 1 thread
# (which can win on small batches), and report.py keeps the best figure of the round (it says
# which). Kiln's programs run with the environment as it is.
openmp_blas=/usr/lib/x86_64-linux-gnu/openblas-openmp
torch() {
  local variant policy threads
  for variant in default:2 passive:2 default:1; do
    policy=${variant%:*} threads=${variant#*:}
    local env=(OMP_NUM_THREADS=$threads KILN_PEER_THREADS=$threads
      KILN_TRAINER_EPOCHS=${trainer_epochs:-3})
    [[ $policy == passive ]] && env+=(OMP_WAIT_POLICY=passive)
    if [[ -e $openmp_blas/libblas.so.3 ]]; then
      env+=("LD_LIBRARY_PATH=$openmp_blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    else
      env+=(OPENBLAS_NUM_THREADS=1)
    fi
    run "libtorch_bench $* omp=$policy threads=$threads" env -u OMP_WAIT_POLICY "${env[@]}" \
      "$bin/peers/libtorch_bench" "$@"
  done
}

for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r of $rounds" >&2
  # mlp_b1024_bf16, cnn_b256_bf16 (issue #16): mixed_bfloat16 against float32 in one process, and
  # the peer's CPU autocast to bf16 against its f32.
  # mlp_b32 ... cnn_b256 (issue #12): the trainers at other batch sizes, so that the speed-up
  # is not tuned to one.
  # lstm_b128 (issue #28): examples/fashion_mnist_lstm's model against torch::nn::LSTM.
  for c in mlp_b64 mlp_b1024 cnn_b128 mlp_b1024_bf16 cnn_b256_bf16 mlp_b32 mlp_b256 cnn_b32 \
    cnn_b256 lstm_b128; do
    run "train_step_bench $c" "$bin/train_step_bench" "$c"
    if [[ $peers == on ]]; then torch "$c"; fi
  done
  # Issue #27: the bundled trainers as a user runs them (whole epochs: reshuffled, batches
  # gathered), and LibTorch doing the same work (libtorch_bench trainer_*), for CASE:EPOCHS
  # epochs each; the figures are the median epoch after the first.
  for case_epochs in mlp_b64:4 mlp_b256:4 mlp_b1024:6 cnn_b32:2 cnn_b128:2; do
    c=${case_epochs%:*} trainer_epochs=${case_epochs#*:}
    batch=${c#*_b} model=${c%_b*}
    run "trainer $c" --trainer "$c" "$build/examples/fashion_mnist_$model" \
      --batch_size="$batch" --epochs="$trainer_epochs" --verbose=0
    if [[ $peers == on ]]; then torch "trainer_$c"; fi
    # The independent program as its README runs it: 2 OpenMP threads, OpenBLAS's OpenMP build.
    if [[ -n $independent ]]; then
      blas=(); [[ -e $openmp_blas/libblas.so.3 ]] && blas=("LD_LIBRARY_PATH=$openmp_blas")
      run "independent $c" --independent "$c" env OMP_NUM_THREADS=2 "${blas[@]}" \
        "$independent" "$model" "$batch" "$trainer_epochs" 1
    fi
  done
  # Model::fit under the reference interpreter, for the public API's compiled/interpreted ratio.
  run "train_step_bench mlp_b64 KILN_INTERPRET=1" --rename kiln_:interpreted_kiln_ \
    env KILN_INTERPRET=1 "$bin/train_step_bench" mlp_b64
  # Where each trainer's fit() time goes (issue #12): GEMM/conv, fused loops, other kernels,
  # the step's host work, and outside the step (input pipeline, fit's loop).
  run step_breakdown_bench "$bin/step_breakdown_bench"
  run compile_bench "$bin/compile_bench"
  # Issue #28: a compiled scan's per-step cost against the same body stepped from a host loop.
  run scan_overhead_bench "$bin/scan_overhead_bench"
  # Issue #29: kiln-serve's REST and gRPC APIs under 1, 8 and 64 closed-loop clients on loopback.
  run serve_bench "$bin/serve_bench"
  # Issue #32: int8 and float lite files against each other and against libkiln's predict.
  run lite_bench "$bin/lite_bench"
  run sgemm_bench "$bin/sgemm_bench"
  run lowp_gemm_bench "$bin/lowp_gemm_bench"
  if [[ $peers == on ]]; then torch bf16_gemm_2048; fi
  run pipeline_bench "$bin/pipeline_bench"
  run fit_pipeline_bench "$bin/fit_pipeline_bench"
  # Kiln's MPI all-reduce vs a raw MPI_Allreduce, 2 and 4 ranks (more ranks than cores here:
  # --oversubscribe; mpirun refuses root without --allow-run-as-root).
  if [[ -x $bin/allreduce_vs_mpi ]] && command -v mpirun >/dev/null; then
    as_root=(); [[ $(id -u) -eq 0 ]] && as_root=(--allow-run-as-root)
    for np in 2 4; do
      run "allreduce_vs_mpi np$np" mpirun "${as_root[@]}" --oversubscribe -np "$np" \
        "$bin/allreduce_vs_mpi"
    done
    # The MLP step: 2 workers of 1 thread against 1 worker of 2 threads, same global batch.
    run "mlp_2workers_step_vs_1 np1" env KILN_NUM_THREADS=2 "$bin/mlp_2workers_step_vs_1"
    run "mlp_2workers_step_vs_1 np2" mpirun "${as_root[@]}" --oversubscribe -np 2 \
      -x KILN_NUM_THREADS=1 "$bin/mlp_2workers_step_vs_1"
  fi
  if [[ $peers == on ]]; then torch eltwise_chain eltwise_compute_chain; fi
done

peer_desc=""
if [[ $peers == on ]]; then
  peer_desc="LibTorch $(dpkg-query -W -f='${Version}' libtorch-dev), 2 intra-op threads, "
  [[ -e $openmp_blas/libblas.so.3 ]] && peer_desc+="OpenBLAS OpenMP build sharing its pool" ||
    peer_desc+="OPENBLAS_NUM_THREADS=1"
  peer_desc+=", the better of OMP_WAIT_POLICY default and passive in each round"
  [[ -n $independent ]] &&
    peer_desc+="; independent program $independent (2 OpenMP threads) on the trainer cases"
fi
python3 "$root/benchmarks/report.py" "$runs" "$root/benchmarks/results.json" \
  --rounds "$rounds" --max-other-cores "$max_other" --peers "$peer_desc"
