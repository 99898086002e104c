"""Ctrl-C (SIGINT) ends a planted hang (PTC_INJECT=<stage>:<op>:hang) at
every stage: ptc-run dies of the signal, and a compiled Python function
raises KeyboardInterrupt to the user, with no fallback warning (Python's
handler only sets a flag, which the hang used to sleep through for ever;
a hang in codegen, in the forked compile worker, was waited for until the
600 s compile time limit)."""
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("torch")

BUILD = os.environ.get("PTC_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build")
PTC_RUN = os.path.join(BUILD, "tools", "run", "ptc-run")
STAGES = ["prims", "lower", "codegen", "runtime"]

GRAPH = ("# ptc ir v1\n"
         "graph f(%x: f32[4,3] cpu) {\n"
         "  %0 = neg(%x) : f32[4,3]\n"
         "  return (%0)\n"
         "}\n")

PROGRAM = r'''
import sys, torch, ptc
f = ptc.compile(lambda x: torch.neg(x) * 2)
print("calling", flush=True)
try:
    f(torch.ones(4))
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(3)
print("returned", flush=True)
'''


def interrupt(argv, env, started=None, timeout=20):
    """Starts argv, waits for the line `started` (or a moment), sends SIGINT,
    and returns (returncode, stdout, stderr); a child that outlives the
    signal by `timeout` seconds is killed and fails the test."""
    e = {k: v for k, v in os.environ.items() if k != "PTC_INJECT"}
    e.update(env)
    p = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if started:
            assert p.stdout.readline() == started + "\n"
        try:
            p.wait(timeout=1.0)  # the hang is reached well within this
        except subprocess.TimeoutExpired:
            pass
        assert p.poll() is None, "exited before the signal: " + p.stderr.read()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
            pytest.fail("still hanging %d s after SIGINT" % timeout)


@pytest.mark.parametrize("stage", STAGES)
def test_ptc_run_dies_of_sigint(stage, tmp_path):
    g = tmp_path / "g.ptir"
    g.write_text(GRAPH)
    rc, _, _ = interrupt([PTC_RUN, "--backend", "cpu", "--no-cache", str(g)],
                         {"PTC_INJECT": "%s:*:hang" % stage})
    assert rc == -signal.SIGINT


# A compile stage, codegen (in the compile worker, where the build has one)
# and the run stage: the ways a failure reaches capture.
@pytest.mark.parametrize("stage", ["lower", "codegen", "runtime"])
def test_python_gets_keyboard_interrupt(stage, tmp_path):
    rc, out, err = interrupt([sys.executable, "-c", PROGRAM],
                             {"PTC_INJECT": "%s:*:hang" % stage, "PTC_CACHE_DIR": str(tmp_path)},
                             started="calling")
    assert (rc, out) == (3, "KeyboardInterrupt\n"), err
    assert "running it through torch ops" not in err  # no fallback warning
