#!/usr/bin/env python3
"""Runs one benchmark program and records its figures with the noise it ran under.

The program's output passes through to stdout; its `RESULT key=value` lines, the round, the run's
label and the CPU time that *other* processes used while it ran (all CPUs' busy time from
/proc/stat, less the program's own user and system time from wait4) are appended to --out as one
JSON line. benchmarks/report.py discards runs whose other processes used more than a threshold.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

RESULT = re.compile(r"^RESULT (\w+)=(\S+)(?: reason=(.*))?$")
INFO = re.compile(r"^INFO (\w+)=(.*)$")  # a text fact about the run (the path a kernel took)
# A bundled trainer's last line (examples/common/trainer.h): read under --trainer.
TRAINER_RESULT = re.compile(r"^result: .*\bexamples=(\d+) epoch_seconds=([0-9.,]+)$")
# An epoch line of the independent LibTorch program (../shared/peers/train_torch.cpp): read under
# --independent.
INDEPENDENT_EPOCH = re.compile(r"^epoch (\d+)\s+time ([0-9.]+) s\s+throughput ([0-9.]+) ex/s")


def trainer_results(name, examples, epoch_seconds):
    """A trainer's figures from its result line: examples per second over the epochs after the
    first (the median epoch; the first also traces and compiles the step) and the first
    epoch's seconds."""
    seconds = [float(v) for v in epoch_seconds.split(",")]
    median = statistics.median(seconds[1:] or seconds)
    return {f"kiln_trainer_{name}_examples_per_s": int(examples) / median,
            f"kiln_trainer_{name}_first_epoch_s": seconds[0]}


def independent_results(name, throughputs):
    """The independent program's examples per second: the median epoch after the first (the
    first warms up its allocator and OpenMP pool), as for the trainers."""
    return {f"independent_trainer_{name}_examples_per_s":
            statistics.median(throughputs[1:] or throughputs)}


def busy_cpu_seconds():
    """Seconds of CPU time all processes have used, from /proc/stat's aggregate `cpu` line."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True, help="JSON-lines file to append the run to")
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--label", required=True, help="names the run (program, case, settings)")
    p.add_argument("--rename", default="", help="OLD:NEW prefix rename of the RESULT keys")
    p.add_argument("--trainer", default="",
                   help="NAME: the command is a bundled trainer; its result line gives "
                        "kiln_trainer_NAME_examples_per_s, _first_epoch_s and _peak_rss_mib")
    p.add_argument("--independent", default="",
                   help="NAME: the command is the independent LibTorch program; its epoch lines "
                        "give independent_trainer_NAME_examples_per_s")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command

    busy_before, start = busy_cpu_seconds(), time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    results, reasons, info = {}, {}, {}
    throughputs = []
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        e = INDEPENDENT_EPOCH.match(line.strip()) if a.independent else None
        if e:
            throughputs.append(float(e.group(3)))
            continue
        t = TRAINER_RESULT.match(line.strip()) if a.trainer else None
        if t:
            results.update(trainer_results(a.trainer, *t.groups()))
            continue
        m = RESULT.match(line.strip())
        if not m:
            i = INFO.match(line.strip())
            if i:
                info[i.group(1)] = i.group(2)
            continue
        key, value, reason = m.groups()
        if a.rename:
            old, new = a.rename.split(":")
            if key.startswith(old):
                key = new + key[len(old):]
        if value == "null":
            reasons[key] = reason or "not measured"
        else:
            results[key] = float(value)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    other = max(0.0, busy_cpu_seconds() - busy_before - usage.ru_utime - usage.ru_stime)
    peak_rss_mib = usage.ru_maxrss / 1024  # Linux reports kilobytes
    if a.trainer:
        results[f"kiln_trainer_{a.trainer}_peak_rss_mib"] = round(peak_rss_mib, 1)
    if a.independent and throughputs:
        results.update(independent_results(a.independent, throughputs))
    record = {
        "round": a.round, "label": a.label, "exit_status": os.waitstatus_to_exitcode(status),
        "wall_s": round(wall, 3), "own_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "other_cpu_s": round(other, 3), "peak_rss_mib": round(peak_rss_mib, 1),
        "results": results, "reasons": reasons,
        "info": info,
    }
    with open(a.out, "a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"== {a.label}: {wall:.1f} s wall, other processes used {other:.2f} CPU s "
          f"({other / max(wall, 1e-9):.3f} cores)", file=sys.stderr)
    return record["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
