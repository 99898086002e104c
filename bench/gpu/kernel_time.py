#!/usr/bin/env python3
"""GPU kernel time per forward (a benchmark, not a test): for each model and
dtype of bench/gpu/run.py, the time the GPU spends in kernels during one
forward, under torch.profiler — the sum over CUDA kernels (the profiler's
annotations and memset/memcpy left out), the part in generated kernels
(ptc's `ptc_*`, Inductor's `triton_*`) and the kernel count; three rounds
of five forwards, the median round. Unlike the wall time of run.py, which on
a busy host measures the host as much as the GPU, this is what the kernels
cost, so a change to the generated code shows in it whatever the host does.

    python3 bench/gpu/kernel_time.py [--compilers ptc,inductor]
                                     [--models resnet50:fp32,gpt2:bf16,...]

Run it on two trees in one device call (PTC_BUILD_DIR and PYTHONPATH
pointing at each) to compare them.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import autocast_ctx, build_model  # noqa: E402

SKIP = ("Torch-Compiled Region", "## Call", "CompiledFunction", "Memcpy", "Memset")
GENERATED = ("ptc_", "triton")


def one_round(call):
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            call()
        torch.cuda.synchronize()
    ev = [e for e in p.events() if e.device_type.name == "CUDA" and not e.name.startswith(SKIP)]
    total = sum(e.device_time for e in ev) / 5
    generated = sum(e.device_time for e in ev if e.name.startswith(GENERATED)) / 5
    return total, generated, len(ev) / 5


def measure(compiler, name, dtype):
    import torch
    import ptc
    model, args = build_model(name)
    compiled = ptc.compile(model) if compiler == "ptc" else torch.compile(model)

    def call():
        with torch.no_grad(), autocast_ctx(dtype):
            compiled(*args)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    return sorted(one_round(call) for _ in range(3))[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compilers", default="ptc,inductor")
    ap.add_argument("--models", default="resnet50:fp32,resnet50:bf16,mobilenet_v3_large:fp32,"
                    "mobilenet_v3_large:bf16,convnext_tiny:fp32,bert_base:bf16,gpt2:bf16")
    a = ap.parse_args()
    for spec in a.models.split(","):
        name, dtype = spec.split(":")
        for compiler in a.compilers.split(","):
            total, generated, n = measure(compiler, name, dtype)
            print("%-9s %-26s total %8.1f us  generated %8.1f us  kernels %d"
                  % (compiler, spec, total, generated, n), flush=True)


if __name__ == "__main__":
    main()
