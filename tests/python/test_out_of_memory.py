"""Running out of memory while compiling is an error, never an abort.

A graph whose compile needs more memory than the process may have (a long
pointwise chain: the loop stage's inlined bodies grow with it) under an
address-space limit: ptc.compile runs it through torch ops with one warning
and eager's results; ptc-run exits with a one-line error. Both aborted the
process ("out of memory (arena block)") before. Each runs in a child under
its own RLIMIT_AS; an ASan build (PTC_BUILD_DIR) cannot run under one.
"""
import os
import re
import resource
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("PTC_BUILD_DIR", "")


def asan_build():
    try:
        return re.search(r"^PTC_SANITIZE:\w+=.*address", open(os.path.join(BUILD, "CMakeCache.txt")).read(),
                         re.M) is not None
    except OSError:
        return False


pytestmark = pytest.mark.skipif(asan_build(), reason="ASan cannot run under an address-space limit")

OPS = ["sin(%s)", "mul(%s, 1.0001)", "add(%s, 0.5)", "tanh(%s)", "abs(%s)", "sub(%s, 0.25)"]


def test_compile_falls_back_to_eager(tmp_path):
    code = textwrap.dedent("""
        import resource, warnings, torch, ptc
        def f(x):
            ops = [torch.sin, lambda t: t * 1.0001, lambda t: t + 0.5, torch.tanh, torch.abs,
                   lambda t: t - 0.25]
            for i in range(3000):
                x = ops[i % 6](x)
            return x
        x = torch.randn(16)
        want = f(x)
        cf = ptc.compile(f)
        pages = int(open("/proc/self/statm").read().split()[0])
        limit = pages * resource.getpagesize() + (300 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            results = [cf(x) for _ in range(3)]
        print("equal", all(torch.equal(r, want) for r in results))
        for m in w:
            print("warning:", m.message)
    """)
    path = [os.path.join(BUILD, "python")] if BUILD else []
    env = dict(os.environ, PTC_CACHE_DIR=str(tmp_path / "cache"), PTC_REPRO=str(tmp_path / "repro"),
               PYTHONPATH=os.pathsep.join(path + [HERE, os.environ.get("PYTHONPATH", "")]))
    env.pop("PTC_STRICT", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-3000:])
    lines = r.stdout.splitlines()
    assert lines[0] == "equal True", r.stdout
    warnings = [l for l in lines if l.startswith("warning:")]
    assert len(warnings) == 1 and "out of memory" in warnings[0], r.stdout


def test_ptc_run_reports_one_line(tmp_path):
    graph = tmp_path / "chain.ptir"
    lines = ["# ptc ir v1", "graph g(%x: f32[16] cpu) {"]
    prev = "%x"
    for i in range(3000):
        lines.append("  %%%d = %s : f32[16]" % (i, OPS[i % 6] % prev))
        prev = "%%%d" % i
    graph.write_text("\n".join(lines + ["  return (%s)" % prev, "}", ""]))
    ptc_run = os.path.join(BUILD, "tools", "run", "ptc-run")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (768 << 20, resource.RLIM_INFINITY))

    r = subprocess.run([ptc_run, "--backend", "cpu", "--no-cache", str(graph)], capture_output=True,
                       text=True, timeout=900, preexec_fn=limit,
                       env={k: v for k, v in os.environ.items() if k != "PTC_REPRO"})
    assert r.returncode == 1, "exit %d\n%s" % (r.returncode, r.stderr[-3000:])
    assert r.stderr.count("\n") == 1 and re.match(
        r"ptc-run: .*chain\.ptir: \w+: CompileError: out of memory", r.stderr), r.stderr
