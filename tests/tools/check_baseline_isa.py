#!/usr/bin/env python3
"""Checks that a portable libkiln.so (KILN_NATIVE=OFF) runs on any x86-64 CPU: no instruction
beyond the baseline x86-64 (SSE2) outside the copies that cpu::dispatch compiles for x86-64-v3
and x86-64-v4 (src/core/cpu_isa.h: kiln::cpu::detail::run_v3<...> and run_v4<...>), and those
copies exist, with AVX-512 in the v4 ones. Exits 1 listing the offending functions.

    check_baseline_isa.py path/to/libkiln.so      (runs objdump -d)
    check_baseline_isa.py --self-test"""
import re
import subprocess
import sys

# Instructions a baseline x86-64 CPU lacks: every VEX/EVEX instruction (AVX, AVX2, FMA,
# AVX-512) starts with 'v'; AVX-512's mask-register instructions with 'k'; then BMI1/2, LZCNT,
# MOVBE, POPCNT and the SSE3/SSSE3/SSE4 instructions of x86-64-v2. (tzcnt is absent on
# purpose: GCC emits `rep bsf` for the baseline, which objdump prints as tzcnt.)
BEYOND_BASELINE = re.compile(
    r"^(v[a-z0-9]+|k(mov|and|andn|or|xor|xnor|not|shiftl|shiftr|test|ortest|add|unpck)[bwdq]\w*"
    r"|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|movbe|popcnt"
    r"|addsubp[sd]|hadd[ps][sd]|hsubp[sd]|lddqu|movddup|movs[hl]dup"
    r"|pshufb|palignr|pabs[bwd]|phadd\w+|phsub\w+|pmaddubsw|pmulhrsw|psign[bwd]"
    r"|ptest|pblendw|pblendvb|blendv?p[sd]|dpp[sd]|insertps|extractps|pextr[bdq]|pinsr[bdq]"
    r"|pmax(sb|sd|ud|uw)|pmin(sb|sd|ud|uw)|pmov[sz]x\w+|pmuldq|pmulld|packusdw|pcmp[eg][qt]q"
    r"|round[ps][sd]|mpsadbw|phminposuw|movntdqa|pcmp[ei]str[im]|crc32\w*)$")
VARIANT = re.compile(r"kiln::cpu::detail::run_v([34])<")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
INSTRUCTION = re.compile(r"^\s+[0-9a-f]+:\s+(?:(?:rep[nz]?|lock|notrack|bnd|data16|addr32|cs|ds)\s+)*"
                         r"([a-z][a-z0-9]*)\b(.*)$")


def check(disassembly):
    """Returns (offenders, variants, v4_with_avx512): offenders maps a baseline function to its
    first instruction beyond the baseline."""
    offenders, variants, v4_with_avx512 = {}, set(), set()
    name, level = None, None
    for line in disassembly.splitlines():
        m = FUNCTION.match(line)
        if m:
            name = m.group(1)
            v = VARIANT.search(name)
            level = v.group(1) if v else None
            if level:
                variants.add(name)
            continue
        m = INSTRUCTION.match(line)
        if not m or name is None:
            continue
        mnemonic, operands = m.group(1), m.group(2)
        if level == "4" and ("%zmm" in operands or re.search(r"%k[0-7]", operands)):
            v4_with_avx512.add(name)
        if level is None and name not in offenders and BEYOND_BASELINE.match(mnemonic):
            offenders[name] = (mnemonic + operands).strip()
    return offenders, variants, v4_with_avx512


def report(offenders, variants, v4_with_avx512):
    ok = True
    v4 = [n for n in variants if VARIANT.search(n).group(1) == "4"]
    print(f"{len(variants)} dispatched copies ({len(v4)} for x86-64-v4, "
          f"{len(v4_with_avx512)} of them with AVX-512 instructions)")
    if offenders:
        ok = False
        print(f"{len(offenders)} functions outside the dispatched copies use instructions beyond "
              "x86-64 (a portable build must not; compile them through cpu::dispatch):")
        for name, insn in sorted(offenders.items())[:40]:
            print(f"  {name}: {insn}")
    if not v4 or not v4_with_avx512:
        ok = False
        print("no x86-64-v4 copy holds an AVX-512 instruction: the dispatched kernels are not "
              "compiled for their levels")
    return ok


def self_test():
    sample = """
0000000000001000 <kiln::ops::baseline_fn(float*)>:
    1000:\tmovups (%rdi),%xmm0
    1004:\trep bsf %rax,%rdx
    1008:\tret
0000000000002000 <void kiln::cpu::detail::run_v4<kiln::ops::{lambda()#1}>(kiln::ops::{lambda()#1} const&)>:
    2000:\tvmovups (%rdi),%zmm0
    2006:\tkmovw %k1,%eax
0000000000003000 <void kiln::cpu::detail::run_v3<kiln::ops::{lambda()#1}>(kiln::ops::{lambda()#1} const&)>:
    3000:\tvfmadd132ps (%rdi),%ymm1,%ymm0
"""
    offenders, variants, avx512 = check(sample)
    assert not offenders and len(variants) == 2 and len(avx512) == 1, (offenders, variants, avx512)
    leaked = sample + """
0000000000004000 <std::vector<float>::_M_fill_insert(float*, unsigned long, float const&)>:
    4000:\tvbroadcastss (%rdx),%ymm0
0000000000005000 <kiln::ops::popcount(unsigned long)>:
    5000:\tpopcnt %rdi,%rax
"""
    offenders, _, _ = check(leaked)
    assert set(offenders) == {"std::vector<float>::_M_fill_insert(float*, unsigned long, float const&)",
                              "kiln::ops::popcount(unsigned long)"}, offenders
    assert not report({}, set(), set())  # no copies at all fails too
    print("self-test passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", sys.argv[1]],
                         capture_output=True, text=True, check=True).stdout
    return 0 if report(*check(out)) else 1


if __name__ == "__main__":
    sys.exit(main())
