#!/usr/bin/env python3
"""How ptc's compile time and memory grow with graph size (a benchmark, not a test).

A chain of N mixed pointwise ops (sin, mul, add, tanh, abs, sub) on a
16-element f32 tensor is compiled two ways, each in a fresh process with a
cold kernel cache:

  ptc.compile   a generated Python function of N statements, called once
                (capture + every compile stage + the first run)
  ptc-run       the same chain as a .ptir file, `ptc-run --backend cpu --stats`

For each N it prints the wall time, the child's peak RSS (wait4's ru_maxrss)
and the per-stage compile milliseconds ptc reports (PTC_LOGS=perf for the
Python module; --stats for ptc-run). The Python leg also checks the result
against eager torch.

    python3 bench/compile_scaling.py [--build BUILD] [--sizes 1000,2000,...]
                                     [--legs python,ptcrun] [--json FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (python statement, ptir op) for each step; y is the running value, x the
# input, {c} a constant that differs from step to step, so that no two stretches
# of the chain compile to the same kernel (ptc compiles identical kernels once).
STEPS = [
    ("y = torch.sin(y)", "sin(%{y})"),
    ("y = y * x", "mul(%{y}, %x)"),
    ("y = y + {c}", "add(%{y}, {c})"),
    ("y = torch.tanh(y)", "tanh(%{y})"),
    ("y = torch.abs(y)", "abs(%{y})"),
    ("y = y - x", "sub(%{y}, %x)"),
]


def step(i, form):
    return STEPS[i % len(STEPS)][form].replace("{c}", repr(0.5 + i / 65536))


def python_source(n):
    lines = ["import torch", "", "def chain(x):", "    y = x"]
    lines += ["    " + step(i, 0) for i in range(n)]
    lines.append("    return y")
    return "\n".join(lines) + "\n"


def ptir_source(n):
    lines = ["# ptc ir v1", "graph forward(%x: f32[16] cpu) {"]
    prev = "x"
    for i in range(n):
        op = step(i, 1).replace("{y}", prev)
        lines.append("  %%%d = %s : f32[16]" % (i, op))
        prev = str(i)
    lines.append("  return (%%%s)" % prev)
    lines.append("}")
    return "\n".join(lines) + "\n"


# Runs in the child: imports the generated module, compiles and checks it.
PY_CHILD = r"""
import sys, time, importlib.util, torch, ptc
spec = importlib.util.spec_from_file_location("chain", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
x = torch.rand(16) * 2 - 1
want = mod.chain(x)
f = ptc.compile(mod.chain)
t0 = time.perf_counter()
got = f(x)
ms = (time.perf_counter() - t0) * 1e3
err = (got - want).abs().max().item()
print("first_call_ms %.1f" % ms)
print("max_abs_err %.3g" % err)
sys.exit(0 if err < 1e-4 else 3)
"""


def run_child(argv, env):
    """Runs argv; returns (rc, stdout, stderr, wall seconds, CPU seconds, peak RSS MiB)."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    return (p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
            wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0)


def child_env(build, cache):
    env = dict(os.environ)
    env["PTC_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(build, "python"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def stages_from_perf_log(text):
    """Sums the '[ptc:perf] stage: X ms' lines of every compile in the log."""
    stages = {}
    for m in re.finditer(r"\[ptc:perf\]\s+(\w+): ([0-9.]+) ms", text):
        stages[m.group(1)] = stages.get(m.group(1), 0.0) + float(m.group(2))
    return stages


def stages_from_stats(text):
    m = re.search(r"compile ms: (.*)", text)
    if not m:
        return {}
    words = m.group(1).split()
    return {words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def leg_python(n, build, work):
    path = os.path.join(work, "chain_%d.py" % n)
    with open(path, "w") as f:
        f.write(python_source(n))
    env = child_env(build, os.path.join(work, "cache_py_%d" % n))
    env["PTC_LOGS"] = "perf"
    env["PTC_STRICT"] = "1"
    rc, out, err, wall, cpu, rss = run_child([sys.executable, "-c", PY_CHILD, path], env)
    row = {"leg": "ptc.compile", "n": n, "rc": rc, "wall_s": wall, "cpu_s": cpu, "rss_mib": rss,
           "stages_ms": stages_from_perf_log(err)}
    m = re.search(r"first_call_ms ([0-9.]+)", out)
    if m:
        row["first_call_ms"] = float(m.group(1))
        known = sum(v for k, v in row["stages_ms"].items() if k in ("prims", "loops", "kernels", "codegen"))
        row["stages_ms"]["capture+run"] = max(0.0, row["first_call_ms"] - known)
    if rc != 0:
        row["error"] = (out + err)[-800:]
    return row


def leg_ptcrun(n, build, work):
    path = os.path.join(work, "chain_%d.ptir" % n)
    with open(path, "w") as f:
        f.write(ptir_source(n))
    env = child_env(build, os.path.join(work, "cache_run_%d" % n))
    exe = os.path.join(build, "tools", "run", "ptc-run")
    rc, out, err, wall, cpu, rss = run_child([exe, "--backend", "cpu", "--stats", path], env)
    row = {"leg": "ptc-run", "n": n, "rc": rc, "wall_s": wall, "cpu_s": cpu, "rss_mib": rss,
           "stages_ms": stages_from_stats(out)}
    if rc != 0:
        row["error"] = (out + err)[-800:]
    return row


def show(row):
    st = " ".join("%s %.0f" % (k, v) for k, v in row["stages_ms"].items())
    status = "" if row["rc"] == 0 else "  FAILED rc=%d: %s" % (row["rc"], row.get("error", "")[-300:])
    print("%-12s N=%-6d wall %7.2f s  cpu %7.2f s  peak RSS %7.0f MiB  | ms: %s%s"
          % (row["leg"], row["n"], row["wall_s"], row["cpu_s"], row["rss_mib"], st, status), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--sizes", default="1000,2000,4000,8000,16000")
    ap.add_argument("--legs", default="python,ptcrun")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    legs = {"python": leg_python, "ptcrun": leg_ptcrun}
    rows = []
    with tempfile.TemporaryDirectory(prefix="ptc_scaling_") as work:
        for n in [int(s) for s in args.sizes.split(",")]:
            for leg in args.legs.split(","):
                row = legs[leg](n, build, work)
                show(row)
                rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
