"""LLVM runs in a forked compile worker, by default: a crash, an abort (LLVM's
fatal-error path) or a hang while generating code fails that compile and
nothing else. Under ptc.compile the call runs eagerly with the usual one
warning and a repro folder; ptc-run exits 1 with a one-line error;
PTC_COMPILE_WORKER=0 compiles in process (a crash there is the process's, as
before).
"""
import os
import signal
import subprocess
import sys

import pytest

BUILD = os.environ.get("PTC_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build")
SOURCE = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PTC_RUN = os.path.join(BUILD, "tools", "run", "ptc-run")
RESNET = os.path.join(SOURCE, "tests", "data", "minify", "resnet18.ptir")

pytestmark = pytest.mark.skipif(
    subprocess.run([PTC_RUN, "--backend", "cpu", "--no-cache", RESNET],
                   capture_output=True).returncode != 0,
    reason="ptc-run has no working CPU backend in this build")


def env_with(**kv):
    e = {k: v for k, v in os.environ.items()
         if k not in ("PTC_INJECT", "PTC_ACCURACY", "PTC_REPRO", "PTC_COMPILE_WORKER",
                      "PTC_COMPILE_TIMEOUT", "PTC_STRICT")}
    # the default: the worker; tests that want it off say PTC_COMPILE_WORKER="0"
    e.update(kv)
    return e


def ptc_run(*args, timeout=120, **env):
    return subprocess.run([PTC_RUN, "--backend", "cpu", "--no-cache", *args], capture_output=True,
                          text=True, env=env_with(**env), timeout=timeout)


def test_a_crash_in_codegen_is_a_one_line_error():
    r = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:crash")
    assert r.returncode == 1, (r.returncode, r.stderr[-500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("ptc-run: %s: codegen: CompileError: kernel " % RESNET), lines[0]
    assert "the compile worker crashed (signal %d, " % signal.SIGSEGV in lines[0], lines[0]


def test_a_crash_among_kernels_built_at_once_is_pinned_on_its_kernel():
    """Four threads in the one worker build resnet18's kernels at once; the
    crash ends them all, and the kernel named is the one planted, whichever
    thread hit it (the rest ran again one at a time)."""
    r = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:crash", OMP_NUM_THREADS="4")
    assert r.returncode == 1, (r.returncode, r.stderr[-500:])
    alone = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:crash", OMP_NUM_THREADS="1")
    assert r.stderr == alone.stderr, (r.stderr, alone.stderr)
    assert "the compile worker crashed (signal %d, " % signal.SIGSEGV in r.stderr, r.stderr


def test_one_fork_per_compile(tmp_path):
    """All the kernels of a compile are built in one worker, and a warm start
    (every kernel in the cache) forks none."""
    for forks in ("1 fork(s)", None):
        r = subprocess.run([PTC_RUN, "--backend", "cpu", RESNET], capture_output=True, text=True,
                           env=env_with(PTC_LOGS="perf", OMP_NUM_THREADS="2",
                                        PTC_CACHE_DIR=str(tmp_path)), timeout=120)
        assert r.returncode == 0, r.stderr[-500:]
        said = [l for l in r.stderr.splitlines() if "compile workers:" in l]
        if forks:
            assert len(said) == 1 and forks in said[0], said
        else:
            assert said == [], said


def test_a_hang_in_codegen_is_cut_off_at_the_time_limit():
    r = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:hang", PTC_COMPILE_TIMEOUT="2",
                timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr[-500:])
    assert "ran past the compile time limit (PTC_COMPILE_TIMEOUT=2 s)" in r.stderr, r.stderr


def test_an_llvm_fatal_error_is_pinned_on_its_kernel_with_llvm_s_reason():
    """LLVM's own fatal-error path (report_fatal_error) in the worker: the
    kernel it was building fails with LLVM's words, the kernels other threads
    were building at that moment are built again (not blamed), and LLVM's
    "LLVM ERROR:" line does not reach the host's stderr."""
    r = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:abort", OMP_NUM_THREADS="4")
    assert r.returncode == 1, (r.returncode, r.stderr[-500:])
    lines = r.stderr.strip().splitlines()
    assert lines == ["ptc-run: %s: codegen: CompileError: kernel 4 k4_full_le_full_where_max_pool: "
                     "LLVM reported a fatal error: planted fatal error (PTC_INJECT abort)" % RESNET], lines
    alone = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:abort", OMP_NUM_THREADS="1")
    assert r.stderr == alone.stderr, (r.stderr, alone.stderr)


def test_without_the_worker_an_llvm_fatal_error_is_the_process_s():
    r = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:abort", PTC_COMPILE_WORKER="0")
    assert r.returncode == -signal.SIGABRT
    assert "LLVM ERROR: planted fatal error (PTC_INJECT abort)" in r.stderr, r.stderr[-500:]


def test_abort_plants_only_where_llvm_runs():
    r = ptc_run(RESNET, PTC_INJECT="runtime:prims.le:abort")
    assert r.returncode == 0, r.stderr[-500:]
    assert "PTC_INJECT: abort (LLVM's fatal error) plants only in codegen, not in " \
        "'runtime:prims.le:abort' (ignored)" in r.stderr, r.stderr


def test_without_the_worker_a_crash_is_the_process_s():
    r = ptc_run(RESNET, PTC_INJECT="codegen:prims.le:crash", PTC_COMPILE_WORKER="0")
    assert r.returncode == -signal.SIGSEGV


def test_the_nth_query_counts_in_the_parent():
    """@N counts queries in this process, worker or not: the same kernel
    fails either way."""
    outs = []
    for worker in ("1", "0"):
        r = ptc_run(RESNET, PTC_INJECT="codegen:*:error@7", PTC_COMPILE_WORKER=worker)
        assert r.returncode == 1
        outs.append(r.stderr)
    assert outs[0] == outs[1]


@pytest.mark.parametrize("worker", ["1", "0"])
def test_same_kernels_with_and_without_the_worker(worker, tmp_path):
    r = ptc_run("--check", "--stats", RESNET, PTC_COMPILE_WORKER=worker,
                PTC_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "kernels: 27 compiled, 29 cached" in r.stdout + r.stderr


PROGRAM = """
import warnings, torch, ptc
def f(x):
    return torch.tanh(x) * 2 + 1
c = ptc.compile(f)
x = torch.randn(8, 16)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(3):
        assert torch.equal(c(x), f(x))
msgs = [str(w.message) for w in caught if str(w.message).startswith("ptc:")]
print(len(msgs))
print(msgs[0] if msgs else "")
"""


@pytest.mark.parametrize("kind,said", [("crash", "the compile worker crashed"),
                                       ("abort", "LLVM reported a fatal error: planted")])
def test_python_falls_back_to_eager_with_one_warning_and_a_repro(kind, said, tmp_path):
    """With the default settings (no PTC_COMPILE_WORKER at all): a planted
    crash or LLVM fatal error inside LLVM leaves Python running, eager's
    results and one warning (before the worker: the process died of SIGSEGV
    or SIGABRT)."""
    env = env_with(PTC_INJECT="codegen:prims.tanh:" + kind, PTC_REPRO=str(tmp_path / "repro"),
                   PTC_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-800:])
    count, msg = r.stdout.splitlines()[:2]
    assert count == "1", r.stdout
    assert said in msg and "running it through torch ops" in msg, msg
    assert "repro: " + str(tmp_path / "repro") in msg, msg
    assert len(os.listdir(tmp_path / "repro")) == 1
