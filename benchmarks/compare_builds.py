#!/usr/bin/env python3
"""Before/after: runs the same benchmark programs from two build trees alternately and prints,
for every RESULT key both print, after / before as the median over rounds with its range.

  benchmarks/compare_builds.py BEFORE_BUILD AFTER_BUILD [--rounds N] [--env K=V ...] PROGRAM...

A PROGRAM is a path under the build tree's benchmarks/ folder with its arguments, quoted as one
word ("train_step_bench mlp_b64"). Rounds alternate which tree runs first, so drift in the
machine's state falls on both. --env sets a variable for the AFTER runs only (KILN_ONEDNN=0 to
attribute a change to a path). Keys naming _ms, _us or _bytes are smaller-is-better; the
ratio printed is always after / before of the figure as printed, and the table says which way
is better. The load average before and after each round is printed: figures taken while other
processes ran are not comparable. So are the CPU model and each tree's KILN_NATIVE setting (from
its CMakeCache.txt).
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys

RESULT = re.compile(r"^RESULT (\S+)=([-+0-9.eE]+)\s*$")


def run(build, program, env):
    argv = shlex.split(program)
    argv[0] = os.path.join(build, "benchmarks", argv[0])
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    results = {}
    for line in out.splitlines():
        m = RESULT.match(line)
        if m:
            results[m.group(1)] = float(m.group(2))
    return results


def describe(build):
    """KILN_NATIVE as the tree's CMakeCache.txt has it."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("KILN_NATIVE:"):
                    return "KILN_NATIVE=" + line.strip().split("=", 1)[1]
    except OSError:
        pass
    return "KILN_NATIVE unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("programs", nargs="+")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--env", action="append", default=[])
    a = p.parse_args()
    after_env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        after_env[k] = v
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; before {a.before} ({describe(a.before)}), "
          f"after {a.after} ({describe(a.after)})", file=sys.stderr)
    ratios = {}  # key -> list of after/before
    values = {}  # key -> (before list, after list)
    for r in range(a.rounds):
        load0 = os.getloadavg()[0]
        for program in a.programs:
            order = [("before", a.before, os.environ), ("after", a.after, after_env)]
            if r % 2:
                order.reverse()
            got = {}
            for name, build, env in order:
                got[name] = run(build, program, env)
            for key in sorted(set(got["before"]) & set(got["after"])):
                b, f = got["before"][key], got["after"][key]
                if b:
                    ratios.setdefault(key, []).append(f / b)
                values.setdefault(key, ([], []))
                values[key][0].append(b)
                values[key][1].append(f)
        print(f"round {r + 1}: load average {load0:.2f} -> {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(f"{'key':48} {'after/before':>14} {'range':>15} {'before':>12} {'after':>12}  better")
    for key in sorted(ratios):
        rs = ratios[key]
        b, f = values[key]
        better = "lower" if re.search(r"(_ms|_us|_bytes)(_|$)|^compile_ms", key) else "higher"
        print(f"{key:48} {statistics.median(rs):14.3f} {min(rs):7.3f}-{max(rs):<7.3f} "
              f"{statistics.median(b):12.4g} {statistics.median(f):12.4g}  {better}")


if __name__ == "__main__":
    main()
