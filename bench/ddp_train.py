"""DDP training-step benchmark on N ranks: eager DDP vs torch.compile
(Inductor) vs ptc, over torch.distributed (gloo on the CPU, NCCL on GPUs).

    python3 bench/ddp_train.py [--ranks 2] [--model mlp|gpt2] [--batch 8] [--steps 10]
                               [--runs 2] [--compilers eager,inductor,ptc,ptc-autograd]
                               [--backend gloo|nccl] [--bucket-mb 25] [--out DIR]

Each rank trains one DDP copy of the model per compiler, all from the same
weights on the same per-rank batches, a step of each in turn (forward, loss,
backward with DDP's all-reduce, SGD step), so a load that comes and goes on
the machine weighs on all alike. ptc-autograd is ptc with compiled autograd
(its forward split at DDP's gradient buckets); ptc uses torch's autograd for
the backward. --runs windows of --steps rounds after two warm-up rounds: one
median per compiler and run (rank 0's clock), eager's median over each
compiler's, and each compiler's first step (its cold compile included; ptc
and Inductor start from empty caches in a temporary folder). Models: an MLP
(4 linears of width 512) or a 2-layer GPT-2 from a small config (hidden 128,
4 heads, vocabulary 2000, sequences of 64 tokens). --out writes
ddp_train.json and ddp_train.md.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(name):
    import torch

    torch.manual_seed(0)
    if name == "mlp":
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
        return torch.nn.Sequential(*layers)
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=2000, n_positions=128)
    return GPT2LMHeadModel(cfg)


def make_batch(name, batch, rank, device):
    import torch

    g = torch.Generator().manual_seed(1000 + rank)
    if name == "mlp":
        return (torch.randn(batch, 512, generator=g).to(device),)
    return (torch.randint(0, 2000, (batch, 64), generator=g).to(device),)


def loss_of(name, out, batch):
    if name == "mlp":
        return out.square().mean()
    import torch

    logits = out.logits if hasattr(out, "logits") else out[0]
    ids = batch[0]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             ids[:, 1:].reshape(-1))


def wrap(compiler, model, bucket_mb):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, bucket_cap_mb=bucket_mb)
    if compiler == "eager":
        return ddp
    if compiler == "inductor":
        return torch.compile(ddp)
    import ptc

    return ptc.compile(ddp)


def rank_main(rank, args, port, cache):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PTC_CACHE_DIR=cache + "/ptc",
                      TORCHINDUCTOR_CACHE_DIR=cache + "/inductor")
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if args.backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    import ptc

    base = make_model(args.model).to(device)
    compilers = args.compilers.split(",")
    runs = {}
    for c in compilers:
        model = wrap(c, copy.deepcopy(base), args.bucket_mb)
        runs[c] = {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=1e-3),
                   "times": [], "first": None}
    batch = make_batch(args.model, args.batch, rank, device)

    def step(c):
        r = runs[c]
        ptc.config.compiled_autograd = c == "ptc-autograd"
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = loss_of(args.model, r["model"](*batch), batch)
        loss.backward()
        r["opt"].step()
        r["opt"].zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        r["loss"] = loss.item()
        return time.perf_counter() - start

    for c in compilers:  # each compiler's first step, cold
        dist.barrier()
        runs[c]["first"] = step(c)
    for _ in range(2):
        for c in compilers:
            step(c)
    medians = {c: [] for c in compilers}
    for run in range(args.runs):
        times = {c: [] for c in compilers}
        for i in range(args.steps):
            order = compilers[i % len(compilers):] + compilers[:i % len(compilers)]
            for c in order:
                times[c].append(step(c))
        for c in compilers:
            medians[c].append(statistics.median(times[c]) * 1000)
    if rank == 0:
        result = {"model": args.model, "ranks": args.ranks, "backend": args.backend,
                  "batch": args.batch, "steps": args.steps, "threads": args.threads,
                  "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                  "torch": torch.__version__, "ptc": ptc.__version__, "compilers": {}}
        for c in compilers:
            result["compilers"][c] = {
                "median_ms": medians[c], "first_step_s": runs[c]["first"], "loss": runs[c]["loss"],
                "eager_over_this": [e / m for e, m in zip(medians.get("eager", medians[c]), medians[c])]}
        with open(os.path.join(cache, "result.json"), "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def table(result):
    lines = ["DDP training step, %s, %d ranks (%s, %s), batch %d; median ms per run (rank 0)"
             % (result["model"], result["ranks"], result["backend"], result["device"], result["batch"]),
             "", "| compiler | median ms per run | eager / it | first step s | loss |",
             "|---|---|---|---|---|"]
    for c, r in result["compilers"].items():
        lines.append("| %s | %s | %s | %.2f | %.4f |" % (
            c, " / ".join("%.2f" % m for m in r["median_ms"]),
            " / ".join("%.2f" % x for x in r["eager_over_this"]), r["first_step_s"], r["loss"]))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", choices=("mlp", "gpt2"), default="mlp")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compilers", default="eager,inductor,ptc,ptc-autograd")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="ddp_train_") as cache:
        mp.spawn(rank_main, args=(args, port, cache), nprocs=args.ranks)
        with open(os.path.join(cache, "result.json")) as f:
            result = json.load(f)
    text = table(result)
    sys.stdout.write(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "ddp_train.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, "ddp_train.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
