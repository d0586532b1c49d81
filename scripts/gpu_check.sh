#!/bin/sh
# The GPU machine's one prepared check (#30): unpacks the bundle scripts/pack_gpu_bundle.sh made,
# runs the CUDA tests and the GPU benchmark on the GPU, and writes a summary into DIR.
#   scripts/gpu_check.sh DIR [BUNDLE]     (BUNDLE: build/gpu-bundle.tar.xz)
# Needs only Python 3 (to unpack xz) and the NVIDIA driver; the CUDA toolkit's libdevice is used
# when present, else the bundle's. DIR gets summary.txt, gpu_tests.xml, gpu_tests.log,
# gpu_bench.json and torch_bench.json (the peer: PyTorch on the same GPU, where installed),
# gpu_random.log (the random graph tests on cuda:0).
# Exit status: the tests' (both runs).
set -u
dir=${1:?usage: gpu_check.sh DIR [BUNDLE]}
bundle=${2:-build/gpu-bundle.tar.xz}
mkdir -p "$dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
  "$bundle" "$work" 2>"$dir/unpack.log" || tar -C "$work" -xJf "$bundle" || {
  echo "could not unpack $bundle"; cat "$dir/unpack.log"; exit 2; }
kiln=$work/kiln
# The bundle's libraries, then the CUDA toolkit's (cudart, cuBLASLt, cuDNN and NCCL are the
# machine's), then, for cuDNN where the toolkit lacks it, the copy PyTorch's wheels carry.
cuda=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$kiln/lib:$cuda/lib64:$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
wheel_cudnn=$(python3 -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
[ -n "$wheel_cudnn" ] && [ -d "$wheel_cudnn" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$wheel_cudnn"
if [ -z "${KILN_LIBDEVICE:-}" ]; then
  host=${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc
  if [ -e "$host" ]; then KILN_LIBDEVICE=$host; else KILN_LIBDEVICE=$kiln/lib/libdevice.10.bc; fi
  export KILN_LIBDEVICE
fi
{
  echo "kiln gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/GPU: /'
  else
    echo "GPU: nvidia-smi not found"
  fi
  echo "libdevice: $KILN_LIBDEVICE"
  # Whether the CUDA libraries' plugin loads here (its dlopen error, when not).
  python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1]); print("libkiln_cuda.so: loads")' \
    "$kiln/lib/libkiln_cuda.so" 2>&1 | tail -1
} > "$dir/summary.txt"
start=$(date +%s)
# The CUDA tests but the random graphs on a host grid (kiln_gpu_tests holds no random graph
# tests for its child to run; kiln_tests runs them on every machine).
"$kiln/bin/kiln_gpu_tests" --gtest_output="xml:$dir/gpu_tests.xml" \
  --gtest_filter='CudaCodegen*:CudaBlas*:DeviceMemory*:CudaGpu.*:CudaGridOnHost.Every*:CudaGridOnHost.AGrid*:DeviceProgram*:DeviceTensors*:DeviceControlFlow*:SplitReductions*:DeviceGather*:DeviceScatterAdd*' \
  > "$dir/gpu_tests.log" 2>&1
status=$?
{
  echo "kiln_gpu_tests: exit $status in $(( $(date +%s) - start )) s"
  sed -n '/^\[==========\] .* ran/,$p' "$dir/gpu_tests.log"
  grep -B1 '^\[  SKIPPED \] .*(' "$dir/gpu_tests.log" | grep -v '^\[\|^--' | sort -u |
    sed 's/^/skip reason: /'
} >> "$dir/summary.txt"
# Every op's result on the GPU against the interpreter on random inputs: the compiled-graph
# random tests (outputs, kernel ops, gradients; 30 graphs a shard) with every compile() a device
# program on cuda:0. A failure prints its graph shrunk to a reproducer.
start=$(date +%s)
KILN_TEST_ONLY_DEVICE=cuda KILN_RANDOM_GRAPHS_PER_SHARD=30 "$kiln/bin/kiln_gpu_tests" \
  --gtest_filter='Shard/CompiledRandomGraphs.*:Shard/CompiledRandomKernelOpGraphs.*:Shard/CompiledRandomGradients.*:CompiledRandomGraphsConcurrently.*' \
  > "$dir/gpu_random.log" 2>&1
random_status=$?
{
  echo "random graphs on cuda:0: exit $random_status in $(( $(date +%s) - start )) s"
  sed -n '/^\[==========\] .* ran/,$p' "$dir/gpu_random.log"
} >> "$dir/summary.txt"
[ "$status" -eq 0 ] && status=$random_status
"$kiln/bin/gpu_bench" > "$dir/gpu_bench.json" 2> "$dir/gpu_bench.log"
echo "gpu_bench: exit $?: $(cat "$dir/gpu_bench.log")" >> "$dir/summary.txt"
cat "$dir/gpu_bench.json" >> "$dir/summary.txt"
# The peer, in the same run: torch.matmul on the same shapes (bf16; f32 with TF32 off), timed
# with CUDA events over 10 launches, 7 trials; skipped where PyTorch is absent.
python3 - > "$dir/torch_bench.json" 2>> "$dir/summary.txt" <<'PY'
import json, statistics
try:
    import torch
except ImportError:
    raise SystemExit("torch peer: PyTorch is not installed")
if not torch.cuda.is_available():
    raise SystemExit("torch peer: no GPU")
torch.backends.cuda.matmul.allow_tf32 = False
n = 8192
for dt in (torch.bfloat16, torch.float32):
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    torch.matmul(a, b)
    torch.cuda.synchronize()
    runs = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        runs.append(2 * n**3 / (start.elapsed_time(end) / 10 / 1e3) / 1e12)
    name = "bf16" if dt == torch.bfloat16 else "f32"
    print(json.dumps({f"torch_matmul_{name}_8192_tflops": {
        "median": round(statistics.median(runs), 1), "min": round(min(runs), 1),
        "max": round(max(runs), 1)}, "torch": torch.__version__}))
PY
# The MLP step's peer: the same model and batch in PyTorch (eager, then torch.compile where it
# works), its data and parameters resident on the GPU (PyTorch at its best; Kiln's keep theirs
# there too).
python3 - >> "$dir/torch_bench.json" 2>> "$dir/summary.txt" <<'PY'
import json, statistics, time
try:
    import torch
except ImportError:
    raise SystemExit("torch MLP peer: PyTorch is not installed")
if not torch.cuda.is_available():
    raise SystemExit("torch MLP peer: no GPU")
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                            torch.nn.Linear(128, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(1024, 784, device="cuda")
y = torch.randint(0, 10, (1024,), device="cuda")
loss_fn = torch.nn.CrossEntropyLoss()
def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss
def ms_per_step(fn, steps=20):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps
for name, fn in (("eager", step), ("compile", None)):
    if fn is None:
        try:
            fn = torch.compile(step)
            fn()
        except Exception as e:  # noqa: BLE001 (reported, not fatal)
            print(json.dumps({"torch_mlp_step_b1024_compile": f"failed: {e}"[:300]}))
            continue
    ms_per_step(fn, 5)
    runs = [ms_per_step(fn) for _ in range(7)]
    print(json.dumps({f"torch_mlp_step_b1024_{name}_ms": {
        "median": round(statistics.median(runs), 3), "min": round(min(runs), 3),
        "max": round(max(runs), 3)}}))
PY
# The CNN step's peer (gpu_bench's fourth measurement): the trainer's model in PyTorch eager,
# channels-last, batch 256, data resident on the GPU.
python3 - >> "$dir/torch_bench.json" 2>> "$dir/summary.txt" <<'PY'
import json, statistics, time
try:
    import torch
except ImportError:
    raise SystemExit("torch CNN peer: PyTorch is not installed")
if not torch.cuda.is_available():
    raise SystemExit("torch CNN peer: no GPU")
torch.manual_seed(1)
torch.backends.cudnn.allow_tf32 = False
nn = torch.nn
model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                      nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 5 * 5, 128),
                      nn.ReLU(), nn.Linear(128, 10)).cuda().to(memory_format=torch.channels_last)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.rand(256, 1, 28, 28, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 10, (256,), device="cuda")
loss_fn = nn.CrossEntropyLoss()
def step():
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()
def ms_per_step(steps=8):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps
ms_per_step(3)
runs = [ms_per_step() for _ in range(5)]
print(json.dumps({"torch_cnn_step_b256_eager_ms": {
    "median": round(statistics.median(runs), 3), "min": round(min(runs), 3),
    "max": round(max(runs), 3)}}))
PY
cat "$dir/torch_bench.json" >> "$dir/summary.txt"
cat "$dir/summary.txt"
exit "$status"
