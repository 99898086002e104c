"""A training step's forward and backward make their kernels' code together
(ptc_compile_all): one compile worker, one fork, for the kernels of both
halves, and a crash or error in either half fails the training compile with
the same words as a compile of that half alone (the graph then runs through
torch ops under autograd, and ptexplain says why)."""
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))

# Linear -> tanh -> Linear: the forward's one kernel is tanh's; the
# backward's tanh' kernel is the only one with prims.sub (1 - y*y).
PROGRAM = r"""
import json, sys, torch, ptc
ptc.config.compiled_autograd = True
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
explained = sys.argv[1] == "explain"
if explained:  # a compile of its own, whose report says why it fell back
    ex = ptc.explain(m, backend="ptc")(x)
c = ptc.compile(m)
c(x).square().sum().backward()
got = [p.grad.clone() for p in m.parameters()]
for p in m.parameters():
    p.grad = None
m(x).square().sum().backward()
same = all(torch.allclose(a, p.grad, atol=1e-5) for a, p in zip(got, m.parameters()))
why = [l.strip() for l in str(ex).splitlines()] if explained else []
print(json.dumps({"same": same, "report": " ".join(why)}))
"""


def run(tmp_path, mode, **env):
    e = dict(os.environ, PTC_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="2", **env)
    e.pop("PTC_COMPILE_WORKER", None)
    r = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=e,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.splitlines()[-1]), r.stderr


def test_both_halves_are_built_by_one_compile_worker(tmp_path):
    """One fork for the forward's and the backward's kernels together (each
    half had its own before); the trace's counts say how many there were."""
    out, log = run(tmp_path, "compile", PTC_LOGS="perf", PTC_TRACE_DIR=str(tmp_path / "trace"))
    assert out["same"]
    workers = [l for l in log.splitlines() if "compile workers:" in l]
    assert len(workers) == 1 and "1 fork(s)" in workers[0], workers
    (folder,) = [f for f in os.listdir(tmp_path / "trace") if f != "index.json"]
    with open(tmp_path / "trace" / folder / "metrics.json") as f:
        counts = json.load(f)["counts"]
    items = int(re.search(r"(\d+) item\(s\)", workers[0]).group(1))
    assert items == counts["kernels_compiled"] + counts["backward_kernels_compiled"] == 4


@pytest.mark.parametrize("planted,said", [
    ("codegen:prims.tanh:crash",
     "kernel 0 k0_tanh: the compile worker crashed (signal 11, Segmentation fault)"),
    ("codegen:prims.sub:crash",
     "kernel 1 k1_tanh_mul_full_sub_mul: the compile worker crashed (signal 11, Segmentation fault)"),
    ("codegen:prims.sub:abort",
     "kernel 1 k1_tanh_mul_full_sub_mul: LLVM reported a fatal error: planted"),
])
def test_a_crash_in_either_half_fails_the_training_compile_with_its_kernel(planted, said,
                                                                            tmp_path):
    """The culprit is pinned on its kernel of its half, as when each half
    had a worker of its own; the step still gives eager's gradients."""
    out, _ = run(tmp_path, "explain", PTC_INJECT=planted)
    assert out["same"]
    assert "needs gradients: it ran through torch ops: " + said in out["report"], out["report"]
