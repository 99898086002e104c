"""A script that raises after its compiled model ran: ptexplain prints the
report of what ran, then the traceback, and exits with status 1.

    ptexplain examples/explain/raises.py
"""
import torch


def step(x):
    y = torch.relu(x) * 3
    if y.sum() > 100:  # a break, so the report has something to say
        y = y / 2
    return y


def check(y):
    if y.shape[0] != 2:
        raise ValueError("expected 2 rows, got %d" % y.shape[0])


def main():
    compiled = torch.compile(step)
    for n in (2, 2, 3):
        check(compiled(torch.ones(n, 4)))


if __name__ == "__main__":
    main()
