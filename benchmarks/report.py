#!/usr/bin/env python3
"""Turns the `RESULT key=value` lines of benchmarks/run.sh's rounds into results.json and a table.

Each raw figure keeps its best over the rounds (the least time for keys ending in _ms or _us, the
most otherwise); each ratio is computed from the best raw figures, which it lists under "raw".
"""
import argparse
import json
import os
import platform
import re
from datetime import datetime, timezone


def ratio(target, num, den, *also):
    """num / den, with the raw keys it reads (and `also`, shown beside it)."""
    return (target, lambda r: r[num] / r[den], [num, den, *also])


# key: (target, how to compute it from the raw figures, the raw keys it reads)
RATIOS = {
    "mlp_b64_vs_libtorch": ratio(
        ">= 3", "kiln_mlp_b64_examples_per_s", "torch_mlp_b64_examples_per_s"),
    "mlp_b1024_vs_libtorch": ratio(
        ">= 1.3", "kiln_mlp_b1024_examples_per_s", "torch_mlp_b1024_examples_per_s"),
    "cnn_b128_vs_libtorch": ratio(
        ">= 1.5", "kiln_cnn_b128_examples_per_s", "torch_cnn_b128_examples_per_s"),
    # The traced train-step graph: compiler::Executable against Graph::run (compile_bench).
    "mlp_b64_compiled_vs_interpreted": ratio(
        "> 1", "mlp_b64_interpreted_us", "mlp_b64_compiled_us"),
    # The same through Model::fit: default path against KILN_INTERPRET=1.
    "fit_mlp_b64_compiled_vs_interpreted": ratio(
        "> 1", "kiln_mlp_b64_examples_per_s", "interpreted_kiln_mlp_b64_examples_per_s"),
    "eltwise_chain_gbps_vs_triad": ratio(
        ">= 0.75", "eltwise_chain_kernel_gbps", "triad_gbps", "eltwise_chain_executable_gbps"),
    "eltwise_chain_vs_libtorch": ratio(
        "", "torch_eltwise_chain_ms", "kiln_eltwise_chain_kernel_ms",
        "kiln_eltwise_chain_eager_ms"),
    "sgemm_1024_vs_eigen": (
        ">= 0.95",
        lambda r: r["kiln_sgemm_1024_gflops"] / max(r["eigen_contraction_sgemm_1024_gflops"],
                                                    r["eigen_product_sgemm_1024_gflops"]),
        ["kiln_sgemm_1024_gflops", "eigen_contraction_sgemm_1024_gflops",
         "eigen_product_sgemm_1024_gflops"]),
    "compile_ms_mlp_train_step": (
        "< 300", lambda r: r["compile_ms_mlp_train_step"],
        ["compile_ms_mlp_train_step", "compile_ms_mlp_train_step_warm"]),
    "arena_peak_vs_live_min": ratio(
        "", "arena_planned_peak_bytes", "arena_live_min_bytes"),
    # The input pipeline (pipeline_bench): TFRecord -> map(parse one record, n) -> batch.
    "pipeline_map2_vs_map1": ratio(
        ">= 1.7", "pipeline_map2_examples_per_s", "pipeline_map1_examples_per_s"),
    # Model::fit's steady-state step time from a pipeline against pre-loaded tensors
    # (fit_pipeline_bench): the vectorized pipeline, and the TFRecord trainer's shuffled one
    # (whose whole epoch also waits for its shuffle buffer to fill).
    "fit_vectorized_pipeline_vs_tensors": ratio(
        "<= 1.05", "fit_vectorized_pipeline_step_us", "fit_tensors_step_us",
        "fit_per_record_pipeline_step_us"),
    "fit_trainer_pipeline_vs_tensors": ratio(
        "<= 1.05", "fit_trainer_pipeline_step_us", "fit_shuffled_tensors_step_us",
        "fit_trainer_pipeline_epoch_ms", "fit_shuffled_tensors_epoch_ms"),
    # The in-memory trainers' from_tensors -> shuffle -> batch -> prefetch.
    "fit_in_memory_pipeline_vs_tensors": ratio(
        "<= 1.05", "fit_sliced_tensors_step_us", "fit_shuffled_tensors_step_us",
        "fit_sliced_tensors_epoch_ms", "fit_shuffled_tensors_epoch_ms"),
}

LINE = re.compile(r"^RESULT (\w+)=(\S+)(?: reason=(.*))?$")


def best_figures(path):
    raw, reasons = {}, {}
    with open(path) as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            key, value, reason = m.groups()
            if value == "null":
                reasons[key] = reason or "not measured"
                continue
            v = float(value)
            lower_is_better = key.endswith("_ms") or key.endswith("_us")
            if key not in raw or (v < raw[key] if lower_is_better else v > raw[key]):
                raw[key] = v
    return raw, reasons


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("lines")
    p.add_argument("output")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--peers", default="")
    a = p.parse_args()
    raw, reasons = best_figures(a.lines)

    results = {
        "meta": {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0], "rounds": a.rounds,
            "peer": a.peers or None,
            "note": "best of the rounds; ratios are Kiln / baseline (higher is better) except "
                    "compile_ms_mlp_train_step and the fit_*_pipeline_vs_tensors step-time "
                    "ratios (lower is better)",
        },
        "raw": raw,
    }
    for key, (target, compute, sources) in RATIOS.items():
        entry = {"value": None, "target": target or None,
                 "raw": {k: raw[k] for k in sources if k in raw}}
        missing = [k for k in sources if k not in raw]
        try:
            entry["value"] = round(compute(raw), 3)
        except KeyError as e:
            name = e.args[0]
            entry["reason"] = reasons.get(key) or reasons.get(name) or (
                f"{name} was not measured" +
                (" (LibTorch peers not built: run.sh --peers)" if name.startswith("torch_") else ""))
        results[key] = entry
        if entry["value"] is not None and missing:
            entry["raw_missing"] = missing

    with open(a.output, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")

    print(f"\n{'figure':36} {'value':>9} {'target':>8}  from (best of {a.rounds} rounds)")
    for key in RATIOS:
        e = results[key]
        value = "null" if e["value"] is None else f"{e['value']:.3g}"
        detail = e.get("reason") or ", ".join(f"{k}={v:.4g}" for k, v in e["raw"].items())
        print(f"{key:36} {value:>9} {e['target'] or '':>8}  {detail}")
    print(f"\nwrote {a.output}")


if __name__ == "__main__":
    main()
