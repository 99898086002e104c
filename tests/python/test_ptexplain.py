"""ptexplain, the built executable, on the scripts of examples/explain/.

Golden reports: each case runs `ptexplain --no-color ...` from the source
root and compares its standard output, with timings masked, to
tests/explain/<case>.txt. Timing figures are the only thing that may change
between runs: every number followed by "ms" or "%" becomes N, and line
numbers inside torch's own files (which move between torch releases) become
L:C. PTC_UPDATE_GOLDEN=1 rewrites the goldens from this run.

Also: two runs give the same masked report; --json and -o; the exit status
and traceback of a script that raises; one-line errors with status 2 for a
bad command line or a missing file.
"""
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
# Reports quote torch's own code (module paths, what an op was called):
# the goldens are made with torch 2.x. Older torch runs the other tests.
old_torch = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                               reason="ptexplain's goldens are made with torch 2.x, this is %s"
                               % torch.__version__)

SRC = os.environ.get("PTC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PTC_BUILD_DIR", os.path.join(SRC, "build"))
EXE = os.path.join(BUILD, "tools", "explain", "ptexplain")
GOLDEN = os.path.join(SRC, "tests", "explain")
UPDATE = os.environ.get("PTC_UPDATE_GOLDEN") == "1"

if not os.access(EXE, os.X_OK):
    pytest.skip("ptexplain is not built (%s)" % EXE, allow_module_level=True)


def run(*args, cwd=SRC):
    env = dict(os.environ)
    for k in ("PTC_TRACE_DIR", "PTC_LOGS", "PTC_STRICT", "PTC_REPRO"):
        env.pop(k, None)
    env["NO_COLOR"] = "1"
    return subprocess.run([EXE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def mask(text):
    text = re.sub(r"\d+(\.\d+)?(?= ms\b|%)", "N", text)
    return re.sub(r"((?:^|[ (])torch/[\w/.]+\.py):\d+:\d+", r"\1:L:C", text, flags=re.M)


# case -> (command line, exit status)
CASES = {
    "model_with_breaks": (["examples/explain/model_with_breaks.py"], 0),
    "model_entry": (["--entry", "examples/explain/model_with_breaks.py:Model", "--no-grad"], 0),
    "every_break": (["examples/explain/every_break.py"], 0),
    "recompile_storm": (["examples/explain/recompile_storm.py"], 0),
    "no_breaks": (["examples/explain/no_breaks.py"], 0),
    "perf_hints": (["examples/explain/perf_hints.py"], 0),
    "raises": (["examples/explain/raises.py"], 1),
}

_runs = {}


def report(case):
    if case not in _runs:
        args, _ = CASES[case]
        _runs[case] = run("--no-color", *args)
    return _runs[case]


@old_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    p = report(case)
    assert p.returncode == CASES[case][1], p.stderr
    got = mask(p.stdout)
    path = os.path.join(GOLDEN, case + ".txt")
    if UPDATE:
        with open(path, "w") as f:
            f.write(got)
    with open(path) as f:
        want = f.read()
    assert got == want, "masked report differs from %s (PTC_UPDATE_GOLDEN=1 regenerates it)" % path


@old_torch
def test_every_break_code_is_reported():
    import ptc
    text = report("every_break").stdout
    for b in ptc.break_codes():
        assert re.search(r"^#\d+ %s " % b["code"], text, re.M), b["code"]


def test_two_runs_give_the_same_report():
    first = report("model_with_breaks")
    again = run("--no-color", *CASES["model_with_breaks"][0])
    assert first.returncode == again.returncode == 0
    assert mask(first.stdout) == mask(again.stdout)


def test_script_that_raises_prints_report_then_traceback():
    p = report("raises")
    assert p.returncode == 1
    assert "the script raised ValueError: expected 2 rows, got 3" in p.stdout
    assert p.stderr.lstrip().startswith("Traceback (most recent call last):"), p.stderr
    assert 'raises.py", line' in p.stderr and p.stderr.rstrip().endswith("ValueError: expected 2 rows, got 3")
    assert "<ptexplain>" not in p.stderr


def test_sys_exit_status(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nprint('bye')\nsys.exit(3)\n")
    p = run("--no-color", str(script))
    assert p.returncode == 1, p.stderr
    assert p.stdout.startswith("bye\nptexplain ")
    assert "the script exited with status 3" in p.stdout
    ok = tmp_path / "ok.py"
    ok.write_text("import sys\nsys.exit(0)\n")
    assert run(str(ok)).returncode == 0


def test_json_to_file(tmp_path):
    out = tmp_path / "report.json"
    p = run("--json", "-o", str(out), "examples/explain/model_with_breaks.py")
    assert p.returncode == 0, p.stderr
    assert "Summary" not in p.stdout
    r = json.loads(out.read_text())
    assert [b["code"] for b in r["breaks"]] == ["PTC-B001", "PTC-B005", "PTC-B002", "PTC-B007"]
    assert r["breaks"][0]["where"]["line"] == 16 and r["summary"]["graphs"] == 5


@pytest.mark.parametrize("args, message", [
    (["--bogus", "x.py"], "unknown option --bogus"),
    ([], "no script given"),
    (["no/such/script.py"], "no/such/script.py: No such file or directory"),
    (["--entry", "examples/explain/model_with_breaks.py"], "expected FILE.py:FUNCTION"),
    (["--entry", "missing.py:f"], "missing.py: No such file or directory"),
    (["--runs", "0", "x.py"], "--runs 0: expected a number"),
    (["-o"], "-o needs a value"),
    (["--entry", "examples/explain/no_breaks.py:main"], "has no example_inputs()"),
    (["--entry", "examples/explain/model_with_breaks.py:Nope"], "model_with_breaks.py has no Nope"),
    (["examples/explain"], "examples/explain holds no measurements"),  # a trace directory
    (["examples/explain", "x"], "examples/explain: a trace directory takes no arguments"),
    (["-o", "no/such/dir/report.txt", "examples/explain/no_breaks.py"], "no/such/dir/report.txt: No such file"),
])
def test_command_line_errors(args, message):
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ptexplain: ") and message in lines[0], p.stderr
    assert p.stdout == ""


SLOW_FIRST = '''
import time
import torch
import ptc

CALLS = []


@ptc.disable
def slow_first_call(v):
    if not CALLS:  # one-time work: a library's start-up, a lazy import
        time.sleep(0.3)
    CALLS.append(1)
    return v


def a(x):
    y = x * 2
    print("a ran")
    return y + 1


def b(x):
    y = x * 2
    y = slow_first_call(y)
    return y + 1


for f in (torch.compile(a), torch.compile(b)):
    for _ in range(RUNS):
        f(torch.ones(4))
'''


@pytest.mark.parametrize("runs", [1, 5])
def test_slow_first_call_does_not_move_the_ranking(tmp_path, runs):
    """b's break pays 300 ms once (its first call); a's break is cheap. The
    ranking ignores first runs, so a's break, earlier in the file, stays first."""
    script = tmp_path / "slow_first.py"
    script.write_text(SLOW_FIRST.replace("RUNS", str(runs)))
    p = run("--json", str(script))
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout[p.stdout.index("{"):])
    assert [b["code"] for b in r["breaks"]] == ["PTC-B005", "PTC-B014"]
    slow = r["breaks"][1]
    assert slow["cost_ms"] >= 300 and slow["rank_ms"] < 30, slow


TRAIN_STEP = '''
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def step(x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


compiled = torch.compile(step)
x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
for _ in range(3):
    compiled(x, y)
'''


@old_torch
def test_training_step_breaks_have_a_code_a_place_and_a_hint(tmp_path):
    """A whole training step (forward, loss, backward, AdamW) under
    torch.compile: every break entry names its code, place and hint, also
    the one that made step run eagerly (once an empty PTC-B000 at :0)."""
    script = tmp_path / "train_step.py"
    script.write_text(TRAIN_STEP)
    env = dict(os.environ, PTC_LOGS="graph_breaks", NO_COLOR="1")
    env.pop("PTC_TRACE_DIR", None)
    p = subprocess.run([EXE, "--json", str(script)], cwd=SRC, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert " at :0 " not in p.stderr, p.stderr
    r = json.loads(p.stdout[p.stdout.index("{"):])
    assert r["breaks"]
    for b in r["breaks"]:
        assert b["code"] != "PTC-B000" and b["reason"] and b["hint"], b
        assert b["where"]["file"] and b["where"]["line"] > 0, b


def test_entry_checks_before_running_the_file(tmp_path):
    """--entry names a function the file lacks, or the file has no
    example_inputs(): a one-line error before any of the file runs (its top
    level may be a whole training run)."""
    f = tmp_path / "train.py"
    f.write_text("print('TOP LEVEL RAN')\n\nclass Model:\n    pass\n")
    for entry, message in (("Model", "has no example_inputs()"), ("Nope", "has no Nope")):
        p = run("--entry", "%s:%s" % (f, entry))
        assert p.returncode == 2 and message in p.stderr, p.stderr
        assert "TOP LEVEL RAN" not in p.stdout


def test_script_that_compiles_nothing_says_so(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nprint((torch.ones(3) * 2).sum().item())\n")
    p = run("--no-color", str(script))
    assert p.returncode == 0, p.stderr
    assert "nothing was compiled" in p.stdout
    assert "every captured op ran in ptc's generated kernels" not in p.stdout
    assert "every compiled function ran as whole graphs" not in p.stdout


NO_GRAD_MODEL = '''
import sys
import torch
import ptc

model = ptc.compile(torch.nn.Linear(8, 4))
with torch.no_grad() if sys.argv[1] == "no_grad" else torch.enable_grad():
    model(torch.randn(2, 8))
'''


@pytest.mark.parametrize("mode", ["no_grad", "grad"])
def test_trace_of_a_no_grad_run_marks_nothing_grad(tmp_path, mode):
    """The stages in the trace folder (what ptview shows) mark values
    `grad` only when the graph ran with grad mode on."""
    script = tmp_path / "m.py"
    script.write_text(NO_GRAD_MODEL)
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_")}
    env.update(PYTHONPATH=os.path.join(BUILD, "python"), PTC_TRACE_DIR=str(trace))
    p = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (folder,) = [d for d in trace.iterdir() if d.is_dir()]
    captured = (folder / "captured.ptir").read_text()
    assert (" grad" in captured) == (mode == "grad"), captured


MEASURED_TRAINING = '''
import statistics, sys, time
import torch
import ptc

torch.manual_seed(0)
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.mean() > 0:  # the value decides: a graph break, measured on every run
            h = h * 2
        return self.fc2(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
compiled = ptc.compile(model)


def step():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(compiled(x), y).backward()
    opt.step()


for _ in range(5):
    step()
ratios = []
for r in range(int(sys.argv[1])):
    ms = {}
    for on in (True, False) if r % 2 == 0 else (False, True):  # ABBA: no order bias
        ptc._C._measure(on)
        t = time.thread_time()
        for _ in range(3):
            step()
        ms[on] = time.thread_time() - t
    ratios.append(ms[True] / ms[False])
ptc._C._measure(True)
print("measured/unmeasured %.3f" % statistics.median(ratios))
'''


def test_measuring_costs_a_training_step_little(tmp_path):
    """ptexplain's own measuring (issue 12 item 11): a small training step
    with a graph break, measured and unmeasured in turn in one ptexplain
    process, so that the machine's load weighs on both alike, each timed by
    the CPU time of the thread that runs the step (time.thread_time: the
    time it waits for a core is not counted; by wall time the median reached
    2.005 once on this machine with five builds beside it). Measuring is a
    clock read around each graph and break, nothing per op: on this machine
    the median ratio is within the noise (0.93-1.36 with measuring off in
    both halves); 2 is far outside it. The report counts only the
    measured steps' breaks: the 5 warm-up steps and 3 of every round."""
    script = tmp_path / "train.py"
    script.write_text(MEASURED_TRAINING)
    rounds = 30
    p = run(str(script), str(rounds), cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    ratio = float(re.search(r"measured/unmeasured (\S+)", p.stdout).group(1))
    assert ratio < 2.0, p.stdout
    assert "1 site, %d breaks run" % (5 + 3 * rounds) in p.stdout, p.stdout


TRAINED_MLP = '''
import torch
import ptc

model = ptc.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                        torch.nn.Linear(16, 4)))
model(torch.randn(2, 8)).sum().backward()
'''


def test_compile_time_of_a_training_graph_has_its_backward_stages(tmp_path):
    """A graph compiled for training reports the joint graph, the partition
    and the backward's own stages, which used to be lumped into "other"; an
    inference graph's line keeps its stages only."""
    script = tmp_path / "mlp.py"
    script.write_text(TRAINED_MLP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_")}
    p = subprocess.run([EXE, "--json", str(script)], cwd=SRC, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    stages = json.loads(p.stdout[p.stdout.index("{"):])["summary"]["compile_stages_ms"]
    assert list(stages) == ["tracing", "joint", "partition", "prims", "loops", "kernels",
                            "codegen", "backward_prims", "backward_loops", "backward_kernels",
                            "other"], stages
    # the code of both halves is made in one batch, under codegen
    assert stages["codegen"] > 0 and stages["partition"] > 0, stages
    script.write_text(TRAINED_MLP.replace("model(torch.randn(2, 8)).sum().backward()",
                                          "with torch.no_grad():\n    model(torch.randn(2, 8))"))
    p = subprocess.run([EXE, "--json", str(script)], cwd=SRC, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    stages = json.loads(p.stdout[p.stdout.index("{"):])["summary"]["compile_stages_ms"]
    assert list(stages) == ["tracing", "prims", "loops", "kernels", "codegen", "other"], stages
