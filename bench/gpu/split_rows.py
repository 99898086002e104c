"""Times reductions of few, long rows on the GPU: ptc with split rows (the
default) and without (PTC_CUDA_SPLIT_ROWS=0), with its reductions' 16-byte
vector loads (the default) and without (ptc-scalar: PTC_CUDA_RED_VECTOR=0),
eager torch and, with
--inductor, torch.compile. The cases are resnet50's BatchNorm training
statistics over NCHW activations (bf16 [32, C, H, W] into f32 mean and
variance per channel: 64 channels of 32*112*112 elements in the first
layer) and its backward's two channel sums, and plain sums of a few rows of
millions of elements.

    python3 bench/gpu/split_rows.py [--inductor] [--reps N]

Prints one line per case: microseconds of GPU kernel time per call
(torch.profiler over N calls after a warm-up; column_sums.py's timing) and
whether ptc's results equal eager's within bf16/f32 tolerance. Under a
minute without --inductor.
"""
import argparse

import torch

from column_sums import table


def bn_stats(x):
    return torch.var_mean(x.float(), dim=(0, 2, 3), unbiased=False)


def bn_backward_sums(g, x):
    gf = g.float()
    return gf.sum((0, 2, 3)), (gf * x.float()).sum((0, 2, 3))


def row_sums(x):
    return x.float().sum(1)


def cases(dev):
    bf = torch.bfloat16
    for c, hw in ((64, 112), (64, 56), (128, 56), (256, 28)):
        x = torch.randn(32, c, hw, hw, device=dev, dtype=bf)
        yield "BN stats bf16 [32,%d,%d,%d]" % (c, hw, hw), bn_stats, (x,)
        yield "BN bwd sums bf16 [32,%d,%d,%d]" % (c, hw, hw), bn_backward_sums, (
            torch.randn_like(x), x)
    for rows, n in ((3, 1000000), (1, 4194304), (7, 999983)):
        yield "sum f32 [%d,%d]" % (rows, n), row_sums, (torch.randn(rows, n, device=dev),)
        yield "sum bf16 [%d,%d]" % (rows, n), row_sums, (
            torch.randn(rows, n, device=dev, dtype=bf),)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    settings = [("ptc", {}), ("ptc-nosplit", {"PTC_CUDA_SPLIT_ROWS": "0"}),
                ("ptc-scalar", {"PTC_CUDA_RED_VECTOR": "0"})]
    table(cases, settings, a.reps, a.inductor)


if __name__ == "__main__":
    main()
