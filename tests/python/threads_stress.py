"""Compiled calls on several threads while another thread resets ptc.

    python3 tests/python/threads_stress.py [--seconds S] [--threads N]

N worker threads (4 by default) call compiled functions and a compiled
nn.Module with their own shapes and dtypes, each with a graph break (a
resume state) or externs (torch releases the GIL inside them, as it does in
the allocations of outputs and whenever Python code runs), while one more
thread calls ptc.reset() and the per-function _reset() in a loop. Every
result must equal eager's; strict mode (PTC_STRICT=1, set by
test_capture_threads.py) turns a silent fallback into a failure. Prints one
line of counts and exits 0; a crash, a wrong result or an exception exits
non-zero. test_capture_threads.py runs it (under ASan too, against an ASan
build).
"""
import argparse
import sys
import threading
import time

import torch
import ptc

nn = torch.nn


def pointwise(x):
    return (x * 2 + 1).sin().sum(0)


def with_break(x):
    y = x.abs() + 1
    if y.sum() > 0:  # a break on a tensor value: the rest resumes in a new segment
        y = y * 2
    return y.cos() - x


def integers(x):
    return (x * 3 + 1) % 7 + x.sum()


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.fc(x)  # an extern: torch runs it with the GIL released
        if h.mean() > 100:  # a break inside the inlined forward (module path kept)
            h = h * 0
        return torch.relu(h) + x


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = Block(dim)
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        return self.head(self.block(x) * 2)


def cases():
    """(name, compiled, eager, input, tolerance) per worker, rotating."""
    torch.manual_seed(0)
    model = Model(8).eval()
    fns = [(pointwise, ptc.compile(pointwise)), (with_break, ptc.compile(with_break)),
           (integers, ptc.compile(integers)), (model, ptc.compile(model))]
    inputs = [
        [torch.randn(5, 7), torch.randn(9, 3, dtype=torch.float64), torch.randn(2, 33)],
        [torch.randn(6), torch.randn(4, 4, dtype=torch.float64), torch.randn(3, 5)],
        [torch.randint(-50, 50, (7, 3)), torch.randint(0, 9, (11,), dtype=torch.int32)],
        [torch.randn(4, 8), torch.randn(1, 8), torch.randn(6, 8)],
    ]
    out = []
    for k, (eager, compiled) in enumerate(fns):
        for x in inputs[k]:
            tol = 1e-4 if x.dtype == torch.float32 else 1e-9
            out.append((getattr(eager, "__name__", type(eager).__name__), compiled, eager, x, tol))
    return out, [c for _, c in fns]


def worker(mine, deadline, counts, errors, i):
    try:
        with torch.no_grad():
            expected = [eager(x) for _, _, eager, x, _ in mine]
            while time.monotonic() < deadline:
                for (name, compiled, _, x, tol), want in zip(mine, expected):
                    got = compiled(x)
                    if got.dtype != want.dtype or not torch.allclose(got, want, rtol=tol, atol=tol):
                        raise AssertionError("%s%s: %s != eager %s" % (name, tuple(x.shape), got, want))
                    counts[i] += 1
    except BaseException as e:  # reported by the main thread
        errors.append("worker %d: %s: %s" % (i, type(e).__name__, e))


def resetter(compiled, deadline, counts, errors, i):
    try:
        k = 0
        while time.monotonic() < deadline:
            if k % 3 == 2:
                target = compiled[(k // 3) % len(compiled)]
                getattr(target, "_ptc_compiled", target)._reset()
            else:
                ptc.reset()
            k += 1
            counts[i] += 1
            time.sleep(0.002)
    except BaseException as e:
        errors.append("resetter: %s: %s" % (type(e).__name__, e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    all_cases, compiled = cases()
    deadline = time.monotonic() + args.seconds
    counts = [0] * (args.threads + 1)
    errors = []
    threads = [threading.Thread(target=worker, args=(all_cases[i::args.threads], deadline, counts, errors, i))
               for i in range(args.threads)]
    threads.append(threading.Thread(target=resetter, args=(compiled, deadline, counts, errors, args.threads)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("calls per worker %s, resets %d" % (counts[:-1], counts[-1]))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
