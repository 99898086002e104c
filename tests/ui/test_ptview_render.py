"""Render tests for `ptview --render` (and `--check`): SVG output is
well-formed XML holding the expected nodes and clusters, PNG output is a
real PNG, .dot output re-parses with libcgraph (tests/ui/dotcheck.c), large
graphs fold by module, the focus highlights its provenance, and bad input
gives one line naming the file.

Environment (set by CTest): PTVIEW, PTVIEW_DOTCHECK, PTC_SOURCE_DIR.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

PTVIEW = os.environ.get("PTVIEW", "")
DOTCHECK = os.environ.get("PTVIEW_DOTCHECK", "")
SRC = os.environ.get("PTC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TRACES = os.path.join(SRC, "tests", "data", "traces")
SMALL = os.path.join(TRACES, "small")
BROKEN = os.path.join(TRACES, "broken")
SVG = "{http://www.w3.org/2000/svg}"

if not (PTVIEW and os.path.exists(PTVIEW)):
    pytest.skip("PTVIEW is not set to a built ptview (run through ctest)", allow_module_level=True)


def ptview(*args, ok=True):
    r = subprocess.run([PTVIEW, *args], capture_output=True, text=True, timeout=120)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def svg_items(path):
    """(node titles, cluster titles, all text) of an SVG written by Graphviz."""
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == SVG + "svg"
    nodes, clusters = set(), set()
    for g in root.iter(SVG + "g"):
        title = g.find(SVG + "title")
        if g.get("class") == "node":
            nodes.add(title.text)
        elif g.get("class") == "cluster":
            clusters.add(title.text)
    text = " ".join(t.text or "" for t in root.iter(SVG + "text"))
    return nodes, clusters, root, text


def dot_items(path):
    r = subprocess.run([DOTCHECK, path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    nodes = {l[5:] for l in lines if l.startswith("node ")}
    clusters = {l[8:] for l in lines if l.startswith("cluster ")}
    counts = dict(l.split() for l in lines if l.split()[0] in ("nodes", "edges"))
    return nodes, clusters, int(counts["nodes"]), int(counts["edges"])


def test_svg_nodes_and_clusters(tmp_path):
    out = tmp_path / "captured.svg"
    r = ptview("--render", str(out), SMALL)
    assert "captured of forward_0" in r.stdout
    nodes, clusters, _, text = svg_items(out)
    # Nodes are named by their value names (without '%': cgraph reserves it).
    for n in range(12):
        assert str(n) in nodes
    assert {"x", "head_w", "return"} <= nodes
    assert {"cluster_blocks", "cluster_blocks.0", "cluster_blocks.1"} == clusters
    # Labels carry op, name, shape and dtype.
    assert "layer_norm" in text and "%4 : f32[2,8]" in text
    assert "f32[16,8] cpu" in text


def test_png_signature(tmp_path):
    out = tmp_path / "prims.png"
    ptview("--render", str(out), "--stage", "prims", SMALL)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20000  # a drawing of ~90 nodes, not an empty image


def test_dot_reparses_with_libcgraph(tmp_path):
    out = tmp_path / "prims.dot"
    r = ptview("--render", str(out), "--stage", "prims", SMALL)
    nodes, clusters, nnodes, nedges = dot_items(str(out))
    assert "%d nodes, %d edges" % (nnodes, nedges) in r.stdout
    assert "17" in nodes and "70" in nodes
    assert "cluster_blocks.0.norm" in clusters and "cluster_head" in clusters


def test_focus_highlights_provenance(tmp_path):
    out = tmp_path / "focus.svg"
    # The captured layer_norm %4 became 12 prims nodes: all highlighted.
    r = ptview("--render", str(out), "--stage", "prims", "--focus", "captured:%4", SMALL)
    assert "12 highlighted" in r.stdout
    _, _, root, _ = svg_items(out)
    hot = set()
    for g in root.iter(SVG + "g"):
        if g.get("class") == "node" and any(p.get("fill") == "#fff59d" for p in g):
            hot.add(g.find(SVG + "title").text)
    assert len(hot) == 12 and "17" in hot and "29" in hot
    # A node of the drawn stage: itself (the focus) plus its siblings.
    r = ptview("--render", str(tmp_path / "f2.dot"), "--stage", "prims", "--focus", "%64", SMALL)
    assert "7 highlighted" in r.stdout


def test_depth_folds_modules(tmp_path):
    out = tmp_path / "depth.dot"
    r = ptview("--render", str(out), "--depth", "1", SMALL)
    assert "modules folded below depth 1" in r.stdout
    nodes, clusters, _, _ = dot_items(str(out))
    assert {"[blocks.0]", "[blocks.1]"} <= nodes
    assert "4" not in nodes and "10" in nodes
    assert clusters == {"cluster_blocks"}
    # The focus keeps its module open.
    ptview("--render", str(out), "--depth", "1", "--focus", "%4", SMALL)
    nodes, _, _, _ = dot_items(str(out))
    assert "4" in nodes and "[blocks.1]" in nodes and "[blocks.0]" not in nodes


def test_large_graph_folds_automatically(tmp_path):
    trace = tmp_path / "big"
    subprocess.run([sys.executable, os.path.join(TRACES, "gen_traces.py"), "big", str(trace),
                    "--blocks", "120"], check=True, capture_output=True)
    out = tmp_path / "big.svg"
    r = ptview("--render", str(out), str(trace))
    assert "modules folded below depth" in r.stdout
    nodes, clusters, _, _ = svg_items(out)
    assert 100 <= len(nodes) <= 300, len(nodes)  # 600 captured nodes + inputs, folded
    assert "[encoder.layers.7]" in nodes or "cluster_encoder.layers.7" in clusters
    r = ptview("--render", str(tmp_path / "few.dot"), "--max-nodes", "20", str(trace))
    nodes, _, _, _ = dot_items(str(tmp_path / "few.dot"))
    assert "[encoder.layers]" in nodes and len(nodes) <= 20


def test_kernel_clusters(tmp_path):
    out = tmp_path / "kernels.dot"
    ptview("--render", str(out), "--stage", "kernels", SMALL)
    nodes, clusters, _, _ = dot_items(str(out))
    assert "cluster_kernel 3" in clusters and "cluster_kernel 9" in clusters
    assert "4" in nodes
    out = tmp_path / "code.svg"
    r = ptview("--render", str(out), "--stage", "llvm", "--focus", "llvm:3", SMALL)
    assert "3 highlighted" in r.stdout  # kernel 3 holds %2 (its bias add), %3 and %4


def test_bare_ptir_file(tmp_path):
    out = tmp_path / "bare.svg"
    r = ptview("--render", str(out), os.path.join(SMALL, "forward_1", "captured.ptir"))
    assert "captured of captured.ptir" in r.stdout
    nodes, _, _, _ = svg_items(out)
    assert "4" in nodes


@pytest.mark.parametrize("args,needle", [
    (["--render", "out.txt", SMALL], "out.txt: unknown output format"),
    (["--render", "x.svg", "--stage", "loops", SMALL], "stage 'loops' is text"),
    (["--render", "x.svg", "--stage", "nosuch", SMALL], "no stage 'nosuch'"),
    (["--render", "x.svg", "--compile", "nope_9", SMALL], "no compile 'nope_9'"),
    (["--render", "x.svg", "--focus", "%999", SMALL], "no value %999 in captured of forward_0"),
    (["--render", "x.svg", "--stage", "prims", BROKEN], "prims.ptir:9:19"),
    (["--render", "x.svg", "--depth", "-3", SMALL], "--depth expects a non-negative integer"),
    (["--render", "x.svg", "/no/such/trace"], "/no/such/trace"),
    (["--render", "x.svg", os.path.join(BROKEN, "forward_0", "prims.ptir")], "prims.ptir:9:19"),
    ([SMALL], "needs a terminal"),
])
def test_bad_input_is_one_line(tmp_path, args, needle):
    r = subprocess.run([PTVIEW, *args], capture_output=True, text=True, cwd=tmp_path,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert needle in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("ptview: ")


def test_check(tmp_path):
    r = ptview("--check", SMALL)
    assert "forward_0: captured 12 prims 69 loops 20 kernels 10 llvm 10" in r.stdout
    assert "2 compiles, 0 problems" in r.stdout
    r = ptview("--check", BROKEN, ok=False)
    assert r.returncode == 1
    assert "prims broken" in r.stdout and "loops missing" in r.stdout
    assert "forward_1: compile folder missing" in r.stdout
    assert "2 compiles, 5 problems" in r.stdout


# ---- traces written by the compiler itself (not the checked-in fixtures) ------------------------

PTC_RUN = os.environ.get("PTC_RUN", "")
BUILD = os.environ.get("PTC_BUILD_DIR", "")


def check_real_trace(trace, tmp_path, frame):
    """A trace the pipeline wrote: every stage reads back with no problems and
    the kernels stage renders with kernel clusters."""
    r = ptview("--check", str(trace))
    assert "0 problems" in r.stdout, r.stdout
    for stage in ("captured", "prims", "loops", "kernels"):
        assert stage in r.stdout, r.stdout
    out = tmp_path / "kernels.svg"
    r = ptview("--render", str(out), "--stage", "kernels", str(trace))
    assert "kernels of " + frame in r.stdout + r.stderr, (r.stdout, r.stderr)
    nodes, clusters, _, text = svg_items(out)
    assert nodes and clusters, (nodes, clusters)
    assert "kernel 0" in text, text


def test_trace_written_by_ptc_run(tmp_path):
    if not (PTC_RUN and os.path.exists(PTC_RUN)):
        pytest.skip("PTC_RUN is not set to a built ptc-run")
    trace = tmp_path / "trace"
    r = subprocess.run([PTC_RUN, "--backend", "cpu", "--trace", str(trace),
                        os.path.join(SRC, "examples", "residual_block.ptir")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    check_real_trace(trace, tmp_path, "forward_0")


def test_trace_written_by_ptc_compile(tmp_path):
    """PTC_TRACE_DIR under ptc.compile: the capture's stages too (guards.txt)."""
    code = ("import torch, ptc\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))\n"
            "with torch.no_grad():\n"
            "    ptc.compile(m.eval())(torch.randn(2, 8))\n")
    env = dict(os.environ, PTC_TRACE_DIR=str(tmp_path / "trace"),
               PYTHONPATH=os.path.join(BUILD, "python"))
    probe = subprocess.run([sys.executable, "-c", "import torch, ptc"], capture_output=True, env=env)
    if not BUILD or probe.returncode != 0:
        pytest.skip("the ptc Python module is not built (or torch is missing)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "guards.txt" in os.listdir(tmp_path / "trace" / "Sequential.forward_0")
    check_real_trace(tmp_path / "trace", tmp_path, "Sequential.forward_0")


def test_html_draws_every_stage_in_one_process(tmp_path):
    """ptview --html draws a graph per stage of each compile in one process.
    Each drawing had a Graphviz context of its own, and Graphviz 2.42's pango
    plugin compared the next one's first font name with one the previous
    context had freed: a heap-use-after-free that the ASan build's ptview
    reports (scripts/test.sh's sanitizer stage runs this file, label unit),
    ending it with exit status 1."""
    out = tmp_path / "small.html"
    ptview("--html", str(out), SMALL)
    assert out.read_text().count("<svg") >= 2
