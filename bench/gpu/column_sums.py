"""Times column sums (reductions over the outer, strided dimension) on the GPU:
ptc with column mode (the default) and without (PTC_CUDA_SPLIT_COLUMNS=0),
eager torch and, with --inductor, torch.compile. The cases are the kernels
of a training step that need it: GPT-2's bias gradients (bf16 [2048, 768]
and [2048, 3072] summed over the tokens, into f32), its LayerNorm weight and
bias gradients (two sums in one kernel, one reading a per-token statistic)
and resnet50's BatchNorm statistics over channels-last activations.

    python3 bench/gpu/column_sums.py [--inductor] [--reps N]

Prints one line per case: microseconds of GPU kernel time per call
(torch.profiler over N calls after a warm-up) and whether ptc's results equal eager's within bf16/f32
tolerance. Well under a minute without --inductor.
"""
import argparse
import os

import torch

import ptc


def bias_grad(g):
    return g.sum(0).float()


def norm_grads(g, x, r):
    gf = g.float()
    return (gf * (x * r)).sum(0), gf.sum(0)


def bn_stats(x):
    xf = x.float()
    return xf.sum((0, 2, 3)), (xf * xf).sum((0, 2, 3))


def cases(dev):
    bf = torch.bfloat16
    yield "bias grad bf16 [2048,768]", bias_grad, (torch.randn(2048, 768, device=dev, dtype=bf),)
    yield "bias grad bf16 [2048,3072]", bias_grad, (torch.randn(2048, 3072, device=dev, dtype=bf),)
    yield "LN grads [2048,768]", norm_grads, (torch.randn(2048, 768, device=dev, dtype=bf),
                                              torch.randn(2048, 768, device=dev),
                                              torch.rand(2048, 1, device=dev) + 0.5)
    for c, hw in ((64, 56), (256, 56), (512, 28), (2048, 7)):
        x = torch.randn(32, c, hw, hw, device=dev, dtype=bf).to(memory_format=torch.channels_last)
        yield "BN stats bf16 NHWC [32,%d,%d,%d]" % (c, hw, hw), bn_stats, (x,)


def time_us(fn, args, reps):
    """GPU time of fn's kernels per call (torch.profiler): a call's host
    overhead exceeds these kernels' few microseconds, so wall time would
    measure the host."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            fn(*args)
        torch.cuda.synchronize()
    total = sum(e.self_device_time_total for e in prof.key_averages()
                if e.device_type == torch.autograd.DeviceType.CUDA)
    return total / reps


def compiled_ptc(fn, split):
    """ptc's compile of a fresh copy of fn with column mode on or off (the
    plan reads PTC_CUDA_SPLIT_COLUMNS when the first call compiles)."""
    os.environ["PTC_CUDA_SPLIT_COLUMNS"] = split
    copy = type(fn)(fn.__code__, fn.__globals__, fn.__name__)
    return ptc.compile(copy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    torch.manual_seed(0)
    head = "%-36s %9s %9s %9s" % ("case (us per call)", "ptc", "ptc-nosplit", "eager")
    print(head + ("  %9s" % "inductor" if a.inductor else "") + "  equal")
    for name, fn, args in cases("cuda"):
        row = []
        want = fn(*args)
        want = want if isinstance(want, tuple) else (want,)
        equal = True
        for split in ("1", "0"):
            f = compiled_ptc(fn, split)
            got = f(*args)
            got = got if isinstance(got, tuple) else (got,)
            for w, o in zip(want, got):
                equal &= torch.allclose(o.float(), w.float(), rtol=2e-2, atol=2e-1)
            row.append(time_us(f, args, a.reps))
            os.environ.pop("PTC_CUDA_SPLIT_COLUMNS")
        row.append(time_us(fn, args, a.reps))
        if a.inductor:
            row.append(time_us(torch.compile(fn), args, a.reps))
        print("%-36s " % name + " ".join("%9.1f" % t for t in row) + "  " + str(equal))


if __name__ == "__main__":
    main()
