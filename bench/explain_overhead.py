"""What ptexplain's own measuring costs a CPU training step (issue 12 item
11): a 2-layer GPT-2 (hidden 256, 4 heads, vocabulary 2000, 8 x 64 tokens)
or torchvision's resnet18 (8 x 3 x 64 x 64) in train mode, forward + loss +
backward + SGD, compiled by ptc.compile, one torch thread. Prints the median
step time (wall and this process's CPU time) over --steps steps after three
warm-up ones.

    python3 bench/explain_overhead.py [--model gpt2|resnet18] [--steps 16]
                                      [--compiled-autograd] [--toggle]
    ptexplain bench/explain_overhead.py [same options]

--toggle (under ptexplain) turns measuring on and off on alternate steps of
one process and prints both medians: the machine's load weighs on both
alike. Without it, compare a plain run with a ptexplain run started at the
same time (both see the same load); on a shared machine only such paired
numbers mean anything.
"""
import argparse
import statistics
import time

import torch

import ptc


def build(a):
    """The model in train mode and a function computing its loss."""
    torch.manual_seed(0)
    if a.model == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10).train()
        x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
        compiled = ptc.compile(model)
        return model, lambda: torch.nn.functional.cross_entropy(compiled(x), y)
    import transformers as T
    model = T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=2000,
                                           n_positions=1024, bos_token_id=0,
                                           eos_token_id=0)).train()
    ids = torch.randint(0, 2000, (8, 64))
    compiled = ptc.compile(model)
    return model, lambda: compiled(input_ids=ids, labels=ids).loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["gpt2", "resnet18"], default="gpt2")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--compiled-autograd", action="store_true")
    p.add_argument("--toggle", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    ptc.config.compiled_autograd = a.compiled_autograd
    model, loss = build(a)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    for _ in range(3):
        step()
    wall, cpu = {True: [], False: []}, {True: [], False: []}
    for i in range(a.steps):
        on = a.toggle and i % 2 == 0
        if a.toggle:
            ptc._C._measure(on)
        t, c = time.perf_counter(), time.process_time()
        step()
        wall[on].append((time.perf_counter() - t) * 1000)
        cpu[on].append((time.process_time() - c) * 1000)
    if a.toggle:
        ptc._C._measure(True)
    for on in (True, False) if a.toggle else (False,):
        label = ("measured" if on else "unmeasured") if a.toggle else "step"
        print("%s: median %.1f ms, cpu %.1f ms over %d steps"
              % (label, statistics.median(wall[on]), statistics.median(cpu[on]), len(wall[on])))


if __name__ == "__main__":
    main()
