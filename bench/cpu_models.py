#!/usr/bin/env python3
"""CPU inference table of five models: eager, Inductor and ptc (a benchmark, not a test).

The models of issue 17's CPU table, random weights, eval mode, f32, under
torch.no_grad():

  resnet18             torchvision, batch 8, 3x224x224
  mobilenet_v3_small   torchvision, batch 8, 3x224x224
  bert_4l              Hugging Face BertModel, 4 layers (else BertConfig's defaults), ids 4x128
  gpt2_4l              Hugging Face GPT2Model, 4 layers (else GPT2Config's defaults), ids 4x128
  vit_tiny             timm vit_tiny_patch16_224, batch 8

All three contenders live in one process with the same --threads (2 by
default) and are timed interleaved: each round runs every contender once
(--calls calls each, mean per call), the order rotating from round to round,
so that a burst of load from elsewhere on a shared machine weighs on all of
them. Each contender's time is its best round; --rounds is at least 2. The
compiled outputs are checked against eager's first (relative error in the
table). Compile times are the first call's.

    python3 bench/cpu_models.py [--models a,b] [--threads N] [--rounds R] [--calls C]
                                [--json FILE] [--ptc-contiguous]

--ptc-contiguous adds a fourth contender, ptc compiled with PTC_LAYOUT=contiguous
(no layout planning: every buffer contiguous), timed in the same rounds: the
before/after of layout planning in one process.
"""
import argparse
import json
import math
import os
import sys
import time

MODELS = ["resnet18", "mobilenet_v3_small", "bert_4l", "gpt2_4l", "vit_tiny"]


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


def contenders(model, ptc_contiguous=False):
    """name -> callable model, compiled lazily by its first call."""
    import torch
    import ptc
    fns = {"eager": model, "inductor": torch.compile(model), "ptc": ptc.compile(model)}
    if ptc_contiguous:
        fns["ptc-contiguous"] = with_env(ptc.compile(model), "PTC_LAYOUT", "contiguous")
    return fns


def mean_call_ms(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) * 1e3 / calls


def bench_model(name, rounds, calls, ptc_contiguous=False):
    import torch
    model, args = build_model(name)
    fns = contenders(model, ptc_contiguous)
    row = {"model": name, "compile_s": {}, "rel_err": {}, "rounds_ms": {k: [] for k in fns}}
    with torch.no_grad():
        want = first_tensor(model(*args))
        for k, fn in fns.items():
            t0 = time.perf_counter()
            got = first_tensor(fn(*args))
            row["compile_s"][k] = time.perf_counter() - t0
            row["rel_err"][k] = rel_error(got, want)
            fn(*args)  # warm
        order = list(fns)
        for r in range(rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:
                row["rounds_ms"][k].append(mean_call_ms(fns[k], args, calls))
    row["ms"] = {k: min(v) for k, v in row["rounds_ms"].items()}
    return row


def table(rows, threads):
    lines = ["| model | eager ms | Inductor ms | ptc ms | ptc vs eager | ptc vs Inductor | "
             "compile s (Ind / ptc) | rel err (Ind / ptc) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = r["ms"]
        lines.append("| %s | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.1f / %.1f | %.1e / %.1e |" % (
            r["model"], ms["eager"], ms["inductor"], ms["ptc"], ms["eager"] / ms["ptc"],
            ms["inductor"] / ms["ptc"], r["compile_s"]["inductor"], r["compile_s"]["ptc"],
            r["rel_err"]["inductor"], r["rel_err"]["ptc"]))
    if any("ptc-contiguous" in r["ms"] for r in rows):
        lines += ["", "| model | ptc ms | ptc-contiguous ms | layout planning speed-up |",
                  "|---|---|---|---|"]
        for r in rows:
            ms = r["ms"]
            lines.append("| %s | %.2f | %.2f | %.2fx |" % (
                r["model"], ms["ptc"], ms["ptc-contiguous"], ms["ptc-contiguous"] / ms["ptc"]))
    g = [r["ms"]["inductor"] / r["ms"]["ptc"] for r in rows]
    if g:
        lines.append("")
        lines.append("geomean ptc vs Inductor: %.2fx; %d threads; best of each contender's rounds"
                     % (math.exp(sum(map(math.log, g)) / len(g)), threads))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--ptc-contiguous", action="store_true",
                    help="also time ptc without layout planning (PTC_LAYOUT=contiguous)")
    a = ap.parse_args()
    if a.rounds < 2:
        ap.error("--rounds must be at least 2 (interleaved, repeated)")
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch
    torch.set_num_threads(a.threads)
    rows = []
    for name in a.models.split(","):
        row = bench_model(name, a.rounds, a.calls, a.ptc_contiguous)
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
