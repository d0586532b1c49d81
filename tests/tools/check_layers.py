#!/usr/bin/env python3
"""Checks Kiln's include graph against its layer order (docs/architecture.md, "Layers and
folders"): a file may include only files of its own layer or a lower one. Run with the
repository root as the argument; exits 1 listing every inversion.

    core < runtime < ops < compiler < distribute < api (autodiff, function < optim < io, data < nn)
         < quantize (kiln::lite::convert) < interop (ONNX) < serving

and beside them the small runtime, lite (libkiln_lite), which includes only its own files and
kiln/error.h (header-only): it links nothing of libkiln.

and the programs on top (tools, examples, tests, benchmarks, fuzz) may include anything.
Two more rules: the compiler outside a backend (compiler/cpu/, compiler/cuda/) includes it only
from compiler/executable.cc, the one file that names a backend (a backend never includes the
other; both build on compiler/llvm_ir/); and every public header
(include/kiln/) has a row of its own below, none falls back to a default layer.
--self-test checks that an inverted include, a backend include and a header without a row are
reported."""
import os
import re
import sys

# Layer of a repository path, by the first rule whose prefix matches. Public headers belong to
# the layer that implements them.
RULES = [
    ("include/kiln/nn.h", "api.nn"), ("include/kiln/nn/", "api.nn"),
    ("include/kiln/kiln.h", "api.nn"),
    ("include/kiln/data/", "api.data"), ("include/kiln/io/", "api.io"),
    ("include/kiln/optim.h", "api.optim"),
    ("include/kiln/function.h", "api.function"), ("include/kiln/autodiff.h", "api.function"),
    ("include/kiln/control_flow.h", "api.function"),
    ("include/kiln/ops.h", "ops"),
    ("include/kiln/profiler.h", "api.function"),
    ("include/kiln/distribute/", "distribute"),
    ("include/kiln/onnx.h", "interop"), ("include/kiln/hub.h", "interop"),
    *((f"include/kiln/{name}.h", "core") for name in (
        "attrs", "device", "dtype", "elemental", "error", "execution_mode", "graph",
        "op_registry", "ref", "shape", "tensor", "variable", "version", "warning")),
    ("src/core/", "core"), ("runtime/", "runtime"), ("ops/", "ops"), ("compiler/", "compiler"),
    ("distribute/", "distribute"),
    ("src/api/autodiff/", "api.function"), ("src/api/function/", "api.function"),
    ("src/api/optim/", "api.optim"), ("src/api/io/", "api.io"), ("src/api/data/", "api.data"),
    ("src/api/nn/", "api.nn"), ("src/version.cc", "core"), ("interop/", "interop"),
    ("serving/", "serving"),
    ("include/kiln/lite.h", "lite"), ("lite/", "lite"),
    ("include/kiln/lite_convert.h", "quantize"), ("quantize/", "quantize"),
]
ORDER = ["core", "runtime", "ops", "compiler", "distribute", "api.function", "api.optim",
         "api.io", "api.data", "api.nn", "quantize", "interop", "serving"]
# io and data are side by side: neither includes the other... except that the data pipeline
# reads TFRecord files, so data may include io.
RANK = {name: i for i, name in enumerate(ORDER)}
RANK["lite"] = -1  # below everything: libkiln's layers may include it, it includes none of them
LITE_MAY_INCLUDE = {"include/kiln/error.h"}
# The backends, and the files of the compiler (outside them) that may include one. A backend
# never includes another (both build on compiler/llvm_ir/, the target-independent emitter).
BACKEND_DIRS = ("compiler/cpu/", "compiler/cuda/")
BACKEND_INCLUDERS = {"compiler/executable.cc"}
SOURCE_DIRS = ["include", "src", "runtime", "ops", "compiler", "distribute", "interop",
               "serving", "lite", "quantize"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    for prefix, layer in RULES:
        if path == prefix or path.startswith(prefix):
            return layer
    return None


def resolve(include):
    """An include line's repository path: "kiln/x.h" is include/kiln/x.h."""
    if include.startswith("kiln/"):
        return "include/" + include
    return include


def inversions(files):
    """files: {path: text}. Returns ["a includes b (layer x above y)", ...]."""
    out = []
    for path, text in sorted(files.items()):
        mine = layer_of(path)
        if mine is None:
            continue
        for inc in INCLUDE.findall(text):
            target = resolve(inc)
            mine_backend = next((d for d in BACKEND_DIRS if path.startswith(d)), None)
            their_backend = next((d for d in BACKEND_DIRS if target.startswith(d)), None)
            if (path.startswith("compiler/") and their_backend and their_backend != mine_backend
                    and path not in BACKEND_INCLUDERS):
                out.append(f"{path} includes {inc}: only compiler/executable.cc names a backend "
                           "(ask the FusionTarget, compiler/passes/fusion.h)")
                continue
            theirs = layer_of(target)
            if mine == "lite" and theirs not in (None, "lite") and target not in LITE_MAY_INCLUDE:
                out.append(f"{path} includes {inc}: the lite runtime includes only its own files "
                           "and kiln/error.h")
                continue
            if mine == "lite":
                continue
            if theirs is None or theirs == mine:
                continue
            if RANK[theirs] > RANK[mine]:
                out.append(f"{path} includes {inc}: layer {mine} must not include {theirs}")
    return out


def missing_rows(files):
    """Public headers (include/kiln/...) that no rule places in a layer."""
    return [f"{path} has no layer row in check_layers.py's RULES"
            for path in sorted(files) if path.startswith("include/kiln/") and layer_of(path) is None]


def read_tree(root):
    files = {}
    for top in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if name.endswith((".h", ".cc")):
                    full = os.path.join(dirpath, name)
                    with open(full, encoding="utf-8", errors="replace") as f:
                        files[os.path.relpath(full, root)] = f.read()
    files.pop("src/version.cc", None)
    return files


def main():
    if sys.argv[1:2] == ["--self-test"]:
        bad = inversions({"ops/x.cc": '#include "kiln/nn/model.h"\n',
                          "runtime/y.cc": '#include "compiler/z.h"\n',
                          "src/api/io/w.cc": '#include "src/api/nn/functional.h"\n',
                          "ops/fine.cc": '#include "src/core/tensor_impl.h"\n',
                          "compiler/passes/p.cc": '#include "compiler/cpu/fused_kernel.h"\n',
                          "compiler/executable.cc": '#include "compiler/cpu/kernel_cache.h"\n',
                          "compiler/cpu/q.cc": '#include "compiler/cpu/jit.h"\n'
                                                '#include "compiler/llvm_ir/optimize.h"\n',
                          "compiler/cuda/r.cc": '#include "compiler/cpu/jit.h"\n',
                          "compiler/llvm_ir/s.cc": '#include "compiler/cuda/ptx.h"\n',
                          "lite/k.cc": '#include "kiln/tensor.h"\n#include "kiln/error.h"\n',
                          "quantize/c.cc": '#include "lite/builder.h"\n'})
        assert len(bad) == 7, bad
        assert any("compiler/cuda/r.cc" in b for b in bad), bad
        assert any("compiler/llvm_ir/s.cc" in b for b in bad), bad
        assert any("lite/k.cc" in b and "tensor.h" in b for b in bad), bad
        assert any("compiler/passes/p.cc" in b for b in bad), bad
        missing = missing_rows({"include/kiln/new_thing.h": "", "include/kiln/tensor.h": ""})
        assert len(missing) == 1 and "new_thing" in missing[0], missing
        print("check_layers self-test: an inverted include, a backend include, a lite include "
              "of libkiln and a public header without a row are reported")
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    tree = read_tree(root)
    bad = missing_rows(tree) + inversions(tree)
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) against the layer order (see docs/architecture.md)")
        return 1
    print("the include graph follows the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
