#!/usr/bin/env python3
"""CPU inference table of five models: eager, Inductor, ptc.compile and torch.compile(backend="ptc") (a benchmark, not a test).

The models of issue 17's CPU table, random weights, eval mode, f32, under
torch.no_grad():

  resnet18             torchvision, batch 8, 3x224x224
  mobilenet_v3_small   torchvision, batch 8, 3x224x224
  bert_4l              Hugging Face BertModel, 4 layers (else BertConfig's defaults), ids 4x128
  gpt2_4l              Hugging Face GPT2Model, 4 layers (else GPT2Config's defaults), ids 4x128
  vit_tiny             timm vit_tiny_patch16_224, batch 8

The contenders (--contenders, all four by default): eager; "inductor",
torch.compile's default; "ptc", ptc.compile (ptc's own front end); and
"dynamo_ptc", torch.compile(backend="ptc") (Dynamo's front end feeding ptc's
compiler). Each compiler's graphs and graph breaks are counted on its first
call: ptc's from its compile events, Dynamo's from the graphs it handed its
backend and torch._dynamo's break counter.

All contenders live in one process with the same --threads (2 by
default) and are timed interleaved: each round runs every contender once
(--calls calls each, mean per call), the order rotating from round to round,
so that a burst of load from elsewhere on a shared machine weighs on all of
them. Each contender's time is its best round; --rounds is at least 2. The
compiled outputs are checked against eager's first (relative error in the
table). Compile times are the first call's.

    python3 bench/cpu_models.py [--models a,b] [--contenders eager,ptc,...] [--threads N]
                                [--rounds R] [--calls C] [--json FILE]

--contenders ptc-contiguous times ptc compiled with PTC_LAYOUT=contiguous (no
layout planning: every buffer contiguous) in the same rounds: the before/after
of layout planning in one process. --contenders ptc-weights-kept likewise
times ptc compiled with PTC_WEIGHT_CACHE=1 (kept channels-last copies of
convolution weights; by default torch's convolutions copy them every call),
and --contenders ptc-unfolded with PTC_FOLD_CONV=0 (eval BatchNorms kept as
kernels after their convolutions instead of folded into the weights).
"""
import argparse
import json
import math
import os
import sys
import time

MODELS = ["resnet18", "mobilenet_v3_small", "bert_4l", "gpt2_4l", "vit_tiny"]
CONTENDERS = ["eager", "inductor", "ptc", "dynamo_ptc"]
LABELS = {"eager": "eager", "inductor": "Inductor", "ptc": "ptc.compile",
          "dynamo_ptc": "torch.compile(backend=ptc)", "ptc-contiguous": "ptc, PTC_LAYOUT=contiguous",
          "ptc-weights-kept": "ptc, PTC_WEIGHT_CACHE=1", "ptc-unfolded": "ptc, PTC_FOLD_CONV=0"}


def build_model(name):
    """-> (module in eval mode, example inputs tuple) on the CPU."""
    import torch
    torch.manual_seed(0)
    if name in ("resnet18", "mobilenet_v3_small"):
        import torchvision
        return getattr(torchvision.models, name)().eval(), (torch.randn(8, 3, 224, 224),)
    if name == "vit_tiny":
        import timm
        m = timm.create_model("vit_tiny_patch16_224", pretrained=False)
        return m.eval(), (torch.randn(8, 3, 224, 224),)
    if name in ("bert_4l", "gpt2_4l"):
        import transformers
        if name == "bert_4l":
            cfg = transformers.BertConfig(num_hidden_layers=4)
            m = transformers.BertModel(cfg)
        else:
            cfg = transformers.GPT2Config(n_layer=4)
            m = transformers.GPT2Model(cfg)
        return m.eval(), (torch.randint(0, cfg.vocab_size, (4, 128)),)
    raise ValueError("unknown model %s" % name)


def first_tensor(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "keys"):
        return first_tensor(list(out.values())[0])
    return first_tensor(out[0])


def rel_error(got, want):
    got, want = got.double(), want.double()
    den = want.norm().item()
    return (got - want).norm().item() / (den if den > 0 else 1.0)


def with_env(fn, name, value):
    """fn, its first call (the compile) run with os.environ[name] = value."""
    state = {"first": True}

    def call(*args):
        if not state["first"]:
            return fn(*args)
        state["first"] = False
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            return fn(*args)
        finally:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old
    return call


class DynamoGraphs:
    """A Dynamo backend that counts the graphs Dynamo hands it."""

    def __init__(self, backend):
        self.backend, self.graphs = backend, 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.backend(gm, example_inputs)


def contenders(model, names):
    """name -> (callable model, compiled lazily by its first call; its graph
    and break counts after that call, or None)."""
    import torch
    import ptc
    import ptc._dynamo
    from torch._dynamo.utils import counters

    def dynamo(backend):
        seen = DynamoGraphs(backend)
        breaks = lambda: sum(counters["graph_break"].values())  # noqa: E731
        before = breaks()
        return torch.compile(model, backend=seen), lambda: (seen.graphs, breaks() - before)

    def ptc_counts(m):
        ex = ptc.ExplainOutput(m._ptc_compiled._events(), None)
        return lambda: (ex.graph_count, ex.break_count)

    made = {}
    for k in names:
        if k == "eager":
            made[k] = (model, lambda: None)
        elif k == "inductor":
            from torch._inductor.compile_fx import compile_fx
            made[k] = dynamo(compile_fx)
        elif k == "ptc":
            m = ptc.compile(model)
            made[k] = (m, lambda m=m: ptc_counts(m)())
        elif k == "ptc-contiguous":
            made[k] = (with_env(ptc.compile(model), "PTC_LAYOUT", "contiguous"), lambda: None)
        elif k == "ptc-weights-kept":
            made[k] = (with_env(ptc.compile(model), "PTC_WEIGHT_CACHE", "1"), lambda: None)
        elif k == "ptc-unfolded":
            made[k] = (with_env(ptc.compile(model), "PTC_FOLD_CONV", "0"), lambda: None)
        elif k == "dynamo_ptc":
            made[k] = dynamo(ptc._dynamo.ptc_backend)
        else:
            raise ValueError("unknown contender %s (one of %s)" % (k, ", ".join(LABELS)))
    return made


def mean_call_ms(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) * 1e3 / calls


def bench_model(name, names, rounds, calls):
    import torch
    model, args = build_model(name)
    made = contenders(model, names)
    fns = {k: fn for k, (fn, _) in made.items()}
    row = {"model": name, "compile_s": {}, "rel_err": {}, "graphs_breaks": {},
           "rounds_ms": {k: [] for k in fns}}
    with torch.no_grad():
        want = first_tensor(model(*args))
        for k, fn in fns.items():
            t0 = time.perf_counter()
            got = first_tensor(fn(*args))
            row["compile_s"][k] = time.perf_counter() - t0
            row["rel_err"][k] = rel_error(got, want)
            row["graphs_breaks"][k] = made[k][1]()
            fn(*args)  # warm
        order = list(fns)
        for r in range(rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:
                row["rounds_ms"][k].append(mean_call_ms(fns[k], args, calls))
    row["ms"] = {k: min(v) for k, v in row["rounds_ms"].items()}
    return row


def table(rows, threads):
    """One line per model: each contender's ms; for each compiler its speed
    against eager, compile seconds, graphs/breaks and relative error."""
    names = list(rows[0]["ms"]) if rows else []
    compilers = [k for k in names if k != "eager"]
    head = ["model"] + ["%s ms" % LABELS[k] for k in names]
    head += ["%s: vs eager, compile s, graphs/breaks, rel err" % LABELS[k] for k in compilers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ms = r["ms"]
        cells = [r["model"]] + ["%.2f" % ms[k] for k in names]
        for k in compilers:
            gb = r["graphs_breaks"].get(k)
            cells.append("%s, %.1f, %s, %.1e" % (
                "%.2fx" % (ms["eager"] / ms[k]) if "eager" in ms else "-", r["compile_s"][k],
                "%d/%d" % tuple(gb) if gb else "-", r["rel_err"][k]))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for k in compilers:
        if "eager" in names and rows:
            g = [r["ms"]["eager"] / r["ms"][k] for r in rows]
            lines.append("geomean %s vs eager: %.2fx" % (LABELS[k], math.exp(sum(map(math.log, g)) / len(g))))
    lines.append("%d threads; best of each contender's rounds (interleaved)" % threads)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    if a.rounds < 2:
        ap.error("--rounds must be at least 2 (interleaved, repeated)")
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch
    torch.set_num_threads(a.threads)
    rows = []
    for name in a.models.split(","):
        row = bench_model(name, a.contenders.split(","), a.rounds, a.calls)
        rows.append(row)
        print("%s: %s" % (name, ", ".join("%s %.2f ms" % kv for kv in row["ms"].items())),
              file=sys.stderr, flush=True)
    print("torch %s, %s" % (torch.__version__, torch.__config__.parallel_info().splitlines()[0]))
    print(table(rows, a.threads))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
