"""Memory of a training step, eager vs ptc.compile (vs torch.compile where
asked): what the forward saves for the backward and the peak of the step,
as deterministic byte counts (a benchmark, not a test).

    python3 bench/train_memory.py [--models resnet18,bert,gpt2] [--dtypes fp32,bf16]
                                  [--compilers eager,ptc] [--device cpu|cuda]
                                  [--batch 4] [--size 64] [--seq 64] [--layers 2]

Each (model, dtype, compiler) runs in a fresh process: two warm-up steps
(compiles included), then one measured step of forward + loss + backward +
AdamW with zero_grad(set_to_none=True) first, under
torch.autocast(dtype=bfloat16) for bf16 (the GPU bench's setting). Columns:

  saved MiB   the tensors the step's autograd nodes keep for the backward at
              the end of the forward, caught with saved_tensors_hooks (eager's
              nodes and ptc's one node per graph alike), unique storages,
              parameters, buffers and the batch left out (they live anyway);
  fwd MiB     bytes the forward left alive: the live bytes after the loss
              less those before the forward (saved values, outputs, loss);
  peak MiB    the step's highest live bytes above its start. On the CPU the
              torch allocator's bytes come from torch.profiler
              (profile_memory=True); ptc's CPU arenas are malloc'd outside it,
              so a ptc program's arena (ptc_program_info.arena_bytes, from
              TrainProgram.arena_bytes) is added while that program runs, as
              on CUDA, where the arena comes from torch's allocator per run;
              an arena split into segments (TrainProgram.arena_segments > 1)
              comes from torch's allocator on the CPU too and is not added;
              on CUDA: torch.cuda.max_memory_allocated, reset before each
              phase (forward, backward, optimizer);
  arena MiB   the largest arena of a ptc forward / backward program;
  rss MiB     the process's peak resident set (ru_maxrss), a cross-check that
              counts everything (imports, the compiler, glibc's free pages).
"""
import argparse
import json
import os
import subprocess
import sys

MIB = 1 << 20


def build(name, a, device):
    """The model in train mode, its inputs (args, kwargs) and loss(output)."""
    import torch
    torch.manual_seed(0)
    if name in ("resnet18", "resnet50"):
        import torchvision
        model = getattr(torchvision.models, name)(num_classes=10)
        x = torch.randn(a.batch, 3, a.size, a.size, device=device)
        y = torch.randint(0, 10, (a.batch,), device=device)
        return (model.to(device).train(), ((x,), {}),
                lambda out: torch.nn.functional.cross_entropy(out, y))
    import transformers as T
    ids = torch.randint(0, 2000, (a.batch, a.seq), device=device)
    if name == "bert":
        model = T.BertForMaskedLM(T.BertConfig(
            num_hidden_layers=a.layers, hidden_size=256, num_attention_heads=4,
            intermediate_size=1024, vocab_size=2000, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
    else:
        model = T.GPT2LMHeadModel(T.GPT2Config(
            n_layer=a.layers, n_embd=256, n_head=4, vocab_size=2000, bos_token_id=0,
            eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    return (model.to(device).train(), ((), {"input_ids": ids, "labels": ids}),
            lambda out: out.loss)


class SavedCounter:
    """saved_tensors_hooks that keep a reference to every saved tensor: the
    storages they hold, less the ones that live anyway (`known`)."""

    def __init__(self, known):
        self.known = known
        self.storages = {}

    def pack(self, t):
        s = t.untyped_storage()
        if s.data_ptr() not in self.known:
            self.storages[s.data_ptr()] = s.nbytes()
        return t

    @staticmethod
    def unpack(t):
        return t

    def bytes(self):
        return sum(self.storages.values())


def kineto_events(prof):
    return prof.profiler.kineto_results.events()


def cpu_timeline(prof):
    """[(time ns, bytes)] of torch's CPU allocations (+) and frees (-), in order."""
    return sorted((e.start_ns(), e.nbytes()) for e in kineto_events(prof)
                  if e.name() == "[memory]" and e.nbytes())


def program_runs(prof, arenas):
    """[(start, end, arena bytes)] of ptc's forward and backward runs: the
    CompiledFunction's forward and backward events of the profile."""
    runs = []
    for e in kineto_events(prof):
        if e.name() == "CompiledFunction":
            runs.append((e.start_ns(), e.end_ns(), arenas[0]))
        elif e.name() == "CompiledFunctionBackward":
            runs.append((e.start_ns(), e.end_ns(), arenas[1]))
    return runs


PHASES = ("forward", "backward", "optimizer")


def cpu_peaks(prof, arenas):
    """Per phase (the record_function ranges named phase:<name>): the highest
    live bytes above the profile's start, ptc's arena added while a program
    runs (it is held from a run's start to its end), and the live bytes at
    the phase's end."""
    runs = program_runs(prof, arenas) if arenas else []
    phases = sorted((e.start_ns(), e.end_ns(), e.name()[6:]) for e in kineto_events(prof)
                    if e.name().startswith("phase:"))
    marks = sorted([(s, a) for s, _, a in runs] + [(e, -a) for _, e, a in runs])
    changes = sorted(cpu_timeline(prof) + marks)
    live = 0
    out = {p: {"peak": 0, "end": 0} for p in PHASES}
    for t, delta in changes:
        live += delta
        for start, end, name in phases:
            if start <= t <= end:
                out[name]["peak"] = max(out[name]["peak"], live)
    live = 0
    for start, end, name in phases:
        out[name]["end"] = sum(d for t, d in changes if t <= end)
    return out


def ptc_arenas(loss):
    """The largest forward and backward arenas of the compiled programs
    whose autograd nodes lead to loss, and of those the ones held outside
    torch's allocator (one arena: ptc's own; an arena split into segments
    comes from torch's allocator, which the profile sees)."""
    fwd = bwd = fwd_own = bwd_own = 0
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        program = getattr(node, "program", None)
        if program is not None and hasattr(program, "arena_bytes"):
            f, b = program.arena_bytes
            fs, bs = program.arena_segments
            fwd, bwd = max(fwd, f), max(bwd, b)
            fwd_own = max(fwd_own, f if fs == 1 else 0)
            bwd_own = max(bwd_own, b if bs == 1 else 0)
        todo += [n for n, _ in node.next_functions]
    return (fwd, bwd), (fwd_own, bwd_own)


def worker(a, name, dtype, compiler):
    import resource
    import torch
    torch.set_num_threads(a.threads)
    device = a.device
    model, (args, kwargs), lossf = build(name, a, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = model
    if compiler == "inductor":
        run = torch.compile(model)
    elif compiler == "ptc":
        import ptc
        ptc.config.compiled_autograd = True
        run = ptc.compile(model)
    cast = torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16")

    def forward():
        with cast:
            return lossf(run(*args, **kwargs))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward()
        loss.backward()
        opt.step()
        return loss

    for _ in range(2):
        step()
    known = {t.untyped_storage().data_ptr() for t in
             list(model.parameters()) + list(model.buffers()) + list(args) + list(kwargs.values())}
    # what the forward saves and leaves alive
    opt.zero_grad(set_to_none=True)
    counter = SavedCounter(known)
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        loss = forward()
    if device == "cuda":
        torch.cuda.synchronize()
        fwd_alive = torch.cuda.memory_allocated() - before
    loss.backward()
    opt.step()
    with cast:
        arenas, own = ptc_arenas(forward()) if compiler == "ptc" else (None, None)
    # the step's peak
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        phase_peak = []

        def phase_done():
            torch.cuda.synchronize()
            phase_peak.append(torch.cuda.max_memory_allocated() - base)
            torch.cuda.reset_peak_memory_stats()

        torch.cuda.reset_peak_memory_stats()
        loss = forward()
        phase_done()
        loss.backward()
        phase_done()
        opt.step()
        phase_done()
        phases = {p: {"peak": x} for p, x in zip(PHASES, phase_peak)}
        peak = max(phase_peak)
    else:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler import record_function
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function("phase:forward"):
                loss = forward()
            with record_function("phase:backward"):
                loss.backward()
            with record_function("phase:optimizer"):
                opt.step()
        phases = cpu_peaks(prof, own)
        peak = max(p["peak"] for p in phases.values())
        fwd_alive = phases["forward"]["end"]
    row = {"model": name, "dtype": dtype, "compiler": compiler,
           "saved_mib": counter.bytes() / MIB, "fwd_mib": fwd_alive / MIB,
           "peak_mib": peak / MIB,
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    row["phase_peak_mib"] = [phases[p]["peak"] / MIB for p in PHASES]
    if arenas:
        row["arena_mib"] = [x / MIB for x in arenas]
    print(json.dumps(row))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,bert,gpt2")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--compilers", default="eager,ptc")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=64, help="image side (resnet)")
    ap.add_argument("--seq", type=int, default=64, help="tokens per sequence (bert, gpt2)")
    ap.add_argument("--layers", type=int, default=2, help="transformer layers")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", nargs=3)
    a = ap.parse_args()
    if a.worker:
        return worker(a, *a.worker)
    rows = []
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            for compiler in a.compilers.split(","):
                rows.append(run_worker(a, name, dtype, compiler))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print_table(rows)


def run_worker(a, name, dtype, compiler):
    argv = [sys.executable, __file__, "--worker", name, dtype, compiler]
    for k in ("device", "batch", "size", "seq", "layers", "threads"):
        argv += ["--" + k, str(getattr(a, k))]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        return {"model": name, "dtype": dtype, "compiler": compiler,
                "error": r.stderr.strip()[-600:]}
    return json.loads(lines[-1])


def print_table(rows):
    print("| model | dtype | compiler | saved MiB | fwd MiB | peak MiB | peak fwd/bwd/opt MiB "
          "| arena MiB fwd/bwd | rss MiB |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print("| %s | %s | %s | error: %s | | | | | |" % (
                r["model"], r["dtype"], r["compiler"], r["error"].splitlines()[-1][:80]))
            continue
        arena = "%.2f / %.2f" % tuple(r["arena_mib"]) if "arena_mib" in r else ""
        phases = "%.2f / %.2f / %.2f" % tuple(r["phase_peak_mib"]) if "phase_peak_mib" in r else ""
        print("| %s | %s | %s | %.2f | %.2f | %.2f | %s | %s | %.0f |" % (
            r["model"], r["dtype"], r["compiler"], r["saved_mib"], r["fwd_mib"],
            r["peak_mib"], phases, arena, r["rss_mib"]))


if __name__ == "__main__":
    main()
