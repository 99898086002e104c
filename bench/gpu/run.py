"""The GPU benchmark: eager PyTorch, torch.compile (Inductor, default mode) and
ptc, side by side, in one run.

    python3 bench/gpu/run.py [--out DIR] [--models m1,m2] [--dtypes fp32,bf16]
                             [--budget SECONDS] [--no-inductor] [--no-kernels]
                             [--compilers inductor,ptc,inductor-ma,ptc-ma]

A compiler named with "-ma" runs with mode="max-autotune-no-cudagraphs" (the
kernel bandwidth table then has a column for it).

Models (inference, random weights built from configs, nothing downloaded):
torchvision resnet50, mobilenet_v3_large, convnext_tiny and vit_b_16 at batch
32 (3x224x224), and where installed timm's vit_small_patch16_224 (batch 32)
and Hugging Face BERT-base and GPT-2 (BertModel / GPT2Model from their default
configs) at batch 16 x 128 tokens; each in fp32 and under bf16 autocast.

Per model and dtype: the forward time of each (median of several timed
loops, CUDA events), ptc's speedup over eager and over Inductor, the cold
compile time of both compilers (the first call in a fresh process with empty
caches, the driver's PTX cache included: capture, compile and one run) and
the warm compile time (the first call in a second process that finds the
disk caches), their graph and break counts, and ptc's relative error against
eager. Then the bandwidth of ptc's fused pointwise, softmax and layer_norm
kernels (and Inductor's) against a device-to-device copy measured in the
same run: from the time of back-to-back calls, and from the kernels' own GPU
time under torch.profiler (which leaves out what a call costs on the CPU).
--models "" runs the kernel table alone (a few minutes).

Each (model, dtype) runs in two worker processes (cold, then warm) so that
compile times are honest; the parent writes DIR/bench.json, DIR/bench.md (the
tables) and DIR/bench.svg (speedups over eager). --budget stops starting new
work once that many seconds have passed, and says what was left out;
--merge A/bench.json B/bench.json ... --out DIR writes one report from runs
made in parts.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = ["resnet50", "mobilenet_v3_large", "convnext_tiny", "vit_b_16", "timm_vit_small",
          "bert_base", "gpt2"]


# ---- models -------------------------------------------------------------------------------------

def build_model(name):
    """-> (module, example inputs tuple) on the GPU, eval mode, random weights."""
    import torch
    torch.manual_seed(0)
    if name in ("resnet50", "mobilenet_v3_large", "convnext_tiny", "vit_b_16"):
        import torchvision
        m = getattr(torchvision.models, name)()
        if name == "vit_b_16":  # torchvision zero-initialises the head: outputs would all be 0
            torch.nn.init.normal_(m.heads.head.weight, std=0.02)
        x = torch.randn(32, 3, 224, 224)
        return m.eval().cuda(), (x.cuda(),)
    if name == "timm_vit_small":
        import timm
        m = timm.create_model("vit_small_patch16_224", pretrained=False)
        return m.eval().cuda(), (torch.randn(32, 3, 224, 224).cuda(),)
    if name in ("bert_base", "gpt2"):
        import transformers
        if name == "bert_base":
            cfg = transformers.BertConfig()
            m = transformers.BertModel(cfg)
        else:
            cfg = transformers.GPT2Config()
            m = transformers.GPT2Model(cfg)
        ids = torch.randint(0, cfg.vocab_size, (16, 128))
        return m.eval().cuda(), (ids.cuda(),)
    raise ValueError("unknown model %s" % name)


def available(name):
    try:
        if name.startswith("timm"):
            import timm  # noqa: F401
        elif name in ("bert_base", "gpt2"):
            import transformers  # noqa: F401
        else:
            import torchvision  # noqa: F401
        return True
    except ImportError:
        return False


def first_tensor(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "keys"):
        return first_tensor(list(out.values())[0])
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    raise TypeError("no tensor in the model's output (%s)" % type(out))


# ---- timing -------------------------------------------------------------------------------------

def time_ms(fn, iters, repeats=5, warmup=3):
    """Median over `repeats` of the mean time of `iters` back-to-back calls."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / iters)
    return statistics.median(times)


def device_time_us(event):
    """A torch.profiler average's GPU time (the attribute's name changed in torch 2.x)."""
    return getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)


def kernels_us(fn, calls=20):
    """GPU time of fn's kernels per call, from torch.profiler's device
    activity alone: what the kernels take, without the launch overhead a
    back-to-back timing also sees when a call's CPU work outlasts its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(device_time_us(e) for e in prof.key_averages()) / calls


def rel_error(got, want):
    got, want = got.double(), want.double()
    den = want.norm().item()
    return (got - want).norm().item() / (den if den > 0 else 1.0)


def autocast_ctx(dtype):
    import contextlib
    import torch
    if dtype == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---- workers --------------------------------------------------------------------------------------

# A compiler's name, and "-ma" for its mode="max-autotune-no-cudagraphs" (the
# kernels' launch configurations searched by timing; no CUDA graphs, so the
# kernel table times the kernels themselves).
MAX_AUTOTUNE = "-ma"


def make_compiled(compiler, model):
    import torch
    kwargs = {}
    if compiler.endswith(MAX_AUTOTUNE):
        compiler = compiler[:-len(MAX_AUTOTUNE)]
        kwargs["mode"] = "max-autotune-no-cudagraphs"
    if compiler == "inductor":
        return torch.compile(model, **kwargs)
    import ptc
    return ptc.compile(model, **kwargs)


def counts(compiler, model, args, dtype):
    import torch
    with torch.no_grad(), autocast_ctx(dtype):
        if compiler == "inductor":
            torch._dynamo.reset()
            e = torch._dynamo.explain(model)(*args)
            return e.graph_count, e.graph_break_count
        import ptc
        e = ptc.explain(model)(*args)
        return e.graph_count, e.break_count


def worker_cold(a):
    """Eager timing, then per compiler: first call (cold compile), timing, error."""
    import torch
    model, args = build_model(a.model)
    iters = a.iters
    res = {"model": a.model, "dtype": a.dtype}
    with torch.no_grad(), autocast_ctx(a.dtype):
        ref = first_tensor(model(*args)).float()
        res["eager_ms"] = time_ms(lambda: model(*args), iters)
        for compiler in a.compilers.split(","):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                cm = make_compiled(compiler, model)
                out = first_tensor(cm(*args))
                torch.cuda.synchronize()
            except Exception as e:  # a compiler that fails is reported, not fatal
                res[compiler + "_error"] = "%s: %s" % (type(e).__name__, str(e)[:400])
                continue
            res[compiler + "_cold_s"] = time.perf_counter() - t0
            res[compiler + "_rel_error"] = rel_error(out.float(), ref)
            res[compiler + "_ms"] = time_ms(lambda: cm(*args), iters)
    return res


def worker_warm(a):
    """First call in a process whose compilers find their disk caches; counts."""
    import torch
    model, args = build_model(a.model)
    res = {"model": a.model, "dtype": a.dtype}
    with torch.no_grad(), autocast_ctx(a.dtype):
        model(*args)  # CUDA context, cuDNN/cuBLAS handles: not compile time
        torch.cuda.synchronize()
        for compiler in a.compilers.split(","):
            t0 = time.perf_counter()
            try:
                cm = make_compiled(compiler, model)
                cm(*args)
                torch.cuda.synchronize()
            except Exception as e:
                res[compiler + "_error"] = "%s: %s" % (type(e).__name__, str(e)[:400])
                continue
            res[compiler + "_warm_s"] = time.perf_counter() - t0
    for compiler in a.compilers.split(","):
        try:
            res[compiler + "_graphs"], res[compiler + "_breaks"] = counts(compiler, model, args, a.dtype)
        except Exception as e:
            res[compiler + "_count_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    return res


# Fused kernels: (name, function, input builder, bytes moved per call).
def kernel_cases():
    import torch
    import torch.nn.functional as F
    n = 64 * 1024 * 1024

    def pw(x, y):
        return (x * torch.sigmoid(x) + y) * 0.5

    def bias_gelu(x, b):
        return F.gelu(x + b)

    def softmax(x):
        return torch.softmax(x, -1)

    def layer_norm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def mk(shape, dt):
        return torch.randn(shape, device="cuda", dtype=dt)

    cases = []
    for dt, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        es = torch.tensor([], dtype=dt).element_size()
        cases.append(("x*sigmoid(x)+y %s [%dM]" % (tag, n >> 20), pw,
                      lambda dt=dt: (mk([n], dt), mk([n], dt)), 3 * n * es))
        cases.append(("gelu(x+b) %s [16384,4096]" % tag, bias_gelu,
                      lambda dt=dt: (mk([16384, 4096], dt), mk([4096], dt)), 2 * 16384 * 4096 * es))
        cases.append(("softmax %s [32768,1024]" % tag, softmax,
                      lambda dt=dt: (mk([32768, 1024], dt),), 2 * 32768 * 1024 * es))
        cases.append(("layer_norm %s [32768,768]" % tag, layer_norm,
                      lambda dt=dt: (mk([32768, 768], dt), mk([768], dt), mk([768], dt)),
                      2 * 32768 * 768 * es))
    return cases


def worker_kernels(a):
    import torch
    res = {"kernels": []}
    n = 256 * 1024 * 1024 // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), 20)
    res["copy_gbps"] = 2 * n * 4 / ms / 1e6
    for name, fn, build, nbytes in kernel_cases():
        args = build()
        row = {"name": name, "bytes": nbytes}
        with torch.no_grad():
            want = fn(*args).float()
            for compiler in a.compilers.split(","):
                try:
                    cf = make_compiled(compiler, fn)
                    got = cf(*args)
                    row[compiler + "_rel_error"] = rel_error(got.float(), want)
                    t = time_ms(lambda: cf(*args), 20)
                except Exception as e:
                    row[compiler + "_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
                    continue
                row[compiler + "_gbps"] = nbytes / t / 1e6
                row[compiler + "_pct_copy"] = 100.0 * row[compiler + "_gbps"] / res["copy_gbps"]
                try:
                    us = kernels_us(lambda: cf(*args))
                    row[compiler + "_kernel_pct_copy"] = 100.0 * nbytes / us / 1e3 / res["copy_gbps"]
                except Exception as e:  # the profiler is a second view, not required
                    row[compiler + "_kernel_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
            t = time_ms(lambda: fn(*args), 20)
            row["eager_gbps"] = nbytes / t / 1e6
        res["kernels"].append(row)
    return res


def worker_profile(a):
    """ptc's compiled model under torch.profiler: the GPU time per kernel."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    model, args = build_model(a.model)
    res = {"model": a.model, "dtype": a.dtype}
    with torch.no_grad(), autocast_ctx(a.dtype):
        cm = make_compiled(a.compilers.split(",")[-1], model)
        for _ in range(3):
            cm(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                cm(*args)
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = device_time_us(e)
        if t > 0 and e.key and not e.key.startswith("aten::") and not e.key.startswith("cuda"):
            rows.append((t / 3, e.count // 3, e.key))
    rows.sort(reverse=True)
    res["gpu_us_per_iter"] = sum(r[0] for r in rows)
    res["ptc_kernels_us"] = sum(r[0] for r in rows if r[2].startswith("ptc_"))
    res["top"] = [(round(t, 1), n, k[:90]) for t, n, k in rows[:40]]
    return res


# ---- the parent -----------------------------------------------------------------------------------

def run_worker(kind, a, extra, env, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--iters", str(a.iters),
           "--compilers", a.compilers] + extra
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "%s worker timed out after %ds" % (kind, timeout)}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["worker_s"] = time.time() - t0
            return r
    tail = (p.stdout + p.stderr)[-1500:]
    return {"error": "%s worker failed (exit %d): %s" % (kind, p.returncode, tail)}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, spec="%.2f"):
    return spec % x if isinstance(x, (int, float)) else "-"


def markdown(results, kernels, device, notes):
    lines = ["# GPU benchmark: eager vs torch.compile (Inductor) vs ptc", "", "Device: %s" % device, ""]
    lines.append("| model | dtype | eager ms | Inductor ms | ptc ms | ptc vs eager | ptc vs Inductor | "
                 "cold compile s (Inductor / ptc) | warm compile s (Inductor / ptc) | "
                 "graphs/breaks (Inductor / ptc) | ptc rel. error |")
    lines.append("|" + "---|" * 11)
    for r in results:
        sp_e = r["eager_ms"] / r["ptc_ms"] if r.get("ptc_ms") and r.get("eager_ms") else None
        sp_i = r["inductor_ms"] / r["ptc_ms"] if r.get("ptc_ms") and r.get("inductor_ms") else None
        gb = "%s/%s / %s/%s" % (r.get("inductor_graphs", "-"), r.get("inductor_breaks", "-"),
                                r.get("ptc_graphs", "-"), r.get("ptc_breaks", "-"))
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s |" % (
            r["model"], r["dtype"], fmt(r.get("eager_ms")), fmt(r.get("inductor_ms")), fmt(r.get("ptc_ms")),
            fmt(sp_e, "%.2fx"), fmt(sp_i, "%.2fx"), fmt(r.get("inductor_cold_s"), "%.1f"),
            fmt(r.get("ptc_cold_s"), "%.2f"), fmt(r.get("inductor_warm_s"), "%.1f"),
            fmt(r.get("ptc_warm_s"), "%.2f"), gb, fmt(r.get("ptc_rel_error"), "%.1e")))
    sp_e = geomean([r["eager_ms"] / r["ptc_ms"] for r in results if r.get("ptc_ms") and r.get("eager_ms")])
    sp_i = geomean([r["inductor_ms"] / r["ptc_ms"] for r in results if r.get("ptc_ms") and r.get("inductor_ms")])
    ind_e = geomean([r["eager_ms"] / r["inductor_ms"] for r in results if r.get("inductor_ms") and r.get("eager_ms")])
    lines += ["", "Geomean speedup: ptc vs eager %s, ptc vs Inductor %s, Inductor vs eager %s." % (
        fmt(sp_e, "%.2fx"), fmt(sp_i, "%.2fx"), fmt(ind_e, "%.2fx"))]
    errs = [(r["model"], r["dtype"], k, v) for r in results for k, v in r.items() if k.endswith("error") and
            isinstance(v, str)]
    for m, d, k, v in errs:
        lines.append("- %s %s %s: %s" % (m, d, k, v.replace("\n", " ")[:300]))
    if kernels:
        lines += kernel_table(kernels)
    if notes:
        lines += [""] + ["- " + n for n in notes]
    return "\n".join(lines) + "\n"


def kernel_table(kernels):
    """The bandwidth table: a column per compiler that ran (max-autotune too)."""
    names = {"inductor": "Inductor", "ptc": "ptc", "inductor-ma": "Inductor max-autotune",
             "ptc-ma": "ptc max-autotune"}
    ran = [c for c in names if any(c + "_gbps" in k for k in kernels["kernels"])]
    lines = ["", "## Fused kernels: achieved bandwidth (bytes read + written / time)", "",
             "Device-to-device copy: %.0f GB/s. Each cell: GB/s of 20 back-to-back calls (%% of "
             "copy); in brackets, %% of copy of the kernels' own GPU time (torch.profiler), "
             "which leaves out the calls' launch overhead." % kernels["copy_gbps"], "",
             "| kernel | eager GB/s | " + " | ".join("%s GB/s (%% of copy) [kernels]" % names[c]
                                                    for c in ran) + " |",
             "|---|---|" + "---|" * len(ran)]
    for k in kernels["kernels"]:
        cells = ["%s (%s) [%s]" % (fmt(k.get(c + "_gbps"), "%.0f"), fmt(k.get(c + "_pct_copy"), "%.0f%%"),
                                   fmt(k.get(c + "_kernel_pct_copy"), "%.0f%%")) for c in ran]
        lines.append("| %s | %s | %s |" % (k["name"], fmt(k.get("eager_gbps"), "%.0f"), " | ".join(cells)))
    return lines


def svg(results):
    """Grouped bars: speedup over eager of Inductor and ptc per model/dtype."""
    rows = [r for r in results if r.get("eager_ms")]
    w, h, left, bottom, top = 120 + 70 * max(1, len(rows)), 420, 60, 150, 30
    vals = [r["eager_ms"] / r[k] for r in rows for k in ("inductor_ms", "ptc_ms") if r.get(k)]
    vmax = max([1.0] + vals) * 1.15
    y = lambda v: top + (h - top - bottom) * (1 - v / vmax)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (w, h),
           '<text x="%d" y="18" font-size="14">Speedup over eager PyTorch (higher is better)</text>' % left,
           '<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888" stroke-dasharray="4"/>'
           % (left, y(1), w - 10, y(1))]
    for t in range(0, int(vmax) + 1):
        out.append('<text x="%d" y="%.1f" text-anchor="end">%dx</text>' % (left - 6, y(t) + 4, t))
    for i, r in enumerate(rows):
        x0 = left + 10 + 70 * i
        for j, (k, color) in enumerate((("inductor_ms", "#4c72b0"), ("ptc_ms", "#dd8452"))):
            if r.get(k):
                v = r["eager_ms"] / r[k]
                out.append('<rect x="%d" y="%.1f" width="24" height="%.1f" fill="%s"/>' % (
                    x0 + 26 * j, y(v), y(0) - y(v), color))
                out.append('<text x="%d" y="%.1f" text-anchor="middle" font-size="9">%.2f</text>' % (
                    x0 + 26 * j + 12, y(v) - 3, v))
        out.append('<text transform="translate(%d,%d) rotate(40)">%s %s</text>' % (
            x0, h - bottom + 14, r["model"], r["dtype"]))
    out.append('<rect x="%d" y="%d" width="12" height="12" fill="#4c72b0"/><text x="%d" y="%d">Inductor</text>'
               % (w - 170, 8, w - 154, 18))
    out.append('<rect x="%d" y="%d" width="12" height="12" fill="#dd8452"/><text x="%d" y="%d">ptc</text>'
               % (w - 90, 8, w - 74, 18))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def parent(a):
    import torch
    os.makedirs(a.out, exist_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    start = time.time()
    notes, results, kernels = [], [], None
    root = tempfile.mkdtemp(prefix="ptc-bench-")
    models = [m for m in a.models.split(",") if m]
    todo = [(m, d) for m in models for d in a.dtypes.split(",")]
    for m in models:
        if not available(m):
            notes.append("%s: not installed here, skipped" % m)
    todo = [(m, d) for m, d in todo if available(m)]
    if not a.no_kernels:
        env = dict(os.environ, PTC_CACHE_DIR=os.path.join(root, "kernels-ptc"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "kernels-ind"))
        kernels = run_worker("kernels", a, [], env, 300)
        print("kernels:", json.dumps(kernels), flush=True)
        if "error" in kernels:
            notes.append("kernel benchmark: " + kernels["error"][:500])
            kernels = None
    for m, d in todo:
        if time.time() - start > a.budget:
            notes.append("budget of %ds spent: %s %s not run" % (a.budget, m, d))
            continue
        cache = os.path.join(root, "%s-%s" % (m, d))
        env = dict(os.environ, PTC_CACHE_DIR=os.path.join(cache, "ptc"), PTC_STRICT="1",
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        extra = ["--model", m, "--dtype", d]
        # the NVIDIA driver keeps its own cache of PTX compiled to machine
        # code (~/.nv/ComputeCache): off for the cold worker, or a model
        # measured before on the same machine would compile partly warm
        r = run_worker("cold", a, extra, dict(env, CUDA_CACHE_DISABLE="1"), 400)
        w = run_worker("warm", a, extra, env, 300) if "error" not in r else {}
        r.update({k: v for k, v in w.items() if k not in ("model", "dtype", "worker_s")})
        r["model"], r["dtype"] = m, d
        results.append(r)
        print(json.dumps(r), flush=True)
        with open(os.path.join(a.out, "bench.json"), "w") as f:
            json.dump({"device": device, "results": results, "kernels": kernels, "notes": notes}, f, indent=1)
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump({"device": device, "results": results, "kernels": kernels, "notes": notes}, f, indent=1)
    md = markdown(results, kernels, device, notes)
    with open(os.path.join(a.out, "bench.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "bench.svg"), "w") as f:
        f.write(svg(results))
    print(md)


def merge(a):
    """One report from the bench.json files of several runs (later runs win)."""
    results, kernels, notes, device = {}, None, [], None
    for path in a.merge:
        with open(path) as f:
            d = json.load(f)
        device = device or d.get("device")
        for r in d["results"]:
            results[(r["model"], r["dtype"])] = r
        kernels = d.get("kernels") or kernels
        notes += [n for n in d.get("notes", []) if n not in notes]
    # a pair left out by one run's budget but measured by another is no longer missing
    notes = [n for n in notes if not any(n.endswith(": %s %s not run" % k) for k in results)]
    order = {m: i for i, m in enumerate(MODELS)}
    rows = sorted(results.values(), key=lambda r: (order.get(r["model"], 99), r["dtype"] != "fp32"))
    notes.append("merged from: " + ", ".join(a.merge))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump({"device": device, "results": rows, "kernels": kernels, "notes": notes}, f, indent=1)
    md = markdown(rows, kernels, device, notes)
    with open(os.path.join(a.out, "bench.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "bench.svg"), "w") as f:
        f.write(svg(rows))
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--compilers", default="inductor,ptc")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--budget", type=float, default=1e9)
    ap.add_argument("--no-kernels", action="store_true")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--worker", choices=["cold", "warm", "kernels", "profile"])
    ap.add_argument("--model")
    ap.add_argument("--dtype")
    ap.add_argument("--merge", nargs="+", metavar="BENCH_JSON",
                    help="write one report (--out) from the bench.json of earlier runs")
    a = ap.parse_args()
    if a.merge:
        merge(a)
        return
    if a.no_inductor:
        a.compilers = ",".join(c for c in a.compilers.split(",") if c != "inductor")
    if a.worker:
        fn = {"cold": worker_cold, "warm": worker_warm, "kernels": worker_kernels,
              "profile": worker_profile}[a.worker]
        print("RESULT " + json.dumps(fn(a)), flush=True)
        return
    parent(a)


if __name__ == "__main__":
    main()
