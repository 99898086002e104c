"""Training-step benchmark on the GPU: forward + loss + backward + fused
AdamW under bf16 autocast, eager vs torch.compile (Inductor) vs ptc.compile,
each in its own process (so compile caches and allocator state do not leak
between them), on the same machine in one run.

    python3 bench/gpu/train.py [--models resnet50,bert,gpt2] [--steps 10] [--out DIR]
                               [--compilers eager,inductor,ptc,ptc-autograd,ptc-torch-autograd,
                                            ptc-ro,inductor-ro]

ptc runs with ptc.config.compiled_autograd as it is by default (on: ptc
compiles the backward); ptc-autograd turns it on whatever the environment
says, ptc-torch-autograd turns it off (the backward runs through torch's
autograd). ptc-ro and inductor-ro compile with mode="reduce-overhead" (CUDA
graphs: ptc.compile's and torch.compile's), each step begun with
torch.compiler.cudagraph_mark_step_begin() as torch advises for training
loops; that function is called once before the first step is timed, as its
first call imports torch._inductor (1-2.5 s on the H200's host, measured):
a cost of torch's API that both compilers' first step would otherwise carry.

Per model and compiler, two processes one after the other: the first with
empty compile caches (a fresh PTC_CACHE_DIR / Inductor cache dir), the second
finding the first one's caches on disk. From each: the median step time over
--steps timed steps after three warm-up steps and the first step's time
(compile included: cold, then warm); from the first, the peak memory and the
loss after the timed steps (the three start from the same weights and
batches, so their losses agree up to rounding). Writes train.json and
train.md to --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = {"resnet50": "torchvision resnet50, batch 32, 224x224",
          "bert": "HF BertForMaskedLM (base), 16x128",
          "gpt2": "HF GPT2LMHeadModel, 16x128"}


def build(name):
    import torch
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50()
        x = torch.randn(32, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (32,), device="cuda")
        return m, lambda: ((x,), {}), lambda out: torch.nn.functional.cross_entropy(out, y)
    import transformers as T
    ids = torch.randint(0, 30000, (16, 128), device="cuda")
    if name == "bert":
        m = T.BertForMaskedLM(T.BertConfig())
        return m, lambda: ((), {"input_ids": ids, "labels": ids}), lambda out: out.loss
    m = T.GPT2LMHeadModel(T.GPT2Config())
    return m, lambda: ((), {"input_ids": ids, "labels": ids}), lambda out: out.loss


def worker(name, compiler, steps):
    import torch
    model, batch, lossf = build(name)
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    graphs = compiler.endswith("-ro")
    mode = "reduce-overhead" if graphs else None
    if compiler.startswith("inductor"):
        model = torch.compile(model, mode=mode)
    elif compiler.startswith("ptc"):
        import ptc
        if compiler in ("ptc-autograd", "ptc-torch-autograd"):
            ptc.config.compiled_autograd = compiler == "ptc-autograd"
        model = ptc.compile(model, mode=mode or "default")

    def step():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        args, kwargs = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(model(*args, **kwargs))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if graphs:  # its first call imports torch._inductor (1-2.5 s): torch's, not a compile
        torch.compiler.cudagraph_mark_step_begin()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    row = {"model": name, "compiler": compiler, "median_ms": statistics.median(times),
           "first_step_s": first, "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
           "loss": loss.item()}
    if compiler.startswith("ptc"):
        import ptc
        args, kwargs = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ex = ptc.explain(model, backend="ptc")(*args, **kwargs)
        row.update(graphs=ex.graph_count, breaks=ex.break_count,
                   autograd_fallbacks=[f.get("why", "") for f in ex.fallbacks
                                       if "needs gradients" in f.get("error", "")])
    print(json.dumps(row))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,bert,gpt2")
    ap.add_argument("--compilers", default="eager,inductor,ptc")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--worker", nargs=2)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1], a.steps)
    rows = []
    for name in a.models.split(","):
        for compiler in a.compilers.split(","):
            row = cold_then_warm(name, compiler, a.steps)
            print(json.dumps(row), flush=True)
            rows.append(row)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(a.out, "train.md"), "w") as f:
        f.write("| model | compiler | step ms (cold process / warm process) | first step s, cold "
                "cache | first step s, warm cache | peak GiB | loss |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            if "error" in r:
                f.write("| %s | %s | error: %s | | | | |\n" % (r["model"], r["compiler"],
                                                                r["error"].splitlines()[-1][:80]))
            else:
                f.write("| %s | %s | %.2f / %.2f | %.2f | %.2f | %.2f | %.4f |\n" % (
                    r["model"], r["compiler"], r["median_ms"], r["warm"]["median_ms"],
                    r["first_step_s"], r["warm"]["first_step_s"], r["peak_gib"], r["loss"]))


def run_worker(name, compiler, steps, env):
    r = subprocess.run([sys.executable, __file__, "--worker", name, compiler,
                        "--steps", str(steps)], capture_output=True, text=True, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        return {"model": name, "compiler": compiler, "error": r.stderr.strip()[-600:]}
    return json.loads(lines[-1])


def cold_then_warm(name, compiler, steps):
    """The compiler's row from a process with empty compile caches, and under
    "warm" the same from a second process that finds the first one's caches
    on disk (its first step is the warm compile; its median a second sample)."""
    env = dict(os.environ, PTC_CACHE_DIR=tempfile.mkdtemp(),
               TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp())
    row = run_worker(name, compiler, steps, env)
    if "error" not in row:
        warm = run_worker(name, compiler, steps, env)
        if "error" in warm:
            return warm
        row["warm"] = {k: warm[k] for k in ("median_ms", "first_step_s", "peak_gib")}
    return row

if __name__ == "__main__":
    main()
