"""A recompile storm: a loop feeds a new shape on every call.

    ptexplain examples/explain/recompile_storm.py

dynamic=False pins every shape, so each new length compiles a new graph
until the recompile limit (8) is hit and the function runs eagerly.
"""
import torch


def scale_rows(x):
    return torch.softmax(x * 2.0, dim=-1).sum(dim=0)


def main():
    compiled = torch.compile(scale_rows, dynamic=False)
    total = 0.0
    for n in range(1, 13):
        total += float(compiled(torch.ones(n, 4)).sum())
    print("total", round(total, 3))


if __name__ == "__main__":
    main()
