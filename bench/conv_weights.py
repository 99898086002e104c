#!/usr/bin/env python3
"""Convolution weights per call: eager, ptc, ptc with PTC_WEIGHT_CACHE=1,
ptc without the BatchNorm fold (PTC_FOLD_CONV=0) and on CUDA ptc with the
convolutions' biases left to torch (PTC_CONV_BIAS_EPILOGUE=0; a benchmark, not a test).

For each model and dtype (fp32, or bf16 under autocast), in one process:
each contender's time per call (interleaved rounds, the median of the
rounds' means; CUDA synchronised) and, from one call under torch.profiler,
the number of aten::clone calls per call (torch's copies of weights into
the input's layout, and ptc's own copies) and of convolutions. With kept
channels-last weights (weight_cache.c) ptc makes no clone per call in fp32;
under autocast ptc writes the cast weights channels-last (layout.c), so
neither contender's convolutions clone them. ptc folds each eval
BatchNorm into its convolution's weight (fold_conv.c), a kernel a call that
writes the folded weight channels-last; PTC_FOLD_CONV=0 keeps the BatchNorm
kernels and hands the convolutions the module's weights.

    python3 bench/conv_weights.py [--device cuda] [--models resnet50,...]
                                  [--dtypes fp32,bf16] [--batch 32] [--size 224]
                                  [--rounds 10] [--calls 10] [--threads 2]
"""
import argparse
import statistics
import time

from cpu_models import with_env  # bench/: the environment of the compiling first call


def build(name, device):
    import torch
    import torchvision
    torch.manual_seed(0)
    return getattr(torchvision.models, name)().eval().to(device)


def counts(fn, x):
    """(clones, convolutions) of one call, from torch.profiler."""
    import torch
    with torch.profiler.profile() as p:
        fn(x)
    ev = {e.key: e.count for e in p.key_averages()}
    return ev.get("aten::clone", 0), ev.get("aten::convolution", 0)


def run(name, dtype, args):
    import torch
    import ptc
    model = build(name, args.device)
    x = torch.randn(args.batch, 3, args.size, args.size, device=args.device)
    fns = {"eager": model, "ptc": ptc.compile(model),
           "ptc, PTC_WEIGHT_CACHE=1": with_env(ptc.compile(model), "PTC_WEIGHT_CACHE", "1"),
           }
    fns["ptc, PTC_FOLD_CONV=0"] = with_env(ptc.compile(model), "PTC_FOLD_CONV", "0")
    if args.device == "cuda":  # biases added by the kernel after each convolution, or by torch
        fns["ptc, PTC_CONV_BIAS_EPILOGUE=0"] = with_env(ptc.compile(model), "PTC_CONV_BIAS_EPILOGUE", "0")
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=dtype == "bf16")
    ms = {k: [] for k in fns}
    with torch.no_grad(), autocast:
        want = model(x).float()
        err = {k: ((f(x).float() - want).abs().max() / want.abs().max()).item()
               for k, f in fns.items()}
        seen = {k: counts(f, x) for k, f in fns.items()}
        order = list(fns)
        for r in range(args.rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:
                sync()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fns[k](x)
                sync()
                ms[k].append((time.perf_counter() - t0) * 1e3 / args.calls)
    for k in fns:
        clones, convs = seen[k]
        print("| %s | %s | %s | %.2f | %d | %d | %.1e |" % (
            name, dtype, k, statistics.median(ms[k]), clones, convs, err[k]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="resnet50,convnext_tiny,mobilenet_v3_large")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    print("| model | dtype | contender | ms per call (median of rounds) | aten::clone per call "
          "| aten::convolution per call | rel err |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            run(name, dtype, args)


if __name__ == "__main__":
    main()
