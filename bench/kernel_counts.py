"""Kernels per call of GPT-2 and BERT forwards, on the CPU plan and on the
CUDA plan, without a GPU (a count, not a timing).

    python3 bench/kernel_counts.py [--models gpt2,bert] [--layers 6] [--batch 4]
                                   [--length 196] [--dynamic]

Each model (from a config, no download; GPT-2 as bench/dynamic_sweep.py
builds it, its logits returned; BERT's last hidden state) runs once on the
CPU under ptc.compile with a trace directory; its captured graph, and the
same graph on CUDA (ptcio.ptir_on_cuda), are planned by ptc-run
--emit=kernels. Per plan: ptc's kernels (and the copy kernels among them)
and the extern calls (and the addmm among them), each one launch or more
per call on the GPU (an extern is torch's kernel: cuBLAS, attention).
--dynamic: the length symbolic, as automatic dynamic makes it (a second
call at length + 4 recompiles the graph so).
"""
import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import ptcio  # noqa: E402


def build(name, a, torch):
    import transformers as T
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=a.layers, n_embd=768, n_head=12, vocab_size=8000,
                           n_positions=1024, bos_token_id=0, eos_token_id=0)
        model = T.GPT2LMHeadModel(cfg).eval()
        return lambda ids: model(input_ids=ids).logits
    cfg = T.BertConfig(num_hidden_layers=a.layers, hidden_size=768, num_attention_heads=12,
                       intermediate_size=3072, vocab_size=8000)
    model = T.BertModel(cfg).eval()
    return lambda ids: model(input_ids=ids).last_hidden_state


def captured(name, a, torch, ptc, trace):
    """The .ptir text of the model's graph (the symbolic one with --dynamic)."""
    fn = ptc.compile(build(name, a, torch))
    ptc.config.trace_dir = trace
    try:
        with torch.no_grad():
            fn(torch.randint(0, 8000, (a.batch, a.length)))
            if a.dynamic:
                fn(torch.randint(0, 8000, (a.batch, a.length + 4)))
    finally:
        ptc.config.trace_dir = ""
    folders = sorted(d for d in os.listdir(trace) if os.path.isdir(os.path.join(trace, d)))
    with open(os.path.join(trace, folders[-1], "captured.ptir")) as f:
        return f.read()


def counts(ptir, backend, folder):
    path = os.path.join(folder, "graph_%s.ptir" % backend)
    with open(path, "w") as f:
        f.write(ptcio.ptir_on_cuda(ptir) if backend == "cuda" else ptir)
    r = ptcio.ptc_run("--emit=kernels", "--backend", backend, path, timeout=600)
    if r.returncode:
        sys.exit("ptc-run failed: " + r.stderr)
    kernels = re.findall(r"^kernel \d+ (\S+):", r.stdout, re.M)
    externs = re.findall(r"^extern \d+ (\S+):", r.stdout, re.M)
    return (len(kernels), sum("copy" in k for k in kernels), len(externs),
            externs.count("addmm"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,bert")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=196)
    ap.add_argument("--dynamic", action="store_true")
    a = ap.parse_args()
    import torch

    import ptc
    print("| model | plan | kernels | of them copies | externs | of them addmm | launches |")
    print("|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            ptir = captured(name, a, torch, ptc, os.path.join(tmp, "trace"))
            for backend in ("cpu", "cuda"):
                k, c, x, am = counts(ptir, backend, tmp)
                print("| %s %dL b%d %s%d | %s | %d | %d | %d | %d | %d |" %
                      (name, a.layers, a.batch, "L=s " if a.dynamic else "", a.length, backend,
                       k, c, x, am, k + x))


if __name__ == "__main__":
    main()
