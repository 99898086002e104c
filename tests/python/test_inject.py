"""PTC_INJECT in the real pipeline, PTC_ACCURACY and PTC_REPRO, through
ptc-run: every stage and kind fails the way it says, error paths clean up
(a planted error at any point of any stage ends in a one-line error, never a
crash), and a failure leaves a repro folder that ptminify shrinks.
"""
import json
import os
import signal
import subprocess

import pytest

BUILD = os.environ.get("PTC_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build")
SOURCE = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PTC_RUN = os.path.join(BUILD, "tools", "run", "ptc-run")
PTMINIFY = os.path.join(BUILD, "tools", "minifier", "ptminify")
DATA = os.path.join(SOURCE, "tests", "data", "minify")
BERT = [os.path.join(DATA, "bert.ptir"), "--inputs", os.path.join(DATA, "bert.inputs.bin")]
RESNET = [os.path.join(DATA, "resnet18.ptir")]

pytestmark = pytest.mark.skipif(
    subprocess.run([PTC_RUN, "--backend", "cpu", os.path.join(DATA, "prims_ops.ptir")],
                   capture_output=True).returncode != 0,
    reason="ptc-run has no working CPU backend in this build")


def ptc_run(*args, env=None, timeout=120):
    e = {k: v for k, v in os.environ.items()
         if k not in ("PTC_INJECT", "PTC_ACCURACY", "PTC_REPRO")}
    e.update(env or {})
    return subprocess.run([PTC_RUN, *map(str, args)], capture_output=True, text=True, env=e,
                          timeout=timeout)


@pytest.mark.parametrize("stage,op", [("prims", "gelu"), ("lower", "prims.erf"),
                                      ("codegen", "prims.tanh"),
                                      ("runtime", "scaled_dot_product_attention")])
def test_error_names_its_stage(stage, op):
    r = ptc_run("--backend", "cpu", *BERT, env={"PTC_INJECT": "%s:%s:error" % (stage, op)})
    assert r.returncode == 1
    assert "%s: InjectedError: injected error in %s of %s" % (stage, stage, op) in r.stderr


@pytest.mark.parametrize("stage,op", [("prims", "layer_norm"), ("lower", "prims.rsqrt"),
                                      ("codegen", "prims.add"), ("runtime", "prims.gather")])
def test_wrong_fails_the_check(stage, op):
    r = ptc_run("--backend", "cpu", "--check", *BERT,
                env={"PTC_INJECT": "%s:%s:wrong" % (stage, op)})
    assert r.returncode == 1 and "mismatch" in r.stderr, r.stderr
    clean = ptc_run("--backend", "cpu", "--check", *BERT)
    assert clean.returncode == 0, clean.stderr


# A crash in codegen happens in the compile worker and is an error (see
# test_compile_worker.py); in process it is this one.
@pytest.mark.parametrize("stage,op", [("prims", "batch_norm"), ("runtime", "convolution")])
def test_crash(stage, op):
    r = ptc_run("--backend", "cpu", *RESNET, env={"PTC_INJECT": "%s:%s:crash" % (stage, op)})
    assert r.returncode == -signal.SIGSEGV


def test_hang():
    with pytest.raises(subprocess.TimeoutExpired):
        ptc_run("--backend", "cpu", *RESNET, env={"PTC_INJECT": "lower:prims.add:hang"},
                timeout=3)


def test_reference_backend_runtime_stage():
    r = ptc_run("--backend", "reference", *BERT, env={"PTC_INJECT": "runtime:gelu:error"})
    assert r.returncode == 1 and "injected error in runtime of gelu" in r.stderr


@pytest.mark.parametrize("kind", ["error", "wrong"])
@pytest.mark.parametrize("stage", ["prims", "lower", "codegen", "runtime"])
def test_planted_failures_anywhere_clean_up(stage, kind):
    """The N-th query of a stage fails, for several N: error paths release
    what they made (a double free here once crashed ptc-run)."""
    for nth in (1, 9, 40):
        for graph in (RESNET, BERT):
            r = ptc_run("--backend", "cpu", "--check", *graph,
                        env={"PTC_INJECT": "%s:*:%s@%d" % (stage, kind, nth)})
            assert r.returncode in (0, 1), (stage, kind, nth, r.returncode, r.stderr[-300:])
            assert r.returncode == 0 or r.stderr.strip(), r.stdout


def test_accuracy_writes_a_repro_that_ptminify_shrinks(tmp_path):
    repro = tmp_path / "repro"
    r = ptc_run("--backend", "cpu", *BERT, env={"PTC_ACCURACY": "1", "PTC_REPRO": str(repro),
                                                 "PTC_INJECT": "codegen:prims.tanh:wrong"})
    assert r.returncode == 1
    assert "PTC_ACCURACY: cpu backend diverges from the reference interpreter" in r.stderr
    (folder,) = repro.iterdir()
    meta = json.loads((folder / "repro.json").read_text())
    assert meta["kind"] == "accuracy" and meta["inject"] == "codegen:prims.tanh:wrong"
    m = subprocess.run([PTMINIFY, "-q", "--jobs", "2", "-o", str(tmp_path / "min"), str(folder)],
                       capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                            if k != "PTC_INJECT"})
    assert m.returncode == 0, m.stderr
    text = (tmp_path / "min" / "graph.ptir").read_text()
    assert text.count(" = ") == 1 and "tanh(" in text
    # Without PTC_ACCURACY the same run is not checked.
    assert ptc_run("--backend", "cpu", *BERT,
                   env={"PTC_INJECT": "codegen:prims.tanh:wrong"}).returncode == 0


def test_compile_error_writes_a_repro(tmp_path):
    r = ptc_run("--backend", "cpu", *RESNET, env={"PTC_REPRO": str(tmp_path),
                                                   "PTC_INJECT": "lower:prims.var_mean:error"})
    assert r.returncode == 1 and "repro written to" in r.stderr
    (folder,) = tmp_path.iterdir()
    meta = json.loads((folder / "repro.json").read_text())
    assert meta["kind"] == "error" and meta["stage"] == "lower"
    assert meta["error_class"] == "InjectedError"
    assert sorted(os.listdir(folder)) == ["graph.ptir", "inputs.bin", "repro.json"]


ACCURACY_IN_PLACE = """
import warnings
import torch, ptc
def f(x, y):
    x.mul_(2).add_(y)                     # a kernel writes x itself (in place)
    return x.sum()
x, y = torch.ones(64, 32), torch.ones(64, 32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    s = ptc.compile(f)(x, y)
print(x[0, 0].item(), s.item(), sum("PTC_ACCURACY" in str(w.message) for w in caught))
"""


@pytest.mark.parametrize("inject,diverges", [("", 0), ("runtime:prims.add:wrong", 1)])
def test_accuracy_checks_a_program_that_writes_its_inputs_on_their_old_values(inject, diverges,
                                                                             tmp_path):
    """PTC_ACCURACY ran the interpreter on inputs the program had already
    written in place: x.mul_(2).add_(y) was reported as diverging, and the
    fallback to eager wrote x a second time (7 where eager gives 3; 10.5
    after a wrong kernel). The check now reads the inputs as they were, and
    a real divergence puts them back before eager runs."""
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("PTC_INJECT", "PTC_ACCURACY")}
    env.update(PTC_ACCURACY="1", PTC_REPRO=str(tmp_path), PTC_INJECT=inject)
    r = subprocess.run([sys.executable, "-c", ACCURACY_IN_PLACE], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3.0", "6144.0", str(diverges)], (r.stdout, r.stderr)
