#!/usr/bin/env python3
"""Load time and first-call latency of exported models run from C (a
benchmark, not a test).

Each model is exported with ptc.export and saved as a package; then, in fresh
processes, `ptc-run --package DIR --stats --repeat N` reports the load (verify
the manifest and every file's checksum, map the weights, load the kernels,
ready the first run), the first run and the mean of the next N, each with its
minor page faults and the threads it started. Each process runs twice, as
loaded (the row "ptc") and with PTC_EXPORT_WARM=0 (the row "ptc-cold"): the
load then leaves the OpenMP team's start and the first touches of the arena
and the C kernels' scratch to the first run, as ptc did before the load
readied it; both rows come from one run of this script, on one machine.
Where torch has AOTInductor
(torch._inductor.aoti_compile_and_package), the same model is exported with
torch.export, compiled into a .pt2 package, and loaded and called in fresh
processes the same way (aoti_load_package; Python is in that process).

    python3 bench/export_load.py [--build BUILD] [--models resnet50,bert,mlp]
                                 [--runs 3] [--repeat 5] [--no-aoti]

The first call against the steady state (the median of the later calls) on a many-core machine (OpenMP's
default team: a thread per core), both rows in one run, about a minute on 16
cores; on the GPU machine, from scripts/gpu/build.sh's package:

    python3 bench/export_load.py --models resnet50 --runs 3 --repeat 5 --no-aoti
    sh .device/run.sh cmd "python3 bench/export_load.py --models resnet50 --no-aoti"
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build_model(name):
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50().eval(), (torch.randn(1, 3, 224, 224),), {}
    if name == "mlp":  # small enough for AOTInductor's C++ compile on a busy 2-core machine
        layers = [torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512),
                  torch.nn.GELU(), torch.nn.Linear(512, 10)]
        return torch.nn.Sequential(*layers).eval(), (torch.randn(8, 256),), {}
    if name == "bert":
        import transformers as T
        cfg = T.BertConfig(num_hidden_layers=4, hidden_size=768, num_attention_heads=12,
                           intermediate_size=3072)
        ids = torch.randint(0, cfg.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
        return T.BertModel(cfg).eval(), (), {"input_ids": ids}
    raise KeyError(name)


def ptc_leg(name, build, work, runs, repeat):
    import ptc
    from ptc import _tensorfile

    model, args, kwargs = build_model(name)
    t0 = time.perf_counter()
    ep = ptc.export(model, args, kwargs)
    pkg = ep.save(os.path.join(work, name + ".ptc"))
    export_s = time.perf_counter() - t0
    leaves = []
    ptc._export.flatten(tuple(args), leaves, "args")
    ptc._export.flatten(dict(kwargs), leaves, "kwargs")
    inputs = os.path.join(work, name + ".in.bin")
    _tensorfile.write_tensors(inputs, [(e["path"], leaves[e["leaf"]][1]) for e in ep.inputs])
    exe = os.path.join(build, "tools", "run", "ptc-run")
    rows = {"ptc": [], "ptc-cold": []}
    for _ in range(runs):
        for who, warm in (("ptc", "1"), ("ptc-cold", "0")):
            r = subprocess.run([exe, "--package", pkg, "--inputs", inputs, "--stats", "--repeat",
                                str(repeat)], capture_output=True, text=True, check=True,
                               env=dict(os.environ, PTC_EXPORT_WARM=warm))
            rows[who].append(parse_stats(r.stdout))
    return export_s, rows


def parse_stats(out):
    """(load ms, first ms, steady ms, kernels compiled at load, load CPU ms,
    first run's minor faults, a later run's, threads the first run started,
    the later runs' least, median and largest ms)."""
    load = float(re.search(r"load ms: ([\d.]+)", out).group(1))
    load_cpu = float(re.search(r"\(cpu ([\d.]+);", out).group(1))
    first = re.search(r"first run ms: ([\d.]+) .*minor faults (\d+); threads started (\d+)", out)
    later = re.search(r"run ms: ([\d.]+) \(mean.*minor faults ([\d.]+)", out)
    compiled = int(re.search(r"compiled at load: (\d+)", out).group(1))
    spread = re.search(r"spread: min ([\d.]+) median ([\d.]+) max ([\d.]+)", out)
    return (load, float(first.group(1)), float(later.group(1)), compiled, load_cpu,
            int(first.group(2)), float(later.group(2)), int(first.group(3)),
            *map(float, spread.groups()))


AOTI_CHILD = r"""
import sys, time, torch
t0, c0 = time.perf_counter(), time.process_time()
runner = torch._inductor.aoti_load_package(sys.argv[1])
load, load_cpu = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
args, kwargs = torch.load(sys.argv[2])
with torch.no_grad():
    t0 = time.perf_counter(); runner(*args, **kwargs); first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    for _ in range(int(sys.argv[3])):
        runner(*args, **kwargs)
    steady = (time.perf_counter() - t0) * 1e3 / int(sys.argv[3])
print("%f %f %f %f" % (load, first, steady, load_cpu))
"""


def aoti_leg(name, work, runs, repeat):
    import torch

    if not hasattr(torch._inductor, "aoti_compile_and_package"):
        return None
    model, args, kwargs = build_model(name)
    t0 = time.perf_counter()
    with torch.no_grad():
        prog = torch.export.export(model, args, kwargs)
        path = torch._inductor.aoti_compile_and_package(
            prog, package_path=os.path.join(work, name + ".pt2"))
    export_s = time.perf_counter() - t0
    saved = os.path.join(work, name + ".args.pt")
    torch.save((args, kwargs), saved)
    rows = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", AOTI_CHILD, path, saved, str(repeat)],
                           capture_output=True, text=True, check=True)
        load, first, steady, load_cpu = map(float, r.stdout.split()[-4:])
        rows.append((load, first, steady, 0, load_cpu))
    return export_s, rows


def report(who, name, export_s, rows):
    """Medians; the load's CPU time beside its wall time (on a shared machine
    the wall time is mostly waiting for a core); for ptc, the page faults of
    the first and a later run and the threads the first started (counts, the
    same on a busy machine). ptc's steady state is the median of each
    process's later calls (a mean counts one slow call, and the process's
    own accounting around them, as much as all the others)."""
    med = [statistics.median(r[i] for r in rows) for i in (0, 1, 9 if who.startswith("ptc") else 2, 4)]
    counts = ""
    if who.startswith("ptc"):
        counts = ("; kernels compiled at load: %d; minor faults first %d, later %.0f; threads "
                  "started by the first %d" % (rows[0][3], statistics.median(r[5] for r in rows),
                                               statistics.median(r[6] for r in rows),
                                               statistics.median(r[7] for r in rows)))
    print("%-8s %-9s export+save %6.1f s  load %8.2f ms (cpu %7.2f)  first call %9.2f ms  "
          "steady %9.2f ms  first/steady %.2f  (median of %d fresh processes%s)"
          % (who, name, export_s, med[0], med[3], med[1], med[2], med[1] / med[2], len(rows),
             counts))
    if who.startswith("ptc"):
        # Each process: its first call against its own later calls' median,
        # and how far those later calls spread (min-max).
        print("%-8s %-9s per process: %s" % (who, name, "; ".join(
            "first %.1f / median %.1f = %.2f (later %.1f-%.1f)" % (r[1], r[9], r[1] / r[9], r[8],
                                                                   r[10]) for r in rows)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-aoti", action="store_true")
    o = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        os.environ.setdefault("PTC_CACHE_DIR", os.path.join(work, "cache"))
        for name in o.models.split(","):
            export_s, rows = ptc_leg(name, o.build, work, o.runs, o.repeat)
            for who in ("ptc", "ptc-cold"):
                report(who, name, export_s, rows[who])
            if not o.no_aoti:
                aoti = aoti_leg(name, work, o.runs, o.repeat)
                if aoti:
                    report("aoti", name, *aoti)
                else:
                    print("aoti   %-9s torch %s has no AOTInductor packages" % (name, __import__("torch").__version__))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
