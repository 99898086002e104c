"""The optimizer's step alone (a benchmark, not a test): the time of one
`opt.step()` over a model's parameters, eager torch (foreach, single-tensor
and fused), `torch.compile(opt.step)` (Inductor) and ptc (`ptc.compile(opt.step)`,
ptc's compiled update: python/ptc/_optim.py), taking turns step by step.

    python3 bench/optimizer_step.py [--device cpu|cuda] [--models resnet18,gpt2]
                                    [--optimizers adamw,sgd] [--steps 20] [--threads 2]
                                    [--contenders eager-foreach,eager-single,eager-fused,inductor,ptc]
                                    [--json FILE]

Parameters: torchvision resnet18's (62 tensors, 11.7M values) and a 4-layer
GPT-2's (transformers' GPT2LMHeadModel, n_embd 768 on CUDA, 256 on the CPU
unless --gpt2-embd; vocabulary 50257), float32, each contender with its own
copy and the same random gradients. AdamW: lr 1e-3, weight_decay 0.01; SGD:
lr 0.01, momentum 0.9. Per contender: the median step over --steps timed
rounds (each round runs one step of every contender, in turn, so that a load
that comes and goes weighs on all alike) after two warm-up steps, and the
first step's time (compilation included for inductor and ptc). Eager-fused
is torch's fused kernel (`fused=True`), on the CPU too where torch has one.
On CUDA each step is timed between synchronisations.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

CONTENDERS = ["eager-foreach", "eager-single", "eager-fused", "inductor", "ptc"]


def parameters(name, device, gpt2_embd):
    import torch
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision
        model = torchvision.models.resnet18()
    elif name == "gpt2":
        import transformers as T
        cfg = T.GPT2Config(n_layer=4, n_embd=gpt2_embd, n_head=max(1, gpt2_embd // 64))
        model = T.GPT2LMHeadModel(cfg)
    else:
        raise SystemExit("unknown model %r" % name)
    return [p.detach().to(device).requires_grad_() for p in model.parameters()]


def make_optimizer(kind, params, contender):
    import torch
    flags = {"eager-foreach": dict(foreach=True), "eager-single": dict(foreach=False),
             "eager-fused": dict(fused=True)}.get(contender, {})
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **flags)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, **flags)


def stepper(contender, opt):
    import torch
    if contender == "inductor":
        return torch.compile(opt.step)
    if contender == "ptc":
        import ptc
        return ptc.compile(opt.step)
    return opt.step


def timed(fn, sync):
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def bench_case(model, kind, a):
    import torch
    base = parameters(model, a.device, a.gpt2_embd)
    gen = torch.Generator(device="cpu").manual_seed(1)
    grads = [torch.randn(p.shape, generator=gen).to(a.device) for p in base]
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    runs, errors = {}, {}
    for c in a.contenders:
        params = [p.detach().clone().requires_grad_() for p in base]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        try:
            opt = make_optimizer(kind, params, c)
            step = stepper(c, opt)
            first = timed(step, sync)
            runs[c] = dict(params=params, step=step, first=first, times=[])
        except Exception as e:  # a contender torch does not offer here (fused on this device)
            errors[c] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120])
    for _ in range(2):
        for r in runs.values():
            timed(r["step"], sync)
    for _ in range(a.steps):
        for r in runs.values():
            r["times"].append(timed(r["step"], sync))
    ref = runs.get("eager-single") or next(iter(runs.values()))
    rows = []
    for c, r in runs.items():
        worst = max((p - q).abs().max().item() for p, q in zip(r["params"], ref["params"]))
        rows.append(dict(model=model, optimizer=kind, contender=c,
                         median_ms=1e3 * statistics.median(r["times"]),
                         first_ms=1e3 * r["first"], max_abs_diff_vs_single=worst))
    for c, e in errors.items():
        rows.append(dict(model=model, optimizer=kind, contender=c, error=e))
    return rows, sum(p.numel() for p in base), len(base)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", default="resnet18,gpt2")
    ap.add_argument("--optimizers", default="adamw,sgd")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="torch's threads (0: leave)")
    ap.add_argument("--gpt2-embd", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.contenders = a.contenders.split(",")
    a.gpt2_embd = a.gpt2_embd or (768 if a.device == "cuda" else 256)
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = []
    for model in a.models.split(","):
        for kind in a.optimizers.split(","):
            case, numel, ntensors = bench_case(model, kind, a)
            print("%s %s: %d tensors, %.1fM values" % (model, kind, ntensors, numel / 1e6),
                  file=sys.stderr)
            rows += case
    print("| model | optimizer | contender | step ms (median) | first step ms | max |diff| vs eager-single |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print("| %s | %s | %s | - | - | %s |" % (r["model"], r["optimizer"], r["contender"], r["error"]))
        else:
            print("| %s | %s | %s | %.2f | %.1f | %.2e |" % (
                r["model"], r["optimizer"], r["contender"], r["median_ms"], r["first_ms"],
                r["max_abs_diff_vs_single"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=a.device, torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
