"""Distributed training-step benchmark on N ranks: eager vs torch.compile
(Inductor) vs ptc, under DDP or FSDP2, over torch.distributed (gloo on the
CPU, NCCL on GPUs: a GPU per rank).

    python3 bench/ddp_train.py [--ranks 2] [--model mlp|gpt2|resnet50] [--batch 8]
                               [--wrap ddp|fsdp2] [--amp none|bf16] [--warmup 3]
                               [--steps 20] [--runs 2] [--threads N]
                               [--compilers eager,inductor,ptc,ptc-torch-autograd]
                               [--backend gloo|nccl] [--bucket-mb 25] [--out DIR]

How it stays stable on a loaded machine. Each rank trains one copy of the
model per compiler, all from the same weights on the same per-rank batch,
in rounds: a round is one step (forward, loss, backward with the wrapper's
collectives, SGD step) of each compiler, in an order that rotates from
round to round, so a load that comes and goes weighs on all alike. Each
compiler's first step is timed apart (its cold compile: ptc and Inductor
start from empty caches in a temporary folder), then --warmup rounds are
dropped, then --runs windows of --steps rounds are timed. Per window and
compiler: the median step and the spread of its steps (25th-75th
percentile); and eager's step over this compiler's *in the same round*,
whose median is the speed-up reported: a paired ratio moves much less with
the machine's load than the ratio of two medians. The windows' speed-ups
side by side show how far one run can be trusted. On the CPU each step is
also timed by its process's CPU time (all its threads), which does not
count the time a loaded machine gives to other programs: the figures to
compare there (they leave out what overlapping communication with the
backward saves, a wall-clock gain). Every rank uses --threads
threads (default: the cores it may use divided by the ranks; OMP_NUM_THREADS
too, so OpenMP teams of two ranks do not spin against each other). Times
are rank 0's; the ranks wait for each other in every step's collectives.

ptc and ptc-autograd are ptc with compiled autograd (under DDP its forward
splits at the gradient buckets); ptc-torch-autograd uses torch's autograd
for the backward.
Models: an MLP (4 linears of width 512), a 2-layer GPT-2 from a small
config (hidden 128, 4 heads, vocabulary 2000, sequences of 64 tokens), or
torchvision's resnet50 (224x224 images, train mode). --wrap fsdp2 shards
each block (linear, transformer block, bottleneck) and the root with
fully_shard. On CUDA, also each compiler's peak memory above what was
allocated before its step (median over the steps). --out writes
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

VOCAB = 2000


def make_model(name):
    import torch

    torch.manual_seed(0)
    if name == "mlp":
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
        return torch.nn.Sequential(*layers)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50()
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=128, use_cache=False)
    return GPT2LMHeadModel(cfg)


def blocks(name, model):
    """The modules FSDP2 shards one by one."""
    if name == "mlp":
        return [m for m in model if hasattr(m, "weight")]
    if name == "resnet50":
        return [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]
    return list(model.transformer.h)


def make_batch(name, batch, rank, device):
    import torch

    g = torch.Generator().manual_seed(1000 + rank)
    if name == "mlp":
        return (torch.randn(batch, 512, generator=g).to(device),)
    if name == "resnet50":
        return (torch.randn(batch, 3, 224, 224, generator=g).to(device),
                torch.randint(0, 1000, (batch,), generator=g).to(device))
    return (torch.randint(0, VOCAB, (batch, 64), generator=g).to(device),)


def loss_of(name, model, batch):
    import torch

    if name == "mlp":
        return model(batch[0]).square().mean()
    if name == "resnet50":
        return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
    out = model(batch[0])
    logits = out.logits if hasattr(out, "logits") else out[0]
    ids = batch[0]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                             ids[:, 1:].reshape(-1))


def wrap(compiler, model, args):
    import torch

    if args.wrap == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for block in blocks(args.model, model):
            fully_shard(block)
        wrapped = fully_shard(model)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(model, bucket_cap_mb=args.bucket_mb)
    if compiler == "eager":
        return wrapped
    if compiler == "inductor":
        return torch.compile(wrapped)
    import ptc

    return ptc.compile(wrapped)


def percentile(values, q):
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


class Trainer:
    """One compiler's copy of the model, its optimizer and its step."""

    def __init__(self, compiler, base, args, device):
        import torch

        self.compiler, self.args, self.device = compiler, args, device
        self.model = wrap(compiler, copy.deepcopy(base), args)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.peaks = []

    def step(self, batch):
        """One training step: its wall-clock and CPU time in ms (and peak
        memory on CUDA)."""
        import contextlib

        import ptc
        import torch

        ptc.config.compiled_autograd = self.compiler != "ptc-torch-autograd"
        cuda = self.device.type == "cuda"
        amp = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.args.amp == "bf16" \
            else contextlib.nullcontext()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        start, cpu_start = time.perf_counter(), time.process_time()
        with amp:
            loss = loss_of(self.args.model, self.model, batch)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        wall, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - cpu_start) * 1000
        if cuda:
            self.peaks.append((torch.cuda.max_memory_allocated() - before) / 2**20)
        self.loss = loss.item()
        return wall, cpu


CLOCKS = ("wall", "cpu")


def window(trainers, batch, steps, first_round):
    """steps rounds, one step per compiler each, in rotating order: the step
    times per clock and compiler."""
    names = list(trainers)
    times = {clock: {c: [] for c in names} for clock in CLOCKS}
    for i in range(steps):
        k = (first_round + i) % len(names)
        for c in names[k:] + names[:k]:
            for clock, ms in zip(CLOCKS, trainers[c].step(batch)):
                times[clock][c].append(ms)
    return times


def summarize(times):
    """Per compiler: median, 25th and 75th percentile of its steps, and the
    median (and quartiles) of eager's step over its step in the same round."""
    out = {}
    for c, ts in times.items():
        r = {"median_ms": statistics.median(ts), "p25_ms": percentile(ts, 0.25), "p75_ms": percentile(ts, 0.75)}
        if "eager" in times:
            ratios = [e / t for e, t in zip(times["eager"], ts)]
            r.update(speedup=statistics.median(ratios), speedup_p25=percentile(ratios, 0.25),
                     speedup_p75=percentile(ratios, 0.75))
        out[c] = r
    return out


def rank_main(rank, args, port, cache):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PTC_CACHE_DIR=cache + "/ptc",
                      TORCHINDUCTOR_CACHE_DIR=cache + "/inductor", OMP_NUM_THREADS=str(args.threads))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    options = {}
    if args.backend == "nccl":
        torch.cuda.set_device(rank)
        device = options["device_id"] = torch.device("cuda", rank)
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks, **options)
    import ptc

    base = make_model(args.model).to(device)
    compilers = args.compilers.split(",")
    trainers = {c: Trainer(c, base, args, device) for c in compilers}
    batch = make_batch(args.model, args.batch, rank, device)
    first = {}
    for c in compilers:  # each compiler's cold first step
        dist.barrier()
        first[c] = trainers[c].step(batch)[0] / 1000
    window(trainers, batch, args.warmup, 0)
    runs = []
    for run in range(args.runs):
        dist.barrier()
        times = window(trainers, batch, args.steps, run * args.steps)
        runs.append({clock: summarize(times[clock]) for clock in CLOCKS})
    if rank == 0:
        result = {"model": args.model, "wrap": args.wrap, "amp": args.amp, "ranks": args.ranks,
                  "backend": args.backend, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
                  "threads": args.threads,
                  "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                  "torch": torch.__version__, "ptc": ptc.__version__, "compilers": {}}
        for c in compilers:
            t = trainers[c]
            result["compilers"][c] = {"first_step_s": first[c], "loss": t.loss,
                                      "peak_mib": statistics.median(t.peaks) if t.peaks else None}
            for clock in CLOCKS:
                result["compilers"][c][clock] = [r[clock][c] for r in runs]
        with open(os.path.join(cache, "result.json"), "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


CLOCK_TITLES = {"wall": "wall clock", "cpu": "CPU time of rank 0's process, all its threads "
                                               "(does not count time the machine gave to others)"}


def table(result):
    compilers = result["compilers"]
    lines = ["%s training step, %s, %d ranks (%s, %s), batch %d per rank, amp %s, %d threads per rank; "
             "%d runs of %d rounds after %d warm-up rounds (rank 0)"
             % (result["wrap"].upper(), result["model"], result["ranks"], result["backend"], result["device"],
                result["batch"], result["amp"], result["threads"], len(next(iter(compilers.values()))["wall"]),
                result["steps"], result["warmup"]), ""]
    lines += ["| compiler | first step s | peak MiB | loss |", "|---|---|---|---|"]
    for c, r in compilers.items():
        peak = "%.0f" % r["peak_mib"] if r["peak_mib"] is not None else "-"
        lines.append("| %s | %.2f | %s | %.4f |" % (c, r["first_step_s"], peak, r["loss"]))
    for clock in CLOCKS if result["device"] == "cpu" else ("wall",):
        lines += ["", "Step time, %s:" % CLOCK_TITLES[clock], "",
                  "| compiler | median ms (p25-p75), per run | eager / it, paired per round: median (p25-p75), "
                  "per run |", "|---|---|---|"]
        for c, r in compilers.items():
            ms = " / ".join("%.2f (%.2f-%.2f)" % (w["median_ms"], w["p25_ms"], w["p75_ms"]) for w in r[clock])
            up = " / ".join("%.2fx (%.2f-%.2f)" % (w["speedup"], w["speedup_p25"], w["speedup_p75"])
                            for w in r[clock] if "speedup" in w) or "-"
            lines.append("| %s | %s | %s |" % (c, ms, up))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", choices=("mlp", "gpt2", "resnet50"), default="mlp")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    ap.add_argument("--amp", choices=("none", "bf16"), default="none")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--compilers", default="eager,inductor,ptc,ptc-torch-autograd")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.threads is None:
        args.threads = max(1, len(os.sched_getaffinity(0)) // args.ranks)
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
