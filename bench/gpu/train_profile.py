"""Where a training step's GPU time goes: the kernels of one step of
bench/gpu/train.py's models (forward + loss + backward + fused AdamW, bf16
autocast) under torch.profiler, per compiler, side by side.

    python3 bench/gpu/train_profile.py [--models gpt2] [--compilers eager,inductor,ptc]
                                       [--steps 3] [--top 25] [--cpu N]

Each compiler runs in its own process: three warm-up steps, then --steps
profiled steps; before them, ten steps timed for the step's wall time (synchronised)
and the time the host takes to return from it (all launched, not all run: a
host-bound step returns late). Prints, per model and compiler, the step's total kernel time
and kernel count and the --top kernels by time (per step), then a summary
of the kernel time by kind (gemm, convolution, layout conversions and
copies, ptc's kernels, Triton's, optimizer, other); with --cpu N, also the host's N costliest CPU events
(torch operations, CUDA API calls) by self time per step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kind(name):
    n = name.lower()
    if n.startswith("ptc_"):
        return "ptc"
    if n.startswith("triton"):
        return "triton"
    if "nchwtonhwc" in n or "nhwctonchw" in n or "memcpy" in n:
        return "layout and copies"
    if "conv" in n or "fprop" in n or "wgrad" in n or "dgrad" in n:
        return "convolution"
    if "gemm" in n or "cutlass" in n or "xmma" in n or "nvjet" in n:
        return "gemm"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    return "other"


def worker(name, compiler, steps, top, cpu_top):
    import torch
    from train import build
    model, batch, lossf = build(name)
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if compiler == "inductor":
        model = torch.compile(model)
    elif compiler == "ptc":
        import ptc
        model = ptc.compile(model)

    def step():
        args, kwargs = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(model(*args, **kwargs))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    host, wall, cpu = [], [], []
    for _ in range(10):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    from torch.profiler import profile, ProfilerActivity
    acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu_top else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name, [0.0, 0])
            k[0] += e.device_time / 1e3 / steps
            k[1] += 1
    rows = sorted(([n, t, c / steps] for n, (t, c) in kernels.items()), key=lambda r: -r[1])
    events = sorted(([e.key, e.self_cpu_time_total / 1e3 / steps, e.count / steps]
                   for e in prof.key_averages() if e.self_cpu_time_total > 0),
                  key=lambda r: -r[1]) if cpu_top else []
    print(json.dumps({"model": name, "compiler": compiler, "kernels": rows[:top],
                      "total_ms": sum(r[1] for r in rows),
                      "host_ms": statistics.median(host), "step_ms": statistics.median(wall),
                      "cpu_ms": statistics.median(cpu), "count": sum(r[2] for r in rows),
                      "kinds": by_kind(rows), "host": events[:cpu_top],
                      "host_profiled_ms": sum(r[1] for r in events)}))


def by_kind(rows):
    kinds = {}
    for n, t, c in rows:
        k = kinds.setdefault(kind(n), [0.0, 0])
        k[0] += t
        k[1] += c
    return kinds


def report(r):
    print(f"\n## {r['model']} / {r['compiler']}: {r['total_ms']:.2f} ms of kernels a step, "
          f"{r['count']:.0f} launches; step {r['step_ms']:.2f} ms, of which the host "
          f"returns after {r['host_ms']:.2f} ms (process CPU {r['cpu_ms']:.2f} ms)")
    print("by kind: " + ", ".join(f"{k} {t:.2f} ms ({c:.0f})" for k, (t, c)
                                  in sorted(r["kinds"].items(), key=lambda kv: -kv[1][0])))
    for n, t, c in r["kernels"]:
        print(f"  {t:7.3f} ms  {c:5.0f}x  {n[:110]}")
    if r["host"]:
        print(f"host: {r['host_profiled_ms']:.2f} ms a step in the profiler's CPU events "
              "(self time, the profiler's own cost included); the largest:")
    for n, t, c in r["host"]:
        print(f"  {t:7.3f} ms  {c:5.0f}x  {n[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2")
    ap.add_argument("--compilers", default="eager,inductor,ptc")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cpu", type=int, default=0, metavar="N",
                    help="also profile the host: the N CPU events of most self time")
    ap.add_argument("--worker", nargs=2)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.steps, a.top, a.cpu)
        return
    for m in a.models.split(","):
        for c in a.compilers.split(","):
            p = subprocess.run([sys.executable, __file__, "--worker", m, c, "--steps",
                                str(a.steps), "--top", str(a.top), "--cpu", str(a.cpu)],
                               capture_output=True, text=True)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode or not lines:
                print(f"\n## {m} / {c}: failed\n{p.stderr[-2000:]}")
                continue
            report(json.loads(lines[-1]))


if __name__ == "__main__":
    main()
