"""Dynamic-shape sweep: GPT-2 forward over many sequence lengths, eager vs
torch.compile (automatic dynamic) vs ptc.compile, side by side in one
process on one machine (issue 16's benchmark).

    python3 bench/dynamic_sweep.py [--device cpu|cuda] [--lengths 4:256:4] [--batch 4]
                                   [--layers 6] [--width 768] [--heads 12] [--vocab 8000]
                                   [--dtype float32] [--compilers eager,inductor,ptc]
                                   [--threads N] [--repeat N] [--warm-caches] [--out DIR]

A GPT2LMHeadModel from a config (no download) runs forward under no_grad on
--batch sequences of each length in --lengths (start:stop:step, stop
included): first the lengths shuffled (a fixed seed), then again in order.
Each compiler starts from a fresh wrapper of the same model and, unless
--warm-caches, with empty compile caches on disk (PTC_CACHE_DIR and
TORCHINDUCTOR_CACHE_DIR in a new temporary folder), so its first sweep
includes every compile it needs. Each compiler runs in a process of its own
(one after another), so none inherits another's threads, memory pool or
warmed-up state.

Per compiler: the first sweep's time (compiles included), the second
sweep's time (in order; the median of --repeat such sweeps), its speed against eager's second sweep, how many compiles it
made (torch.compile: Dynamo's unique graphs; ptc: its compile events), the
first call's time (the cold compile), and the largest difference of its
logits from eager's over every length; then, per quarter of the lengths,
the time of one synchronised call per length (short lengths show per-call
overhead, long ones the kernels). The compilers take turns on the
same machine, so a load that comes and goes affects all; run it twice and
compare ratios, not absolute times, on a shared machine.
Writes dynamic_sweep.json and dynamic_sweep.md to --out when given.
"""
import argparse
import atexit
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def parse_lengths(text):
    start, stop, step = (int(v) for v in text.split(":"))
    return list(range(start, stop + 1, step))


def build(a, torch):
    import transformers as T
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=a.layers, n_embd=a.width, n_head=a.heads, vocab_size=a.vocab,
                       n_positions=max(1024, max(a.lengths)), bos_token_id=0, eos_token_id=0)
    model = T.GPT2LMHeadModel(cfg).eval().to(device=a.device, dtype=getattr(torch, a.dtype))
    gen = torch.Generator().manual_seed(1)
    inputs = {L: torch.randint(0, a.vocab, (a.batch, L), generator=gen).to(a.device)
              for L in a.lengths}
    return model, inputs


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def sweep(torch, a, fn, inputs, order, want=None):
    """Seconds for one call per length in order; the largest |logits - want|."""
    worst = 0.0
    sync(torch, a.device)
    t0 = time.perf_counter()
    first = None
    for L in order:
        out = fn(inputs[L])
        if first is None:
            sync(torch, a.device)
            first = time.perf_counter() - t0
        if want is not None:
            worst = max(worst, (out.float() - want[L].float()).abs().max().item())
    sync(torch, a.device)
    return time.perf_counter() - t0, first, worst


def by_quarter(torch, a, fn, inputs):
    """Per quarter of --lengths (shortest first), the summed time of one call
    per length, each call synchronised: where a gap between compilers lies,
    short lengths (per-call overhead) or long ones (kernels)."""
    n = len(a.lengths)
    cuts = [a.lengths[i * n // 4:(i + 1) * n // 4] for i in range(4)]
    out = []
    for part in cuts:
        total = 0.0
        for L in part:
            sync(torch, a.device)
            t0 = time.perf_counter()
            fn(inputs[L])
            sync(torch, a.device)
            total += time.perf_counter() - t0
        out.append({"lengths": [part[0], part[-1]] if part else [], "s": total})
    return out


def compiled(torch, name, model):
    """A forward that returns the logits, and a function counting its compiles."""
    if name == "eager":
        return (lambda ids: model(input_ids=ids).logits), (lambda: 0)
    if name == "inductor":
        import torch._dynamo
        torch._dynamo.reset()
        from torch._dynamo.utils import counters
        c = torch.compile(model)  # dynamic=None: static first, then automatic dynamic
        return (lambda ids: c(input_ids=ids).logits), (lambda: counters["stats"]["unique_graphs"])
    import ptc
    ptc.reset()
    c = ptc.compile(model)  # dynamic=None, as torch.compile's default
    handle = getattr(c, "_ptc_compiled", c)
    return (lambda ids: c(input_ids=ids).logits), (
        lambda: sum(e["kind"] == "compile" for e in handle._events()))


def measure(a, name):
    """One compiler's row, measured in this process."""
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    model, inputs = build(a, torch)
    shuffled = list(a.lengths)
    random.Random(0).shuffle(shuffled)
    with torch.no_grad():
        fn, count = compiled(torch, name, model)
        first, cold, _ = sweep(torch, a, fn, inputs, shuffled)
        second = statistics.median(sweep(torch, a, fn, inputs, a.lengths)[0]
                                   for _ in range(a.repeat))
        want = {L: model(input_ids=inputs[L]).logits for L in a.lengths}
        _, _, worst = sweep(torch, a, fn, inputs, a.lengths, want)
        quarters = by_quarter(torch, a, fn, inputs)
    return {"compiler": name, "first_sweep_s": first, "second_sweep_s": second,
            "first_call_s": cold, "compiles": count(), "max_abs_diff": worst,
            "quarters": quarters}


def run(a, argv):
    """Each compiler's row from a process of its own (--worker NAME)."""
    rows = []
    for name in a.compilers:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name] + list(argv)
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("ROW ")]
        if done.returncode != 0 or not lines:
            raise SystemExit("dynamic_sweep: the %s worker failed (exit %d)"
                             % (name, done.returncode))
        r = json.loads(lines[-1][4:])
        rows.append(r)
        print("%-9s first sweep %7.2f s  second %7.3f s  first call %6.2f s  compiles %d  "
              "max |diff| %.2e" % (name, r["first_sweep_s"], r["second_sweep_s"],
                                   r["first_call_s"], r["compiles"], r["max_abs_diff"]),
              flush=True)
    base = next((r["second_sweep_s"] for r in rows if r["compiler"] == "eager"), None)
    for r in rows:
        r["speedup_vs_eager"] = base / r["second_sweep_s"] if base else None
    return rows


def table(a, rows):
    lines = ["GPT-2 forward, %d layers, width %d, batch %d, %s %s, lengths %d..%d step %d "
             "(%d lengths, shuffled then in order)" % (
                 a.layers, a.width, a.batch, a.device, a.dtype, a.lengths[0], a.lengths[-1],
                 a.lengths[1] - a.lengths[0] if len(a.lengths) > 1 else 0, len(a.lengths)),
             "",
             "| | first sweep (compiles included) | second sweep | vs eager | compiles | "
             "first call | max abs diff |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = "%.2fx" % r["speedup_vs_eager"] if r["speedup_vs_eager"] else "-"
        lines.append("| %s | %.2f s | %.1f ms | %s | %d | %.2f s | %.1e |" % (
            r["compiler"], r["first_sweep_s"], r["second_sweep_s"] * 1e3, speed, r["compiles"],
            r["first_call_s"], r["max_abs_diff"]))
    quarters = rows[0]["quarters"] if rows else []
    lines += ["", "Second sweep by length, each call synchronised (ms per quarter of the lengths):",
              "", "| | " + " | ".join("%d..%d" % tuple(q["lengths"]) for q in quarters if q["lengths"])
              + " |", "|---|" + "---|" * len(quarters)]
    for r in rows:
        lines.append("| %s | " % r["compiler"] +
                     " | ".join("%.1f" % (q["s"] * 1e3) for q in r["quarters"] if q["lengths"]) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--lengths", default="4:256:4", type=parse_lengths,
                   help="start:stop:step, stop included (default 4:256:4)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--compilers", default="eager,inductor,ptc",
                   type=lambda s: [c for c in s.split(",") if c])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--repeat", type=int, default=0,
                   help="in-order sweeps whose median is the second sweep (default: 3 on "
                        "cuda, 1 on cpu)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--warm-caches", action="store_true",
                   help="keep ptc's and Inductor's disk caches (default: fresh empty ones)")
    p.add_argument("--out", help="folder for dynamic_sweep.json and dynamic_sweep.md")
    argv = sys.argv[1:] if argv is None else argv
    a = p.parse_args(argv)
    a.repeat = a.repeat or (3 if a.device == "cuda" else 1)
    if a.worker:
        print("ROW " + json.dumps(measure(a, a.worker)), flush=True)
        return 0
    if not a.warm_caches:  # before torch and ptc are imported
        cold = tempfile.mkdtemp(prefix="dynamic_sweep_")
        atexit.register(shutil.rmtree, cold, True)
        os.environ["PTC_CACHE_DIR"] = os.path.join(cold, "ptc")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cold, "inductor")
    unknown = set(a.compilers) - {"eager", "inductor", "ptc"}
    if unknown:
        p.error("unknown compilers: %s" % ", ".join(sorted(unknown)))
    rows = run(a, argv)
    md = table(a, rows)
    print()
    print(md, end="")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "dynamic_sweep.json"), "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items()}, "rows": rows}, f, indent=1)
        with open(os.path.join(a.out, "dynamic_sweep.md"), "w") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
