"""A small model with real graph breaks, written for torch.compile.

    ptexplain examples/explain/model_with_breaks.py

runs it with ptc (torch.compile is routed to ptc.compile) and explains the
breaks: a Python branch on a tensor value inside a helper, a print, a .item()
and a torch op ptc has no op for. It also runs as `python3 model_with_breaks.py`,
and `ptexplain --entry examples/explain/model_with_breaks.py:Model` explains
one model called with example_inputs().
"""
import torch
from torch import nn


def stabilize(h):
    if h.abs().mean() > 10:  # a branch on a tensor value
        h = h * 0.1
    return h


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Model(nn.Module):
    def __init__(self, dim=64, classes=10):
        super().__init__()
        self.block1 = Block(dim)
        self.block2 = Block(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = stabilize(self.block1(x))
        x = self.block2(x)
        print("features", tuple(x.shape))  # I/O inside the model
        scale = x.std().item()  # a Python number from a tensor
        logits = self.head(x / scale)
        top = torch.logcumsumexp(logits, -1)[:, -1]  # no ptc op for logcumsumexp
        return logits - top[:, None], top


def example_inputs():
    torch.manual_seed(0)
    return (torch.randn(32, 64),)


def main():
    torch.manual_seed(0)
    model = Model().eval()
    compiled = torch.compile(model)
    (x,) = example_inputs()
    with torch.no_grad():
        for _ in range(5):
            logits, best = compiled(x)
    print("logits", tuple(logits.shape), "best", round(float(best.sum()), 3))


if __name__ == "__main__":
    main()
