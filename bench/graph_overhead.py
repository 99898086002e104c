"""The fixed host cost of a compiled training graph (issues 19, 20): what one
call of a compiled forward and its backward costs beyond eager's ops, when
the work itself is tiny. Under FSDP2 a model is many small compiled graphs
(resnet50: 17 units, a forward and a backward graph each per step), so this
cost, paid per graph, decides whether ptc beats eager there.

    python3 bench/graph_overhead.py [--graphs 1,17] [--rounds 15] [--iters 200]
                                    [--width 8] [--device cpu|cuda] [--clock cpu|wall]
                                    [--profile ptc|eager] [--top 25]

The model is a chain of --graphs units, each Linear(width, width) + ReLU;
ptc compiles each unit separately (ptc.compile(unit), as FSDP's units are),
eager runs them as they are. Two things are timed:
  step   forward of the chain, .sum(), backward (parameters' .grad set to
         None first): one forward and one backward graph per unit;
  fwd    the forward alone, with gradients recorded (the graph dropped).
Eager and ptc take turns inside each round (--iters calls each), so a load
on a shared machine weighs on both alike; each number is the process's CPU
time a call (--clock cpu; less swayed by other processes on a shared CPU
than the wall clock, which --clock wall times instead), the median over
--rounds rounds, with the lower and upper quartiles. The last column is
(ptc - eager) / graphs: ptc's extra cost per compiled unit, microseconds.
CPU runs use one torch thread.

--profile ptc runs the ptc step under cProfile instead and prints the --top
functions by their own time (the Python side of a call; C functions
appear as the built-ins that call them).
"""
import argparse
import cProfile
import pstats
import statistics
import time

import torch

import ptc


class Unit(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.fc(x))


def chain(k, width, device, compiled):
    torch.manual_seed(0)
    units = [Unit(width).to(device) for _ in range(k)]
    calls = [ptc.compile(u) if compiled else u for u in units]
    params = [p for u in units for p in u.parameters()]

    def fwd(x):
        for call in calls:
            x = call(x)
        return x

    def step(x):
        for p in params:
            p.grad = None
        fwd(x).sum().backward()

    return {"step": step, "fwd": fwd}


def quartiles(v):
    q = statistics.quantiles(v, n=4)
    return statistics.median(v), q[0], q[2]


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def measure(k, a):
    x = torch.randn(4, a.width, device=a.device)
    runs = {c: chain(k, a.width, a.device, c == "ptc") for c in ("eager", "ptc")}
    for fns in runs.values():  # compile and warm up
        for _ in range(5):
            fns["step"](x)
            fns["fwd"](x)
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    times = {(c, what): [] for c in runs for what in ("step", "fwd")}
    for _ in range(a.rounds):
        for c, fns in runs.items():
            for what, fn in fns.items():
                sync(a.device)
                t = clock()
                for _ in range(a.iters):
                    fn(x)
                sync(a.device)
                times[c, what].append((clock() - t) / a.iters * 1e6)
    for what in ("step", "fwd"):
        e, el, eh = quartiles(times["eager", what])
        p, pl, ph = quartiles(times["ptc", what])
        print("%2d graphs %-4s  eager %8.1f us [%.1f-%.1f]  ptc %8.1f us [%.1f-%.1f]  "
              "eager/ptc %.2fx  ptc-eager per graph %6.1f us"
              % (k, what, e, el, eh, p, pl, ph, e / p, (p - e) / k))


def profile(k, a):
    x = torch.randn(4, a.width, device=a.device)
    step = chain(k, a.width, a.device, a.profile == "ptc")["step"]
    for _ in range(5):
        step(x)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(a.iters):
        step(x)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", default="1,17")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    p.add_argument("--profile", choices=["ptc", "eager"])
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(1)
    for k in map(int, a.graphs.split(",")):
        (profile if a.profile else measure)(k, a)


if __name__ == "__main__":
    main()
