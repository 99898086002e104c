"""ptminify end to end: bad input gives one line and exit 2, a graph that does
not fail is refused, a repro folder is taken as it is (check and planted bug
from repro.json), the output folder reproduces from disk, and repro.py's
torch translation agrees with the reference interpreter.

Runs the harness backend (the reference interpreter with PTC_INJECT's runtime
stage), which needs no compiler pipeline. The corpus of planted bugs in real
graphs is tests/minify/run_corpus.py (its own CTest test).
"""
import json
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("PTC_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build")
SOURCE = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
EXE = os.path.join(BUILD, "tools", "minifier", "ptminify")
DATA = os.path.join(SOURCE, "tests", "data", "minify")
BERT = [os.path.join(DATA, "bert.ptir"), "--inputs", os.path.join(DATA, "bert.inputs.bin")]

CHAIN = """# ptc ir v1
graph chain(%x: f32[4,16] cpu, %w: f32[32,16] cpu, %b: f32[32] cpu) {
  %0 = linear(%x, %w, %b) : f32[4,32]
  %1 = tanh(%0) : f32[4,32]
  %2 = mul(%1, 2.0) : f32[4,32]
  %3 = exp(%2) : f32[4,32]
  %4 = relu(%3) : f32[4,32]
  %5 = add(%4, %0) : f32[4,32]
  %6 = sigmoid(%5) : f32[4,32]
  %7 = sum(%6, [1]) : f32[4]
  return (%7)
}
"""


def ptminify(*args, inject=None, timeout=300):
    env = dict(os.environ)
    env.pop("PTC_INJECT", None)
    if inject:
        env["PTC_INJECT"] = inject
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("ptminify: ")
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.fixture
def chain(tmp_path):
    p = tmp_path / "chain.ptir"
    p.write_text(CHAIN)
    return p


def test_bad_flags(chain):
    one_line_error(ptminify("--frobnicate", chain), "unknown option '--frobnicate'")
    one_line_error(ptminify("--jobs", "x", chain), "--jobs expects a number")
    one_line_error(ptminify("--timeout", "0", chain), "--timeout expects a number")
    one_line_error(ptminify("--check", "segfault", chain), "--check expects crash")
    one_line_error(ptminify("--check", "error:(", chain), "bad regex")
    one_line_error(ptminify("--backend", "tpu", chain), "unknown backend 'tpu'")
    one_line_error(ptminify(chain, "--check"), "--check expects a value")
    one_line_error(ptminify(), "no input given")
    one_line_error(ptminify(chain, chain), "more than one input")


def test_bad_files(tmp_path, chain):
    one_line_error(ptminify(tmp_path / "missing"), "missing: No such file or directory")
    bad = tmp_path / "bad.ptir"
    bad.write_text("# ptc ir v1\ngraph g(%x: f32[4] cpu) {\n  %0 = relu(%y) : f32[4]\n"
                   "  return (%0)\n}\n")
    one_line_error(ptminify("--backend", "harness", bad), "bad.ptir:3:")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    one_line_error(ptminify(empty_dir), "repro.json")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "repro.json").write_text('{"kind": "error",\n "graph": }\n')
    one_line_error(ptminify(broken), "repro.json:2:")
    weird = tmp_path / "weird"
    weird.mkdir()
    (weird / "repro.json").write_text('{"kind": "explosion"}\n')
    one_line_error(ptminify(weird), "\"kind\" is 'explosion'")
    one_line_error(ptminify("--backend", "harness", chain, "--inputs", tmp_path / "nope.bin"),
                   "nope.bin")
    notes = tmp_path / "notes.bin"
    notes.write_text("hello")
    one_line_error(ptminify("--backend", "harness", chain, "--inputs", notes), "notes.bin")


def test_does_not_fail(chain):
    r = ptminify("--backend", "harness", chain)
    one_line_error(r, "does not fail", "matches the reference interpreter")
    # It fails, but not as asked.
    r = ptminify("--backend", "harness", "--check", "error", chain, inject="runtime:exp:crash")
    one_line_error(r, "does not fail as checked", "crash (SIGSEGV) in runtime")
    r = ptminify("--backend", "harness", "--stage", "codegen", chain,
                 inject="runtime:exp:error")
    one_line_error(r, "does not fail in stage codegen")


def test_minimise_and_reproduce(tmp_path, chain):
    out = tmp_path / "out"
    r = ptminify("--backend", "harness", "--jobs", "2", "-o", out, chain,
                 inject="runtime:tanh:error")
    assert r.returncode == 0, r.stderr
    assert "8 -> 1 nodes" in r.stdout
    assert "signature: error InjectedError in runtime: injected error in runtime of tanh" in \
        r.stdout
    assert sorted(os.listdir(out)) == ["graph.ptir", "inputs.bin", "reference.bin", "repro.json",
                                       "repro.py", "repro.sh", "summary.json", "summary.txt"]
    text = (out / "graph.ptir").read_text()
    assert text.count(" = ") == 1 and "tanh(%0)" in text
    meta = json.loads((out / "repro.json").read_text())
    assert meta["kind"] == "error" and meta["stage"] == "runtime"
    assert meta["error_class"] == "InjectedError" and meta["inject"] == "runtime:tanh:error"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes_before"] == 8 and summary["nodes_after"] == 1 and summary["reduced"]
    assert summary["tests"] > 0
    # The folder alone reproduces: the planted bug comes from repro.json.
    r = ptminify("--reproduce", out)
    assert r.returncode == 1, r.stderr
    assert "injected error in runtime of tanh" in r.stdout
    env = dict(os.environ, PTMINIFY=EXE)
    env.pop("PTC_INJECT", None)
    r = subprocess.run(["sh", str(out / "repro.sh")], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "injected error in runtime of tanh" in r.stdout, r.stderr
    # Minimising the minimal graph again changes nothing.
    r = ptminify("-o", tmp_path / "again", out)
    assert r.returncode == 0, r.stderr
    assert "disappears" not in r.stdout
    assert (tmp_path / "again" / "graph.ptir").read_text() == text
    # The input folder is never the output.
    one_line_error(ptminify("-o", out, out), "is the input folder")


def test_repro_folder_with_accuracy(tmp_path, chain):
    """A folder as ptc writes it under PTC_ACCURACY: kind, tolerances, planted bug."""
    folder = tmp_path / "repro_1"
    folder.mkdir()
    (folder / "graph.ptir").write_text(CHAIN)
    (folder / "repro.json").write_text(json.dumps({
        "version": 1, "kind": "accuracy", "stage": "accuracy", "error_class": "none",
        "message": "diverges", "backend": "harness", "rtol": 1e-4, "atol": 1e-5,
        "graph": "graph.ptir", "inputs": None, "inject": "runtime:sigmoid:wrong"}))
    r = ptminify("-o", tmp_path / "min", folder)
    assert r.returncode == 0, r.stderr
    assert "signature: accuracy" in r.stdout
    text = (tmp_path / "min" / "graph.ptir").read_text()
    assert text.count(" = ") == 1 and "sigmoid(" in text
    assert os.listdir(folder) == ["graph.ptir", "repro.json"] or \
        sorted(os.listdir(folder)) == ["graph.ptir", "repro.json"]  # untouched


def test_failure_needs_whole_graph(tmp_path, chain):
    out = tmp_path / "out"
    r = ptminify("--backend", "harness", "-o", out, chain, inject="runtime:*:error@8")
    assert r.returncode == 0, r.stderr
    assert "disappears when the graph is shrunk" in r.stdout
    assert (out / "graph.ptir").read_text().count(" = ") == 8
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["reduced"] and summary["nodes_after"] == 8


def test_two_ops_interacting(tmp_path, chain):
    """A bug that needs two nodes keeps both (and only those two)."""
    out = tmp_path / "out"
    r = ptminify("--backend", "harness", "-o", out, chain, inject="runtime:*:error@2")
    assert r.returncode == 0, r.stderr
    assert (out / "graph.ptir").read_text().count(" = ") == 2


def test_eager_translation_of_corpus_results(tmp_path):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "frombuffer"):
        pytest.skip("torch %s has no torch.frombuffer" % torch.__version__)
    graph, inputs = os.path.join(DATA, "bert.ptir"), os.path.join(DATA, "bert.inputs.bin")
    for inject in ("runtime:gelu:wrong", "runtime:scaled_dot_product_attention:error",
                   "runtime:layer_norm:wrong", "runtime:embedding:wrong@3"):
        out = tmp_path / inject.replace(":", "_").replace("@", "_")
        r = ptminify("--backend", "harness", "-q", "-o", out, graph, "--inputs", inputs,
                     inject=inject)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([sys.executable, str(out / "repro.py"), "--eager"],
                           capture_output=True, text=True)
        assert r.returncode == 0, (inject, r.stdout, r.stderr)
        assert "agree" in r.stdout


def translation_graphs():
    """Graphs whose repro.py translation is checked: the golden files, the
    examples, a stage-2 graph and the corpus."""
    paths = []
    for d in ("tests/golden", "examples", "tests/data/minify"):
        full = os.path.join(SOURCE, d)
        if os.path.isdir(full):
            paths += sorted(os.path.join(full, f) for f in os.listdir(full) if f.endswith(".ptir"))
    return paths


@pytest.mark.parametrize("graph", translation_graphs(), ids=os.path.basename)
def test_repro_py_translation(tmp_path, graph):
    """repro.py writes the graph as torch code: eager torch must agree with
    the reference interpreter's outputs (reference.bin)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "frombuffer"):
        pytest.skip("torch %s has no torch.frombuffer" % torch.__version__)
    text = open(graph).read()
    if "cuda" in text:
        pytest.skip("uses a CUDA device")
    if int(torch.__version__.split(".")[0]) < 2 and "f16" in text:
        pytest.skip("torch %s lacks f16 CPU kernels" % torch.__version__)
    args = ["--emit-only", "--backend", "harness", "-q", "-o", tmp_path / "out", graph]
    # bert.ptir and bert_prims.ptir share bert.inputs.bin
    stem = os.path.basename(graph).split(".")[0].split("_")[0]
    inputs = os.path.join(os.path.dirname(graph), stem + ".inputs.bin")
    if os.path.exists(inputs):
        args += ["--inputs", inputs]
    r = ptminify(*args)
    if r.returncode == 2:
        pytest.skip("not a valid graph: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    if not (tmp_path / "out" / "reference.bin").exists():
        pytest.skip("the reference interpreter rejects it on generated inputs")
    import runpy
    main = runpy.run_path(str(tmp_path / "out" / "repro.py"), run_name="repro")["main"]
    assert main(["--eager"]) == 0


def ptc_importable():
    r = subprocess.run([sys.executable, "-c", "import ptc, torch"], capture_output=True)
    return r.returncode == 0


@pytest.mark.parametrize("inject,status", [("prims:gelu:error", 1),
                                           ("codegen:prims.tanh:wrong", 1),
                                           ("runtime:scaled_dot_product_attention:crash", -11)])
def test_repro_py_reproduces_through_ptc_compile(tmp_path, inject, status):
    """The minimal graph as torch code, through ptc.compile (capture, the CPU
    pipeline): the planted failure shows again."""
    if not ptc_importable():
        pytest.skip("the ptc Python module is not built (or torch is missing)")
    if "scaled_dot_product" in inject and subprocess.run(
            [sys.executable, "-c", "import torch.nn.functional as F; F.scaled_dot_product_attention"],
            capture_output=True).returncode != 0:
        pytest.skip("torch < 2.0: repro.py spells attention out in matmuls, no sdpa node to crash")
    out = tmp_path / "out"
    r = ptminify("--backend", "cpu", "-q", "-o", out, *BERT, inject=inject)
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items() if k != "PTC_INJECT"}
    r = subprocess.run([sys.executable, str(out / "repro.py")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == status, (r.stdout, r.stderr[-2000:])
    if status == 1:
        assert "reproduced" in r.stdout



ACCURACY_MODEL = '''
import sys
import torch
import ptc

torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        print("block", file=sys.stderr)  # a break: each block is its own graph
        return torch.tanh(self.fc(x)) * 2


model = torch.nn.Sequential(*[Block() for _ in range(4)])
x = torch.randn(4, 8)
with torch.no_grad():
    want = model(x)
    compiled = ptc.compile(model)
    for _ in range(3):
        got = compiled(x)
assert torch.equal(got, want), (got - want).abs().max()
print("same as eager")
'''


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILD, "python", "ptc")),
                    reason="the ptc module is not built")
def test_accuracy_divergence_in_a_program(tmp_path):
    """PTC_ACCURACY in a compiled program, one planted bug in four identical
    blocks: one folder, named by the one warning, that ptminify shrinks; the
    program keeps eager's results and exits 0 (man ptc.7); PTC_STRICT=1
    makes the divergence an error."""
    pytest.importorskip("torch")
    script = tmp_path / "model.py"
    script.write_text(ACCURACY_MODEL)
    repro = tmp_path / "repro"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_")}
    env.update(PYTHONPATH=os.path.join(BUILD, "python"), PTC_ACCURACY="1", PTC_REPRO=str(repro),
               PTC_INJECT="codegen:prims.tanh:wrong")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "same as eager\n"
    warnings = [ln for ln in p.stderr.splitlines() if "RuntimeWarning" in ln]
    assert len(warnings) == 1 and "diverges from the reference interpreter" in warnings[0], p.stderr
    (folder,) = repro.iterdir()
    assert warnings[0].endswith("repro: %s" % folder)
    meta = json.loads((folder / "repro.json").read_text())
    assert meta["kind"] == "accuracy" and meta["backend"] == "cpu"
    m = ptminify("-q", "--jobs", "2", "-o", tmp_path / "min", folder, inject=meta["inject"])
    assert m.returncode == 0, m.stderr
    assert "tanh(" in (tmp_path / "min" / "graph.ptir").read_text()
    env["PTC_STRICT"] = "1"
    strict = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                            timeout=300)
    assert strict.returncode == 1 and "diverges from the reference interpreter" in strict.stderr
