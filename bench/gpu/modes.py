"""Small-batch latency under mode="reduce-overhead" (CUDA graphs) on the GPU:
eager, Inductor (default and reduce-overhead) and ptc (default and
reduce-overhead), side by side in one run (issue 19's benchmark).

    python3 bench/gpu/modes.py [--models resnet50,bert_base,gpt2] [--dtypes fp32,bf16]
                               [--compilers eager,inductor,inductor-ro,ptc,ptc-ro]
                               [--iters 50] [--out DIR]

Models (inference, random weights from configs): torchvision resnet50 at
batch 1 (3x224x224), Hugging Face BERT-base and GPT-2 (BertModel /
GPT2Model, default configs) on 1 x 128 tokens; each in fp32 and under bf16
autocast. At these sizes the launch overhead is a large part of a forward,
which is what CUDA graphs remove.

Each (model, dtype) runs in its own worker process with empty compile
caches (PTC_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR in a new temporary folder);
in it each compiler compiles the same module (first call timed: the cold
compile, CUDA-graph recording included for the -ro modes; a compiler that
follows another of its kind in the worker, ptc-ro after ptc, finds that
one's kernels compiled, so its first call is not cold), then its forward
is timed as bench/gpu/run.py times it (median over 5 loops of --iters
back-to-back calls, CUDA events). The outputs are checked against eager's
(relative error in the table). Writes modes.json and modes.md to --out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import autocast_ctx, first_tensor, rel_error, time_ms  # noqa: E402

MODELS = ["resnet50", "bert_base", "gpt2"]
COMPILERS = ["eager", "inductor", "inductor-ro", "ptc", "ptc-ro"]


def build_model(name):
    """-> (module, example inputs) on the GPU at batch 1, eval mode."""
    import torch
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50().eval().cuda(), (torch.randn(1, 3, 224, 224).cuda(),)
    import transformers
    cfg = transformers.BertConfig() if name == "bert_base" else transformers.GPT2Config()
    m = transformers.BertModel(cfg) if name == "bert_base" else transformers.GPT2Model(cfg)
    return m.eval().cuda(), (torch.randint(0, cfg.vocab_size, (1, 128)).cuda(),)


def compiled(compiler, model):
    import torch
    if compiler == "eager":
        return model
    mode = "reduce-overhead" if compiler.endswith("-ro") else "default"
    if compiler.startswith("inductor"):
        return torch.compile(model, mode=mode)
    import ptc
    return ptc.compile(model, mode=mode)


def worker(model_name, dtype, compilers, iters):
    """One (model, dtype): a row per compiler, printed as JSON lines."""
    import torch
    model, args = build_model(model_name)
    with torch.no_grad(), autocast_ctx(dtype):
        ref = first_tensor(model(*args)).float().clone()
        for compiler in compilers:
            fn = compiled(compiler, model)
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = first_tensor(fn(*args)).float().clone()
            torch.cuda.synchronize()
            row = {"model": model_name, "dtype": dtype, "compiler": compiler,
                   "first_call_s": time.perf_counter() - t, "rel_err": rel_error(out, ref),
                   "ms": time_ms(lambda: fn(*args), iters)}
            print(json.dumps(row), flush=True)


def run_worker(model_name, dtype, compilers, iters):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PTC_CACHE_DIR=os.path.join(tmp, "ptc"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
        cmd = [sys.executable, __file__, "--worker", model_name, dtype, ",".join(compilers),
               str(iters)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0:
        print("%s %s: the worker failed (exit %d):\n%s" % (model_name, dtype, p.returncode,
                                                          p.stderr[-2000:]), file=sys.stderr)
    return rows


def table(rows, compilers):
    head = "| model | dtype | " + " | ".join("%s ms" % c for c in compilers) + \
        " | ptc-ro vs inductor-ro | ptc-ro vs eager | first call s (" + ", ".join(compilers[1:]) + \
        "; warm after its kind) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    keys = sorted({(r["model"], r["dtype"]) for r in rows}, key=lambda k: (MODELS.index(k[0]), k[1]))
    for model, dtype in keys:
        by = {r["compiler"]: r for r in rows if r["model"] == model and r["dtype"] == dtype}
        ms = ["%.3f" % by[c]["ms"] if c in by else "-" for c in compilers]
        ratio = (lambda a, b: "%.2fx" % (by[b]["ms"] / by[a]["ms"]) if a in by and b in by else "-")
        first = ["%.1f" % by[c]["first_call_s"] if c in by else "-" for c in compilers[1:]]
        lines.append("| %s | %s | %s | %s | %s | %s |" % (model, dtype, " | ".join(ms),
                     ratio("ptc-ro", "inductor-ro"), ratio("ptc-ro", "eager"), ", ".join(first)))
    return "\n".join(lines)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        name, dtype, compilers, iters = sys.argv[2:6]
        worker(name, dtype, compilers.split(","), int(iters))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--compilers", default=",".join(COMPILERS))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out")
    a = ap.parse_args()
    compilers = a.compilers.split(",")
    rows = []
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            rows += run_worker(name, dtype, compilers, a.iters)
    import torch
    md = "Small-batch latency, %s, torch %s (median of 5 x %d calls)\n\n%s\n" % (
        torch.cuda.get_device_name(0), torch.__version__, a.iters, table(rows, compilers))
    print(md)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "modes.json"), "w") as f:
            json.dump(rows, f, indent=1)
        with open(os.path.join(a.out, "modes.md"), "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
