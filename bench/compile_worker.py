#!/usr/bin/env python3
"""What compiling in forked compile workers costs (a benchmark, not a test).

Each model's first call under ptc.compile (capture, every compile stage and
the first run) is timed in a fresh process with an empty kernel cache, once
with LLVM in process (PTC_COMPILE_WORKER=0) and once in compile workers
(PTC_COMPILE_WORKER=1); each leg runs --rounds times and the median is
printed, with the compiled result's relative error against eager.

    python3 bench/compile_worker.py [--build BUILD] [--models resnet50,...]
                                    [--rounds 2] [--json FILE]

Models: resnet18, resnet50 (batch 1), bert_4l, gpt2_4l (bench/cpu_models.py)
and chain10k, a Python loop of 10,000 mixed pointwise ops
(bench/compile_scaling.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["resnet18", "resnet50", "bert_4l", "gpt2_4l", "chain10k"]

CHILD = r"""
import sys, time, torch
sys.path.insert(0, %(here)r)
import ptc
name = sys.argv[1]
torch.manual_seed(0)
if name == "resnet50":
    import torchvision
    model, args = torchvision.models.resnet50().eval(), (torch.randn(1, 3, 224, 224),)
elif name == "chain10k":
    import compile_scaling, types
    src = compile_scaling.python_source(10000)
    mod = types.ModuleType("chain10k")
    exec(compile(src, "chain10k.py", "exec"), mod.__dict__)
    model, args = mod.chain, (torch.randn(16),)
else:
    import cpu_models
    model, args = cpu_models.build_model(name)
import cpu_models
with torch.no_grad():
    want = model(*args)
    fn = ptc.compile(model)
    t0 = time.perf_counter()
    got = fn(*args)
    first = time.perf_counter() - t0
print("first_call_s %%.4f rel_err %%.2e" %% (first, cpu_models.rel_error(
    cpu_models.first_tensor(got), cpu_models.first_tensor(want))))
"""


def leg(build, model, worker):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(build, "python"), HERE])
    env["PTC_COMPILE_WORKER"] = worker
    with tempfile.TemporaryDirectory() as cache:
        env["PTC_CACHE_DIR"] = cache
        p = subprocess.run([sys.executable, "-c", CHILD % {"here": HERE}, model], env=env,
                           capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("first_call_s"):
            w = line.split()
            return float(w[1]), float(w[3]), p.stderr.count("[ptc")
    raise RuntimeError("%s (worker=%s) failed:\n%s" % (model, worker, (p.stdout + p.stderr)[-2000:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("PTC_BUILD_DIR", os.path.join(HERE, "..", "build")))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print("%-10s %14s %14s %9s %9s" % ("model", "in process s", "worker s", "ratio", "rel err"))
    for model in a.models.split(","):
        t = {"0": [], "1": []}
        err = 0.0
        for _ in range(a.rounds):  # interleaved, so the machine's load falls on both alike
            for worker in ("0", "1"):
                s, e, _ = leg(a.build, model, worker)
                t[worker].append(s)
                err = max(err, e)
        row = {"model": model, "in_process_s": t["0"], "worker_s": t["1"]}
        rows.append(row)
        m0, m1 = statistics.median(t["0"]), statistics.median(t["1"])
        print("%-10s %14.3f %14.3f %8.2fx %9.1e" % (model, m0, m1, m1 / m0, err), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
