"""Times column sums (reductions over the outer, strided dimension) on the GPU:
ptc with column mode (the default) and without (PTC_CUDA_SPLIT_COLUMNS=0),
eager torch and, with --inductor, torch.compile. The cases are the kernels
of a training step that need it: GPT-2's bias gradients (bf16 [2048, 768]
and [2048, 3072] summed over the tokens, into f32), its LayerNorm weight and
bias gradients (two sums in one kernel, one reading a per-token statistic)
and resnet50's BatchNorm statistics over channels-last activations.

    python3 bench/gpu/column_sums.py [--inductor] [--reps N] [--tiles 4,8]

Prints one line per case: microseconds of GPU kernel time per call
(torch.profiler over N calls after a warm-up) and whether ptc's results equal eager's within bf16/f32
tolerance. --tiles adds a ptc column per tile width (PTC_CUDA_COLUMN_TILE).
Well under a minute without --inductor.
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


def compiled_ptc(fn, args, env):
    """ptc's compile of a fresh copy of fn, and its outputs: the first call,
    which compiles, runs under env (the plan reads PTC_CUDA_SPLIT_COLUMNS
    and PTC_CUDA_COLUMN_TILE then)."""
    f = ptc.compile(type(fn)(fn.__code__, fn.__globals__, fn.__name__))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        out = f(*args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    return f, out if isinstance(out, tuple) else (out,)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--tiles", default="", help="comma-separated PTC_CUDA_COLUMN_TILE values")
    a = ap.parse_args()
    settings = [("ptc", {}), ("ptc-nosplit", {"PTC_CUDA_SPLIT_COLUMNS": "0"})]
    settings += [("ptc-tile%s" % t, {"PTC_CUDA_COLUMN_TILE": t}) for t in a.tiles.split(",") if t]
    table(cases, settings, a.reps, a.inductor)


def table(cases, settings, reps, inductor):
    """Prints the table: per case of cases("cuda") (name, fn, args), the
    microseconds of ptc under each of settings (name, environment), of
    eager and, with inductor, of torch.compile; and whether ptc's results
    equal eager's."""
    names = [n for n, _ in settings] + ["eager"] + (["inductor"] if inductor else [])
    print("%-36s " % "case (us of kernels per call)" + " ".join("%11s" % n for n in names) +
          "  equal")
    torch.manual_seed(0)
    for name, fn, args in cases("cuda"):
        want = fn(*args)
        want = want if isinstance(want, tuple) else (want,)
        row, equal = [], True
        for _, env in settings:
            f, got = compiled_ptc(fn, args, env)
            for w, o in zip(want, got):
                equal &= torch.allclose(o.float(), w.float(), rtol=2e-2, atol=2e-1)
            row.append(time_us(f, args, reps))
        row.append(time_us(fn, args, reps))
        if inductor:
            row.append(time_us(torch.compile(fn), args, reps))
        print("%-36s " % name + " ".join("%11.1f" % t for t in row) + "  " + str(equal))


if __name__ == "__main__":
    main()
