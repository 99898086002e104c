"""The shareable HTML report (issue 18 item 3): `ptview --html` of a trace and
`ptexplain --html` of a run are one self-contained page — every in-page link
resolves, nothing is fetched from elsewhere, the graphs are inline SVG — and
headless Chromium renders it (a screenshot that is not blank, a DOM with the
drawings)."""
import os
import re
import shutil
import subprocess

import pytest

SRC = os.environ.get("PTC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PTC_BUILD_DIR", os.path.join(SRC, "build"))
PTVIEW = os.path.join(BUILD, "tools", "viewer", "ptview")
PTEXPLAIN = os.path.join(BUILD, "tools", "explain", "ptexplain")
SMALL = os.path.join(SRC, "tests", "data", "traces", "small")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def check_page(path):
    """Links resolve, nothing external; returns the page's text."""
    page = open(path, encoding="utf-8").read()
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    links = re.findall(r'href="#([^"]*)"', page)
    assert links, "no links between stages"
    assert [l for l in links if l not in ids] == []
    assert not re.search(r'(?:src|href)\s*=\s*"(?!#)', page), "a resource outside the page"
    assert "url(" not in page and "<script" not in page and "<link" not in page
    return page


def test_ptview_html_draws_every_graph_stage_and_links_provenance(tmp_path):
    out = tmp_path / "small.html"
    r = subprocess.run([PTVIEW, "--html", str(out), SMALL], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "wrote %s (2 compiles)" % out in r.stdout
    page = check_page(out)
    # forward_0 has captured and prims (graphs) and kernels: three drawings;
    # forward_1 stopped after its captured stage
    assert page.count("<svg") >= 4
    # %4 (layer_norm) in the captured stage links to what it became in prims
    line = re.search(r'<span id="c0-captured-\d+">%4 = layer_norm.*', page).group(0)
    assert "&rarr; prims %17" in line and "&rarr; kernels" in line


def test_ptview_html_errors_name_the_file(tmp_path):
    r = subprocess.run([PTVIEW, "--html", str(tmp_path / "no" / "dir" / "x.html"), SMALL],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "x.html" in r.stderr
    r = subprocess.run([PTVIEW, "--html", "x.html", "--check", SMALL], capture_output=True, text=True)
    assert r.returncode == 2 and "exclusive" in r.stderr


def explain_html(tmp_path):
    out = tmp_path / "report.html"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_") or k == "PTC_BUILD_DIR"}
    env["NO_COLOR"] = "1"
    r = subprocess.run([PTEXPLAIN, "--html", str(out), "examples/explain/model_with_breaks.py"],
                       cwd=SRC, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def test_ptexplain_html_holds_the_report_and_the_stages(tmp_path):
    out, printed = explain_html(tmp_path)
    page = check_page(out)
    assert '<h2 id="report">Report</h2>' in page
    assert "#1 PTC-B001 branch on a tensor value" in page and "Graph breaks" in printed
    assert page.count("<h2 id=\"c") == 5  # one section per compile
    assert page.count("<svg") >= 5


# Three blocks, the graph cut before the second and third (as ptc cuts a DDP
# model where each gradient bucket begins), trained with compiled autograd.
PIECES = """
import torch
import ptc
from ptc._split import graph_cut

ptc.config.compiled_autograd = True
model = torch.nn.Sequential(*[torch.nn.Linear(6, 6) for _ in range(3)])
for k in (1, 2):
    model[k].register_forward_pre_hook(lambda mod, args, k=k: graph_cut("bucket %d begins" % k))
step = ptc.compile(model)
for _ in range(2):
    step(torch.randn(4, 6)).square().sum().backward()
"""


def test_ptexplain_html_shows_graph_pieces(tmp_path):
    """The report in the page shows a graph cut into pieces: their count,
    and the cut each ends at."""
    (tmp_path / "pieces.py").write_text(PIECES)
    out = tmp_path / "pieces.html"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_") or k == "PTC_BUILD_DIR"}
    env["NO_COLOR"] = "1"
    r = subprocess.run([PTEXPLAIN, "--html", str(out), "pieces.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    page = " ".join(check_page(out).split())
    assert "Graph pieces graph 1 of Sequential.forward runs as 3 pieces" in page, page
    for k, end in enumerate(["the cut &quot;bucket 1 begins&quot;", "the cut &quot;bucket 2 begins&quot;",
                             "the graph's end"]):
        assert re.search(r"piece %d 1 op in %d; .*? ends at %s" % (k + 1, k, end), page), (k, page)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_chromium_renders_the_page(tmp_path):
    out = tmp_path / "small.html"
    subprocess.run([PTVIEW, "--html", str(out), SMALL], check=True, capture_output=True)
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,2400"]
    dom = subprocess.run(flags + ["--dump-dom", out.as_uri()], capture_output=True, text=True,
                         timeout=300).stdout
    assert dom.count("<svg") >= 4 and "layer_norm" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(flags + ["--screenshot=%s" % shot, out.as_uri()], capture_output=True, timeout=300)
    from PIL import Image
    img = Image.open(shot).convert("L")
    dark = sum(img.histogram()[:128])
    assert dark > 0.005 * img.width * img.height, "the screenshot is blank"
