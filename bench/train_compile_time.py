"""Where the cold compile of a training step goes (a benchmark, not a test).

Per model, one fresh process with an empty kernel cache (PTC_CACHE_DIR) runs
one training step under ptc.compile (forward with autocast, loss, backward,
AdamW step) with PTC_LOGS=perf, and the stage lines of the perf log are
summed per stage, forward and backward together: joint, partition, prims,
loops, kernels, codegen (the kernels' code: LLVM, and on CUDA the PTX JIT)
and "compile workers" (the wall time of the forked LLVM workers, part of
codegen). Also the first step's wall time and the process's CPU time, its
own and its compile workers' (children), and the first step of the same
model run eagerly in another fresh process (torch's own first-call costs:
the CUDA context, cuDNN/cuBLAS set-up, the allocator), so that the time ptc
adds to a cold first step is the difference of the two.

    python3 bench/train_compile_time.py [--device cpu|cuda] [--models resnet50,bert,gpt2]
                                        [--batch N] [--size N] [--threads N]

Defaults: on cuda, bench/gpu/train.py's shapes (resnet50 batch 32 at 224
px; BERT-base and GPT-2 small 16 x 128 tokens, bf16 autocast, fused AdamW);
on cpu, the same models at batch 2 (64 px, 32 tokens), so that the compile
is timed, not the step. Times are wall time where the stage timers are
(a loaded machine stretches them); the CPU columns are not.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

STAGES = ("joint", "partition", "prims", "loops", "kernels", "compile workers", "codegen")
# (batch, size) by (model is the CNN, device)
SHAPES = {(True, "cuda"): (32, 224), (False, "cuda"): (16, 128),
          (True, "cpu"): (2, 64), (False, "cpu"): (2, 32)}


def build(name, device, batch, size):
    import torch
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50()
        x = torch.randn(batch, 3, size, size, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)
        return m, ((x,), {}), lambda out: torch.nn.functional.cross_entropy(out, y)
    import transformers as T
    ids = torch.randint(0, 30000, (batch, size), device=device)
    m = T.BertForMaskedLM(T.BertConfig()) if name == "bert" else T.GPT2LMHeadModel(T.GPT2Config())
    return m, ((), {"input_ids": ids, "labels": ids}), lambda out: out.loss


def worker(a):
    import torch
    torch.set_num_threads(a.threads)
    model, (args, kwargs), lossf = build(a.worker, a.device, a.batch, a.size)
    model = model.to(a.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=a.device == "cuda")
    if not a.eager:
        import ptc
        model = ptc.compile(model)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    sync()
    t = os.times()
    t0 = time.perf_counter()
    with torch.autocast(a.device, dtype=torch.bfloat16):
        loss = lossf(model(*args, **kwargs))
    loss.backward()
    opt.step()
    sync()
    wall = time.perf_counter() - t0
    u = os.times()
    print(json.dumps({"first_step_s": wall, "cpu_s": u.user + u.system - t.user - t.system,
                      "workers_cpu_s": u.children_user + u.children_system
                      - t.children_user - t.children_system}))


def stage_times(log):
    """Milliseconds per stage, summed over the perf log's lines."""
    ms = dict.fromkeys(STAGES, 0.0)
    for line in log.splitlines():
        m = re.match(r"\[ptc:perf\] ([a-z ]+): (?:\d+ item\(s\), \d+ fork\(s\), )?([0-9.]+) ms", line)
        if m and m.group(1) in ms:
            ms[m.group(1)] += float(m.group(2))
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="resnet50,bert,gpt2")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--size", type=int)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--worker")
    ap.add_argument("--eager", action="store_true", help="(worker) run the step without ptc")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    print("| model | first step s (ptc / eager) | ptc adds s | CPU s (process / compile workers) | "
          + " | ".join(s + " ms" for s in STAGES) + " |")
    print("|---" * (5 + len(STAGES)) + "|")
    for name in a.models.split(","):
        batch, size = SHAPES[name == "resnet50", a.device]
        batch, size = a.batch or batch, a.size or size
        rows = [first_step(a, name, batch, size, eager) for eager in (False, True)]
        err = next((r for r in rows if isinstance(r, str)), None)
        if err:
            print("| %s | error: %s |" % (name, err))
            continue
        (ptc_row, log), (eager_row, _) = rows
        ms = stage_times(log)
        print("| %s b%d x %d | %.2f / %.2f | %.2f | %.2f / %.2f | %s |" % (
            name, batch, size, ptc_row["first_step_s"], eager_row["first_step_s"],
            ptc_row["first_step_s"] - eager_row["first_step_s"], ptc_row["cpu_s"],
            ptc_row["workers_cpu_s"], " | ".join("%.0f" % ms[s] for s in STAGES)), flush=True)


def first_step(a, name, batch, size, eager):
    """One fresh process's first training step -> (its JSON row, its stderr) or an error."""
    env = dict(os.environ, PTC_CACHE_DIR=tempfile.mkdtemp(), PTC_LOGS="perf",
               OMP_NUM_THREADS=str(a.threads))
    r = subprocess.run([sys.executable, __file__, "--worker", name, "--device", a.device,
                        "--batch", str(batch), "--size", str(size), "--threads", str(a.threads)]
                       + (["--eager"] if eager else []),
                       capture_output=True, text=True, env=env)
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not rows:
        return r.stderr.strip()[-300:].replace("\n", " ")
    return json.loads(rows[-1]), r.stderr

if __name__ == "__main__":
    main()
