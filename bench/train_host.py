"""The host's cost of a compiled training step (issue 15): eager and
ptc.compile train two copies of one model in one process, a few steps of
each in turn (so a load that comes and goes on a shared machine weighs on
both alike), and the step's torch operations are counted with
torch.profiler.

    python3 bench/train_host.py [--device cpu|cuda] [--models resnet50,resnet18]
                                [--batch 2] [--size 32] [--rounds 10] [--turn 3]
                                [--thin 1] [--opt adamw|sgd|none] [--threads 1] [--top 12]
                                [--layers 2] [--hidden 64]

A step is forward + cross-entropy + backward + fused AdamW (--opt sgd: SGD;
--opt none: no update, so that on the CPU, where AdamW over resnet50's 23
million parameters takes most of the step, what remains is the part ptc
compiles) on torchvision's model in train mode (BatchNorm updating its running
statistics); on CUDA under bf16 autocast, as bench/gpu/train.py. The CPU
defaults are a tiny size (batch 2 at 32x32, one thread). On the H100 the
issue's measure (where the step is host-bound) is

    python3 bench/train_host.py --device cuda --models resnet50 --batch 32 --size 224

On this CPU resnet50's convolutions (their weight gradients above all) take
most of even a tiny step; --thin K divides the widths of the model's blocks
by K (the stem's 64 channels kept), which leaves the same graph, op for op,
with a fraction of the arithmetic, so that the host's share shows.

--models also takes gpt2 and bert: HF GPT2LMHeadModel and BertForMaskedLM
built from configs of --layers layers of --hidden features (two heads, a
vocabulary of 1000), on --batch sequences of --size tokens, the loss the
model's own (labels = the input ids): small enough that the host's cost of a
step (its kernels, launches, allocations and extern calls a layer) dominates.

Prints per model: each compiler's median ms a step over --rounds turns of
--turn steps (a synchronize ends each turn on CUDA), eager's over ptc's, the
process's CPU time a step (less swayed by other processes on a shared CPU
than the wall clock; on CUDA it includes the synchronize's wait), and
the aten operations of one step (torch.profiler, every aten:: event, nested
ones included): their total and the --top most frequent, side by side.
"""
import argparse
import collections
import copy
import statistics
import time

import torch


def thin(name, divisor):
    """torchvision's resnet `name` with its blocks' widths divided by divisor
    (the 64-channel stem kept): the same graph, op for op, at a fraction of
    the arithmetic."""
    from torchvision.models import resnet

    class Thin(resnet.ResNet):
        def _make_layer(self, block, planes, *args, **kwargs):
            return super()._make_layer(block, planes // divisor, *args, **kwargs)

    block, layers = {"resnet18": (resnet.BasicBlock, [2, 2, 2, 2]),
                     "resnet34": (resnet.BasicBlock, [3, 4, 6, 3]),
                     "resnet50": (resnet.Bottleneck, [3, 4, 6, 3])}[name]
    model = Thin(block, layers, num_classes=10)
    model.fc = torch.nn.Linear(512 // divisor * block.expansion, 10)
    return model


def build_lm(name, a):
    """A small HF language model in train mode (a.layers layers of a.hidden
    features), its input ids and its loss: the model's own."""
    import transformers as T
    torch.manual_seed(0)
    if name == "gpt2":
        model = T.GPT2LMHeadModel(T.GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=2,
                                               vocab_size=1000, n_positions=max(a.size, 8),
                                               bos_token_id=0, eos_token_id=0))
    else:
        model = T.BertForMaskedLM(T.BertConfig(
            num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=2,
            intermediate_size=4 * a.hidden, vocab_size=1000,
            max_position_embeddings=max(a.size, 8)))
    model = model.train().to(a.device)
    ids = torch.randint(0, 1000, (a.batch, a.size), device=a.device)
    return model, ids, lambda model, ids, labels: model(input_ids=ids, labels=labels).loss


def build(name, batch, size, device, divisor=1):
    """The model in train mode (its widths divided by divisor), its input and
    labels."""
    import torchvision
    torch.manual_seed(0)
    model = (getattr(torchvision.models, name)(num_classes=10) if divisor == 1
             else thin(name, divisor))
    model = model.train().to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    return model, x, y


def cross_entropy(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def make_step(model, x, y, device, optimizer, lossf=cross_entropy):
    params = list(model.parameters())
    opt = (torch.optim.AdamW(params, lr=1e-4, fused=True) if optimizer == "adamw"
           else torch.optim.SGD(params, lr=1e-4) if optimizer == "sgd" else None)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = lossf(model, x, y)
        for p in params:
            p.grad = None
        loss.backward()
        if opt is not None:
            opt.step()
        return loss
    return step


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def aten_counts(step, device):
    """The aten operations one step calls: name -> count."""
    from torch.profiler import ProfilerActivity, profile
    sync(device)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        sync(device)
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


def run_model(name, a):
    if name in ("gpt2", "bert"):
        base, x, lossf = build_lm(name, a)
        y = x
    else:
        base, x, y = build(name, a.batch, a.size, a.device, a.thin)
        lossf = cross_entropy
    import ptc
    steps = {"eager": make_step(copy.deepcopy(base), x, y, a.device, a.opt, lossf),
             "ptc": make_step(ptc.compile(copy.deepcopy(base)), x, y, a.device, a.opt, lossf)}
    for step in steps.values():  # compile and warm up
        for _ in range(3):
            step()
    times = {c: [] for c in steps}
    cpu = {c: [] for c in steps}
    for _ in range(a.rounds):
        for c, step in steps.items():
            sync(a.device)
            t, c0 = time.perf_counter(), time.process_time()
            for _ in range(a.turn):
                step()
            sync(a.device)
            times[c].append((time.perf_counter() - t) / a.turn * 1e3)
            cpu[c].append((time.process_time() - c0) / a.turn * 1e3)
    med = {c: statistics.median(v) for c, v in times.items()}
    med_cpu = {c: statistics.median(v) for c, v in cpu.items()}
    shape = ("%d layers x%d, %d tokens" % (a.layers, a.hidden, a.size) if name in ("gpt2", "bert")
             else "%dx%d%s" % (a.size, a.size, " widths/%d" % a.thin if a.thin > 1 else ""))
    print("%s b%d %s %s: eager %.2f ms, ptc %.2f ms a step (eager/ptc %.2fx; median of %d "
          "turns of %d steps); process CPU ms a step: eager %.2f, ptc %.2f"
          % (name, a.batch, shape, a.device, med["eager"], med["ptc"], med["eager"] / med["ptc"], a.rounds, a.turn,
             med_cpu["eager"], med_cpu["ptc"]))
    counts = {c: aten_counts(step, a.device) for c, step in steps.items()}
    print("  aten ops a step: eager %d, ptc %d" % (sum(counts["eager"].values()),
                                                    sum(counts["ptc"].values())))
    names = sorted(set(counts["eager"]) | set(counts["ptc"]),
                   key=lambda n: -max(counts["eager"][n], counts["ptc"][n]))
    print("  %-40s %7s %7s" % ("op", "eager", "ptc"))
    for n in names[:a.top]:
        print("  %-40s %7d %7d" % (n, counts["eager"][n], counts["ptc"][n]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--models", default="resnet50,resnet18")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--turn", type=int, default=3)
    p.add_argument("--thin", type=int, default=1)
    p.add_argument("--opt", default="adamw", choices=["adamw", "sgd", "none"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--layers", type=int, default=2, help="gpt2/bert: layers")
    p.add_argument("--hidden", type=int, default=64, help="gpt2/bert: features")
    a = p.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    for name in a.models.split(","):
        run_model(name, a)


if __name__ == "__main__":
    main()
