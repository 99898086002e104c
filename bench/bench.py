#!/usr/bin/env python3
"""ptc CPU backend benchmark (not a test).

For each case -- pointwise chains, softmax, layer_norm, a residual conv block,
a small MLP, a small conv net and a generated 200-node graph -- one builder
writes both the .ptir graph and the equivalent torch function, so every
contender runs the same computation on the same data in the same run:

  ptc-cpu        the compiled program (bench/ptc-bench, outputs allocated
                 uninitialised like torch.empty)
  reference      ptc's reference interpreter (a few runs)
  eager          PyTorch eager
  inductor       torch.compile (Inductor's CPU backend), when available
  memcpy         a memcpy of the same bytes, same threads, same run

plus achieved GB/s (inputs + outputs over ptc's time) and cold / warm compile
milliseconds. Each case runs --rounds rounds of (ptc, eager, inductor) one
after the other and reports every time from its best round, so that bursts of
load from elsewhere on a shared machine do not favour one contender.
Writes bench/results.json and bench/results.md (or under --out).

    python3 bench/bench.py [--build BUILD] [--threads N] [--cases a,b] [--seconds S]
                           [--rounds R] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, HERE)
from ptcio import ptir_type, write_tensors  # noqa: E402


class Graph:
    """Builds a .ptir graph and the torch function that computes the same."""

    def __init__(self, name):
        self.name = name
        self.inputs = []   # (name, tensor)
        self.lines = []
        self.steps = []    # (fn, arg names, out names)
        self.env = {}
        self.n = 0

    def input(self, name, t):
        self.inputs.append((name, t))
        self.env[name] = t
        return name

    def op(self, call, fn, *args, nout=1):
        """call: the ptir call with {0}, {1}... for the value args."""
        with torch.no_grad():
            res = fn(*[self.env[a] for a in args])
        outs = list(res) if isinstance(res, (tuple, list)) else [res]
        assert len(outs) == nout
        names = []
        for o in outs:
            names.append("val%d" % self.n)
            self.env[names[-1]] = o
            self.n += 1
        types = ", ".join(ptir_type(o.contiguous(), device=False) for o in outs)
        text = call.format(*["%" + a for a in args])
        self.lines.append("  %s = %s : %s" % (", ".join("%" + n for n in names), text, types))
        self.steps.append((fn, args, names))
        return names[0] if nout == 1 else names

    def ptir(self, outputs):
        params = ", ".join("%%%s: %s" % (n, ptir_type(t)) for n, t in self.inputs)
        return "# ptc ir v1\ngraph %s(%s) {\n%s\n  return (%s)\n}\n" % (
            self.name, params, "\n".join(self.lines), ", ".join("%" + o for o in outputs))

    def torch_fn(self, outputs):
        steps, in_names = list(self.steps), [n for n, _ in self.inputs]

        def run(*tensors):
            env = dict(zip(in_names, tensors))
            for fn, args, names in steps:
                res = fn(*[env[a] for a in args])
                res = list(res) if isinstance(res, (tuple, list)) else [res]
                env.update(zip(names, res))
            return tuple(env[o] for o in outputs)
        return run


def rnd(*shape):
    return torch.randn(*shape, generator=GEN)


GEN = torch.Generator().manual_seed(0)

# ---- cases ------------------------------------------------------------------------------


def pointwise_chain():
    g = Graph("pointwise_chain")
    x, y = g.input("x", rnd(2048, 2048)), g.input("y", rnd(2048))
    a = g.op("add({0}, {1})", torch.add, x, y)
    b = g.op("mul({0}, 0.5)", lambda t: t * 0.5, a)
    c = g.op("relu({0})", torch.relu, b)
    d = g.op("sub({0}, 1.0)", lambda t: t - 1.0, c)
    return g, [d]


def pointwise_gelu():
    g = Graph("pointwise_gelu")
    x, y = g.input("x", rnd(2048, 2048)), g.input("y", rnd(2048))
    a = g.op("add({0}, {1})", torch.add, x, y)
    b = g.op("gelu({0})", F.gelu, a)
    c = g.op("mul({0}, {1})", torch.mul, b, x)
    d = g.op("tanh({0})", torch.tanh, c)
    e = g.op("mul({0}, 2.0)", lambda t: t * 2.0, d)
    f = g.op("sigmoid({0})", torch.sigmoid, e)
    h = g.op("add({0}, {1})", torch.add, f, a)
    return g, [h]


def softmax():
    g = Graph("softmax")
    x = g.input("x", rnd(4096, 1024))
    return g, [g.op("softmax({0}, -1)", lambda t: torch.softmax(t, -1), x)]


def layer_norm():
    g = Graph("layer_norm")
    x, w, b = g.input("x", rnd(4096, 1024)), g.input("w", rnd(1024)), g.input("b", rnd(1024))
    return g, [g.op("layer_norm({0}, [1024], {1}, {2})", lambda t, ww, bb: F.layer_norm(t, [1024], ww, bb), x, w, b)]


def residual_block():
    g = Graph("residual_block")
    x = g.input("x", rnd(8, 64, 32, 32))
    w1, w2 = g.input("w1", rnd(64, 64, 3, 3) * 0.05), g.input("w2", rnd(64, 64, 3, 3) * 0.05)
    bn = [g.input(n, t) for n, t in [("g1", rnd(64)), ("b1", rnd(64)), ("m1", rnd(64)), ("v1", rnd(64).abs() + 1),
                                      ("g2", rnd(64)), ("b2", rnd(64)), ("m2", rnd(64)), ("v2", rnd(64).abs() + 1)]]

    def bnorm(t, gg, bb, mm, vv):
        return F.batch_norm(t, mm, vv, gg, bb, False, 0.1, 1e-5)
    c1 = g.op("conv2d({0}, {1}, none, 1, 1)", lambda t, w: F.conv2d(t, w, None, 1, 1), x, w1)
    n1 = g.op("batch_norm({0}, {1}, {2}, {3}, {4}, false, 0.1, 1e-05)", bnorm, c1, *bn[:4])
    r1 = g.op("relu({0})", torch.relu, n1)
    c2 = g.op("conv2d({0}, {1}, none, 1, 1)", lambda t, w: F.conv2d(t, w, None, 1, 1), r1, w2)
    n2 = g.op("batch_norm({0}, {1}, {2}, {3}, {4}, false, 0.1, 1e-05)", bnorm, c2, *bn[4:])
    s = g.op("add({0}, {1})", torch.add, n2, x)
    return g, [g.op("relu({0})", torch.relu, s)]


def mlp():
    g = Graph("mlp")
    x = g.input("x", rnd(256, 512))
    w1, b1 = g.input("w1", rnd(1024, 512) * 0.04), g.input("b1", rnd(1024))
    w2, b2 = g.input("w2", rnd(512, 1024) * 0.03), g.input("b2", rnd(512))
    gw, gb = g.input("gw", rnd(512)), g.input("gb", rnd(512))
    h = g.op("linear({0}, {1}, {2})", F.linear, x, w1, b1)
    a = g.op("gelu({0})", F.gelu, h)
    o = g.op("linear({0}, {1}, {2})", F.linear, a, w2, b2)
    r = g.op("add({0}, {1})", torch.add, o, x)
    return g, [g.op("layer_norm({0}, [512], {1}, {2})", lambda t, ww, bb: F.layer_norm(t, [512], ww, bb), r, gw, gb)]


def convnet():
    g = Graph("convnet")
    x = g.input("x", rnd(16, 3, 64, 64))
    w1, b1 = g.input("w1", rnd(16, 3, 3, 3) * 0.2), g.input("b1", rnd(16))
    w2, b2 = g.input("w2", rnd(32, 16, 3, 3) * 0.1), g.input("b2", rnd(32))
    fw, fb = g.input("fw", rnd(10, 32) * 0.2), g.input("fb", rnd(10))
    c1 = g.op("conv2d({0}, {1}, {2}, 1, 1)", lambda t, w, b: F.conv2d(t, w, b, 1, 1), x, w1, b1)
    r1 = g.op("relu({0})", torch.relu, c1)
    p1 = g.op("max_pool2d({0}, [2, 2])", lambda t: F.max_pool2d(t, 2), r1)
    c2 = g.op("conv2d({0}, {1}, {2}, 1, 1)", lambda t, w, b: F.conv2d(t, w, b, 1, 1), p1, w2, b2)
    r2 = g.op("relu({0})", torch.relu, c2)
    a = g.op("adaptive_avg_pool2d({0}, [1, 1])", lambda t: F.adaptive_avg_pool2d(t, 1), r2)
    f = g.op("flatten({0}, 1)", lambda t: t.flatten(1), a)
    lo = g.op("linear({0}, {1}, {2})", F.linear, f, fw, fb)
    return g, [g.op("softmax({0}, 1)", lambda t: torch.softmax(t, 1), lo)]


def graph200():
    """Eight transformer-ish blocks: 200+ torch-level nodes, the compile-time case."""
    g = Graph("graph200")
    D, T = 128, 64
    h = g.input("x", rnd(T, D))
    for i in range(8):
        w = [g.input("w%d_%d" % (i, j), rnd(D, D) * 0.05) for j in range(4)]
        ln = [g.input("ln%d_%d" % (i, j), rnd(D)) for j in range(2)]
        n1 = g.op("layer_norm({0}, [%d], {1})" % D, lambda t, ww: F.layer_norm(t, [D], ww), h, ln[0])
        q = g.op("matmul({0}, {1})", torch.matmul, n1, w[0])
        k = g.op("matmul({0}, {1})", torch.matmul, n1, w[1])
        kt = g.op("t({0})", torch.t, k)
        s = g.op("matmul({0}, {1})", torch.matmul, q, kt)
        s = g.op("mul({0}, 0.088)", lambda t: t * 0.088, s)
        s = g.op("softmax({0}, -1)", lambda t: torch.softmax(t, -1), s)
        o = g.op("matmul({0}, {1})", torch.matmul, s, n1)
        h = g.op("add({0}, {1})", torch.add, h, o)
        n2 = g.op("layer_norm({0}, [%d], {1})" % D, lambda t, ww: F.layer_norm(t, [D], ww), h, ln[1])
        f = g.op("matmul({0}, {1})", torch.matmul, n2, w[2])
        f = g.op("gelu({0})", F.gelu, f)
        f = g.op("mul({0}, 0.5)", lambda t: t * 0.5, f)
        f = g.op("tanh({0})", torch.tanh, f)
        f = g.op("matmul({0}, {1})", torch.matmul, f, w[3])
        f = g.op("sigmoid({0})", torch.sigmoid, f)
        f = g.op("mul({0}, {1})", torch.mul, f, n2)
        f = g.op("sub({0}, 0.1)", lambda t: t - 0.1, f)
        f = g.op("relu({0})", torch.relu, f)
        f = g.op("exp({0})", torch.exp, f)
        f = g.op("log1p({0})", torch.log1p, f)
        f = g.op("div({0}, 2.0)", lambda t: t / 2.0, f)
        f = g.op("clamp({0}, -3.0, 3.0)", lambda t: t.clamp(-3.0, 3.0), f)
        h = g.op("add({0}, {1})", torch.add, h, f)
        h = g.op("mul({0}, 0.9)", lambda t: t * 0.9, h)
    return g, [h]


CASES = {f.__name__: f for f in [pointwise_chain, pointwise_gelu, softmax, layer_norm, residual_block,
                                  mlp, convnet, graph200]}

# ---- timing -----------------------------------------------------------------------------------


def median_ms(fn, seconds, min_iters=5):
    for _ in range(2):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def run_case(name, build, tmp, seconds, rounds):
    """Each round times ptc-bench (fresh cache: cold then warm compile), eager and Inductor one
    after the other; every time reported is the best round's median, so that a burst of load from
    elsewhere on the machine hits all of them alike or none."""
    g, outs = CASES[name]()
    path = os.path.join(tmp, name + ".ptir")
    with open(path, "w") as f:
        f.write(g.ptir(outs))
    inputs = os.path.join(tmp, name + ".in.bin")
    write_tensors(inputs, g.inputs)
    exe = build if build.endswith("ptc-bench") else os.path.join(build, "bench", "ptc-bench")
    fn = g.torch_fn(outs)
    tensors = [t for _, t in g.inputs]
    cfn, row, ptc_rows, eager, inductor = None, None, [], [], []
    for k in range(rounds):
        env = dict(os.environ, PTC_CACHE_DIR=os.path.join(tmp, "cache-%s-%d" % (name, k)))
        ref = ["--ref-iters", "1"] if k == 0 else ["--no-ref"]
        r = subprocess.run([exe, "--inputs", inputs, "--seconds", str(seconds)] + ref + [path],
                           capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode:
            raise RuntimeError("ptc-bench %s: %s" % (name, r.stderr))
        ptc_rows.append(json.loads(r.stdout))
        with torch.no_grad():
            eager.append(median_ms(lambda: fn(*tensors), seconds))
            if k == 0 and hasattr(torch, "compile"):
                try:
                    cfn = torch.compile(fn)
                    t0 = time.perf_counter()
                    cfn(*tensors)
                    inductor_compile_ms = (time.perf_counter() - t0) * 1e3
                except Exception as e:  # noqa: BLE001 (report, do not stop the benchmark)
                    row_error = str(e).splitlines()[0][:200]
                    cfn = None
            if cfn is not None:
                inductor.append(median_ms(lambda: cfn(*tensors), seconds))
    row = dict(ptc_rows[0])
    row["rounds"] = rounds
    row["ptc_ms"] = min(p["ptc_ms"] for p in ptc_rows)
    row["memcpy_ms"] = min(p["memcpy_ms"] for p in ptc_rows)
    row["ptc_gbps"] = row["bytes"] / (row["ptc_ms"] * 1e6)
    row["memcpy_gbps"] = max(p["memcpy_gbps"] for p in ptc_rows)
    for key in ("cold_compile_ms", "warm_compile_ms"):
        row[key] = sorted(p[key] for p in ptc_rows)[len(ptc_rows) // 2]
    row["warm_compiled"] = max(p["warm_compiled"] for p in ptc_rows)
    row["case"] = name
    row["nodes"] = len(g.lines)
    row["eager_ms"] = min(eager)
    row["inductor_ms"] = min(inductor) if inductor else None
    if cfn is not None:
        row["inductor_compile_ms"] = inductor_compile_ms
    elif hasattr(torch, "compile"):
        row["inductor_error"] = row_error
    return row


def fmt(v, digits=3):
    return "-" if v is None else ("%.*g" % (digits, v))


def markdown(rows, meta):
    lines = ["# ptc CPU benchmark", "",
             "%s; torch %s; %d threads; %s" % (meta["cpu"], meta["torch"], meta["threads"], meta["date"]), "",
             "| case | nodes | kernels | externs | ptc-cpu ms | reference ms | eager ms | inductor ms | "
             "ptc GB/s | memcpy GB/s | % of memcpy | cold compile ms | warm compile ms (compiled) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %.0f%% | %s | %s (%d) |" % (
            r["case"], r["nodes"], r["kernels"], r["externs"], fmt(r["ptc_ms"]), fmt(r["ref_ms"], 4),
            fmt(r["eager_ms"]), fmt(r["inductor_ms"]), fmt(r["ptc_gbps"]), fmt(r["memcpy_gbps"]),
            100 * r["ptc_gbps"] / r["memcpy_gbps"], fmt(r["cold_compile_ms"]), fmt(r["warm_compile_ms"]),
            r["warm_compiled"]))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"),
                    help="the build directory (or the ptc-bench executable itself)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of (ptc, eager, inductor); each time reported is the best round's")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    cpu = "?"
    try:
        cpu = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")][0]
    except (OSError, IndexError):
        pass
    meta = {"cpu": cpu, "torch": torch.__version__, "threads": args.threads,
            "date": time.strftime("%Y-%m-%d %H:%M")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            row = run_case(name, os.path.abspath(args.build), tmp, args.seconds, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    md = markdown(rows, meta)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
