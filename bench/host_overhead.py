"""The host's cost of a compiled call (issues 15, 16, 17): what ptc spends
around the kernels when the work itself is tiny, side by side with eager and
torch.compile (Inductor).

    python3 bench/host_overhead.py [--device cpu|cuda] [--runs 7]
                                   [--cases mm_chain,tiny_call,gpt2_dynamic]
                                   [--compilers eager,inductor,ptc]

Cases:
  mm_chain      100 torch.mm of 8x8 in one graph: microseconds per mm, i.e.
                per extern call (ptc runs matmuls through torch).
  tiny_call     x * 2 + y, relu, sum of 4x4 tensors: microseconds per call,
                i.e. guards + binding the inputs + the outputs.
  gpt2_dynamic  a 2-layer GPT-2 (transformers, n_embd 64, 2 heads, built from
                its config: no download) on one sequence of lengths 4..64,
                dynamic=None: after the first size change every length runs
                the one symbolic graph. Milliseconds per 16 calls (the 16
                lengths 4, 8, ..., 64).

Each number is the median of --runs repeats; the compilers take turns inside
each repeat, so a load on a shared machine weighs on all of them alike.
Inductor is skipped (a dash) where torch has no torch.compile. CPU runs use
one torch thread. On CUDA each timed repeat ends with a synchronize.
"""
import argparse
import statistics
import time

import torch

import ptc


def mm_chain(device):
    w = torch.randn(8, 8, device=device)

    def f(x):
        for _ in range(100):
            x = torch.mm(x, w)
        return x

    x = torch.randn(8, 8, device=device)
    return f, lambda fn: fn(x), 100, "us per mm", 1e6


def tiny_call(device):
    def f(x, y):
        return torch.relu(x * 2 + y).sum()

    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    return f, lambda fn: fn(x, y), 1, "us per call", 1e6


def gpt2_dynamic(device):
    import transformers as T
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=128,
                       bos_token_id=0, eos_token_id=0)
    model = T.GPT2LMHeadModel(cfg).eval().to(device)
    ids = {n: torch.randint(0, 512, (1, n), device=device) for n in range(4, 65, 4)}

    def f(x):
        return model(x).logits

    def sweep(fn):
        for x in ids.values():
            fn(x)

    return f, sweep, 1, "ms per 16 calls", 1e3


CASES = {"mm_chain": mm_chain, "tiny_call": tiny_call, "gpt2_dynamic": gpt2_dynamic}


def compiled(name, f):
    if name == "eager":
        return f
    if name == "inductor":
        return torch.compile(f, dynamic=None) if hasattr(torch, "compile") else None
    return ptc.compile(f, dynamic=None)


def measure(case, device, compilers, runs):
    f, call, per, unit, scale = CASES[case](device)
    fns = {c: compiled(c, f) for c in compilers}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    reps = 20 if case != "gpt2_dynamic" else 2
    times = {c: [] for c in compilers}
    with torch.no_grad():
        for fn in fns.values():
            if fn is not None:
                for _ in range(3):  # compile, recompile dynamic, warm
                    call(fn)
        sync()
        for _ in range(runs):
            for c, fn in fns.items():
                if fn is None:
                    continue
                t0 = time.perf_counter()
                for _ in range(reps):
                    call(fn)
                sync()
                times[c].append((time.perf_counter() - t0) / reps / per * scale)
    return unit, {c: statistics.median(t) if t else None for c, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--compilers", default="eager,inductor,ptc")
    a = ap.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(1)
    compilers = a.compilers.split(",")
    print(f"{'case':14} {'unit':16} " + " ".join(f"{c:>9}" for c in compilers))
    for case in a.cases.split(","):
        unit, med = measure(case, a.device, compilers, a.runs)
        cells = " ".join(f"{med[c]:9.2f}" if med[c] is not None else f"{'-':>9}"
                         for c in compilers)
        print(f"{case:14} {unit:16} {cells}", flush=True)


if __name__ == "__main__":
    main()
