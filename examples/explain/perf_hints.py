"""No graph breaks, but slow spots: ptexplain's performance hints.

    ptexplain examples/explain/perf_hints.py

A float16 round trip that only loses precision, and a model called with
grad mode on, so its graph needs gradients and runs through torch ops
instead of ptc's fused kernels. (An unfused reduction is shown by
model_with_breaks.py and recompile_storm.py.)
"""
import torch
from torch import nn


def normalize(x):
    y = x.to(torch.float16).to(torch.float32)  # a dtype round trip
    return y / y.abs().sum()


def main():
    torch.manual_seed(0)
    f = torch.compile(normalize)
    model = torch.compile(nn.Linear(16, 4))
    x = torch.randn(8, 16)
    for _ in range(2):
        y = f(x)
        z = model(x)  # grad mode is on and the weights require grad
    print("sum", round(float(y.sum()), 4), "grad", z.requires_grad)


if __name__ == "__main__":
    main()
