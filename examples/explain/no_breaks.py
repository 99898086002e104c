"""A small MLP that ptc captures as one whole graph: no breaks, no recompiles.

    ptexplain examples/explain/no_breaks.py
"""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).eval()
    compiled = torch.compile(model)
    x = torch.randn(8, 16)
    with torch.no_grad():
        for _ in range(3):
            y = compiled(x)
        ok = torch.allclose(y, model(x), atol=1e-5)
    print("output", tuple(y.shape), "matches eager:", ok)


if __name__ == "__main__":
    main()
