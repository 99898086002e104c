"""Training-step benchmark on the CPU: forward + loss + backward + SGD (or
AdamW) step in float32, eager vs torch.compile (Inductor) vs ptc.compile
with compiled autograd, each in its own process with a cold compile cache.
Models (--model): torchvision resnet18 in train mode (cross-entropy,
BatchNorm updating its running statistics), or 2-layer Hugging Face
BertForMaskedLM / GPT2LMHeadModel from small configs (hidden 256, 4 heads,
vocabulary 2000; --batch sequences of --size tokens, the model's own loss
from labels, dropout 0.1 as in the default configs).

    python3 bench/train_cpu.py [--model resnet18] [--batch 8] [--size 64] [--steps 10]
                               [--opt sgd] [--threads 1] [--compilers eager,inductor,ptc]
                               [--out DIR]

--threads sets OMP_NUM_THREADS and torch's thread count in every worker: on
a shared, loaded machine two OpenMP threads that spin-wait for each other
made eager's step 3-20x slower and its times spread over 1.2-7 s.

With --paired, eager and ptc instead train two copies of the model in one
process, a step of each in turn, so that a load that comes and goes on the
machine weighs on both alike; it prints both medians and their ratio.

With --interleaved, one process trains every model of --models
(resnet18,gpt2,bert) with each of --compilers (eager, inductor, ptc and
ptc-autograd: ptc with its compiled backward, ptc-torch-autograd: ptc with
torch's autograd for the backward; --compiled-autograd is then ignored), a step of each in turn, in --runs windows of --steps rounds: one median per
compiler and run, eager's over each compiler's, and each compiler's first
step (its cold compile included); --out writes train_cpu_interleaved.json
and .md.

    python3 bench/train_cpu.py --interleaved [--models resnet18,gpt2,bert]
                               [--runs 2] [--steps 10] [--out DIR]

Per compiler: the median step time over --steps timed steps after three
warm-up steps, the first step's time (the cold compile included), the loss
after the timed steps (all start from the same weights and batch) and, for
ptc, the graph and break counts of ptc.explain. Writes train_cpu.json and
train_cpu.md to --out when given.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def build(a):
    """The model in train mode, its inputs (args, kwargs) and loss(output)."""
    import torch
    torch.manual_seed(0)
    if a.model == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10).train()
        x = torch.randn(a.batch, 3, a.size, a.size)
        y = torch.randint(0, 10, (a.batch,))
        return model, ((x,), {}), lambda out: torch.nn.functional.cross_entropy(out, y)
    import transformers as T
    ids = torch.randint(0, 2000, (a.batch, a.size))
    labels = ids.clone()
    if a.model == "bert":
        labels[torch.rand(ids.shape) > 0.15] = -100  # MLM: 15% of the positions count
        model = T.BertForMaskedLM(T.BertConfig(
            num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
            vocab_size=2000, max_position_embeddings=max(512, a.size)))
    else:
        model = T.GPT2LMHeadModel(T.GPT2Config(
            n_layer=2, n_embd=256, n_head=4, vocab_size=2000, n_positions=max(1024, a.size),
            bos_token_id=0, eos_token_id=0))
    return model.train(), ((), {"input_ids": ids, "labels": labels}), lambda out: out.loss


def make_opt(a, model):
    import torch
    if a.opt == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3)
    return torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)


def training_step(run, inputs, lossf, opt):
    args, kwargs = inputs
    loss = lossf(run(*args, **kwargs))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def paired(a):
    import copy
    import torch
    import ptc
    torch.set_num_threads(a.threads)
    ptc.config.compiled_autograd = bool(a.compiled_autograd)
    model, inputs, lossf = build(a)
    model2 = copy.deepcopy(model)
    opt, opt2 = make_opt(a, model), make_opt(a, model2)
    compiled = ptc.compile(model2)
    times = {"eager": [], "ptc": []}
    for i in range(3 + a.steps):
        for name, run, o in (("eager", model, opt), ("ptc", compiled, opt2)):
            t0 = time.perf_counter()
            training_step(run, inputs, lossf, o)
            if i >= 3:
                times[name].append((time.perf_counter() - t0) * 1e3)
    e, p = statistics.median(times["eager"]), statistics.median(times["ptc"])
    print(json.dumps({"eager_ms": e, "ptc_ms": p, "eager_over_ptc": e / p}))


def interleaved(a):
    """Every model of --models with eager, Inductor and ptc in this one
    process: each compiler trains its own copy of the model from the same
    weights, and every timed round runs one step of each in turn, so a load
    that comes and goes weighs on all three alike. --runs separate windows
    of --steps rounds each give one median per compiler per run. The first
    step of each compiler (its cold compile with empty caches, set before
    torch loads) is reported as first_step_s."""
    import copy
    import torch
    import ptc
    torch.set_num_threads(a.threads)
    names = a.compilers.split(",")
    rows = []

    def step(name):
        # ptc reads the flag when it compiles (the first step, recompiles)
        ptc.config.compiled_autograd = name != "ptc-torch-autograd"
        return training_step(runs[name][0], inputs, lossf, runs[name][1])

    for model_name in a.models.split(","):
        a.model = model_name
        model, inputs, lossf = build(a)
        runs = {}
        first = {}
        for name in names:
            m = copy.deepcopy(model)
            run = {"eager": lambda: m, "inductor": lambda: torch.compile(m),
                   "ptc": lambda: ptc.compile(m), "ptc-autograd": lambda: ptc.compile(m),
                   "ptc-torch-autograd": lambda: ptc.compile(m)}[name]()
            runs[name] = (run, make_opt(a, m))
            t0 = time.perf_counter()
            step(name)
            first[name] = time.perf_counter() - t0
        for _ in range(2):  # warm-up: caches, allocator, recompiles
            for name in names:
                step(name)
        medians = {name: [] for name in names}
        for _ in range(a.runs):
            times = {name: [] for name in names}
            for _ in range(a.steps):
                for name in names:
                    t0 = time.perf_counter()
                    step(name)
                    times[name].append((time.perf_counter() - t0) * 1e3)
            for name in names:
                medians[name].append(statistics.median(times[name]))
        for name in names:
            row = {"model": model_name, "compiler": name, "median_ms": medians[name],
                   "first_step_s": first[name]}
            if name != "eager":
                row["eager_over"] = [e / t for e, t in zip(medians["eager"], medians[name])] \
                    if "eager" in medians else None
            print(json.dumps(row), flush=True)
            rows.append(row)
    if a.out:
        write_interleaved(a, rows)


def write_interleaved(a, rows):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train_cpu_interleaved.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(a.out, "train_cpu_interleaved.md"), "w") as f:
        f.write("batch %d, size %d, f32, %s, %d thread(s); %d runs of %d interleaved rounds, "
                "median step ms per run\n\n" % (a.batch, a.size, a.opt, a.threads, a.runs, a.steps))
        f.write("| model | compiler | step ms (per run) | eager / compiler | first step s |\n"
                "|---|---|---|---|---|\n")
        for r in rows:
            ratio = ", ".join("%.2f" % x for x in r.get("eager_over") or [])
            f.write("| %s | %s | %s | %s | %.1f |\n" % (
                r["model"], r["compiler"], ", ".join("%.1f" % x for x in r["median_ms"]), ratio,
                r["first_step_s"]))


def worker(a, compiler):
    import torch
    torch.set_num_threads(a.threads)
    model, inputs, lossf = build(a)
    opt = make_opt(a, model)
    run = model
    if compiler == "inductor":
        run = torch.compile(model)
    elif compiler == "ptc":
        import ptc
        ptc.config.compiled_autograd = bool(a.compiled_autograd)
        run = ptc.compile(model)

    def step():
        return training_step(run, inputs, lossf, opt)

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
    row = {"compiler": compiler, "median_ms": statistics.median(times),
           "first_step_s": first, "loss": loss.item()}
    if compiler == "ptc":
        import ptc
        args, kwargs = inputs
        ex = ptc.explain(model, backend="ptc")(*args, **kwargs)
        row.update(graphs=ex.graph_count, breaks=ex.break_count,
                   autograd_fallbacks=[f.get("why", "") for f in ex.fallbacks
                                       if "needs gradients" in f.get("error", "")])
    print(json.dumps(row))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet18", "bert", "gpt2"], default="resnet18")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--opt", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compilers", default="eager,inductor,ptc")
    ap.add_argument("--compiled-autograd", type=int, default=1,
                    help="ptc.config.compiled_autograd for the ptc run (1 on, 0 off)")
    ap.add_argument("--out")
    ap.add_argument("--worker")
    ap.add_argument("--paired", action="store_true")
    ap.add_argument("--interleaved", action="store_true")
    ap.add_argument("--models", default="resnet18,gpt2,bert")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    if a.worker:
        return worker(a, a.worker)
    if a.paired or a.interleaved:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before torch and ptc load OpenMP
        if a.interleaved:  # cold compiles: empty caches, set before torch and ptc load
            os.environ["PTC_CACHE_DIR"] = tempfile.mkdtemp()
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
            return interleaved(a)
        return paired(a)
    rows = []
    for compiler in a.compilers.split(","):
        env = dict(os.environ, PTC_CACHE_DIR=tempfile.mkdtemp(),
                   TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(), OMP_NUM_THREADS=str(a.threads))
        argv = [sys.executable, __file__, "--worker", compiler] + sys.argv[1:]
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode or not lines:
            row = {"compiler": compiler, "error": r.stderr.strip()[-600:]}
        else:
            row = json.loads(lines[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    if not a.out:
        return
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train_cpu.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(a.out, "train_cpu.md"), "w") as f:
        shape = "%dx%d" % (a.size, a.size) if a.model == "resnet18" else "%d tokens" % a.size
        f.write("%s batch %d at %s, f32, %s, %d thread(s), median of %d steps\n\n"
                % (a.model, a.batch, shape, a.opt, a.threads, a.steps))
        f.write("| compiler | step ms | first step s | loss | graphs | breaks |\n"
                "|---|---|---|---|---|---|\n")
        for r in rows:
            if "error" in r:
                f.write("| %s | error: %s | | | | |\n" % (r["compiler"], r["error"].splitlines()[-1][:80]))
            else:
                f.write("| %s | %.1f | %.2f | %.4f | %s | %s |\n" % (
                    r["compiler"], r["median_ms"], r["first_step_s"], r["loss"],
                    r.get("graphs", ""), r.get("breaks", "")))


if __name__ == "__main__":
    main()
