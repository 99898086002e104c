"""ptexplain over a distributed script: the ranks run in processes the
script starts (torch.multiprocessing.spawn), where ptexplain's own bootstrap
is not; ptc measures them anyway and ptexplain reports each rank after the
script's own report, every line marked with its rank; `ptexplain TRACE_DIR`
reports them again from the trace directory the run left."""
import json
import os
import re
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from distributed_common import run_on_a_free_port  # noqa: E402

EXE = os.path.join(os.environ.get("PTC_BUILD_DIR", "build"), "tools", "explain", "ptexplain")
if not os.access(EXE, os.X_OK):
    pytest.skip("ptexplain is not built (%s)" % EXE, allow_module_level=True)

# Written for torch.compile; rank 1 alone breaks its graph (float() of a tensor, print).
SCRIPT = '''
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def step(x):
        h = model(x)
        if rank == 1:
            print("rank 1 sees", float(h.sum()) > -1e9)
        return h.relu().sum()

    f = torch.compile(step)
    with torch.no_grad():
        for _ in range(3):
            f(torch.randn(5, 8))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, int(sys.argv[1])), nprocs=2)
'''


def ptexplain(*args, cwd, trace=None):
    env = dict(os.environ, NO_COLOR="1")
    for k in ("PTC_TRACE_DIR", "PTC_LOGS", "PTC_STRICT", "PTC_REPRO"):
        env.pop(k, None)
    if trace:
        env["PTC_TRACE_DIR"] = str(trace)
    return subprocess.run([EXE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_ptexplain_reports_each_rank(tmp_path):
    (tmp_path / "ddp_script.py").write_text(SCRIPT)
    trace = tmp_path / "trace"
    r = run_on_a_free_port(lambda port: ptexplain("ddp_script.py", str(port), cwd=tmp_path,
                                                  trace=trace))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    # the script's own process compiled nothing; one line per rank, then each rank's report
    assert "the script's own process compiled nothing" in out, out
    assert re.search(r"\[rank 0\] +pid \d+: 1 graph, 0 break sites", out), out
    assert re.search(r"\[rank 1\] +pid \d+: 2 graphs, 2 break sites \(6 breaks run\)", out), out
    reports = out[out.index("\n[rank 0] ptexplain"):]
    assert all(line.startswith(("[rank 0]", "[rank 1]")) for line in reports.splitlines() if line), reports
    rank0 = "\n".join(line for line in reports.splitlines() if line.startswith("[rank 0]"))
    rank1 = "\n".join(line for line in reports.splitlines() if line.startswith("[rank 1]"))
    assert re.search(r"\[rank 0\] ptexplain ddp_script.py \d+ \(rank 0, pid \d+\)", rank0), rank0
    assert "every compiled function ran as whole graphs" in rank0 and "PTC-B002" not in rank0, rank0
    assert "[rank 1] #1 PTC-B005 print or other I/O" in rank1, rank1
    assert "PTC-B002 tensor converted to a Python number" in rank1, rank1
    assert re.search(r"\[rank 1\] +\d+ \| +print\(\"rank 1 sees\", float\(h.sum\(\)\)", rank1), rank1
    # each rank's measurements are kept in its rank_N folder of the trace directory
    for rank in (0, 1):
        assert [f for f in os.listdir(trace / ("rank_%d" % rank)) if f.startswith("measured_")], rank

    again = ptexplain("--json", str(trace), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    procs = json.loads(again.stdout)["processes"]
    assert [(p["rank"], p["summary"]["graphs"], p["summary"]["break_sites"]) for p in procs] == \
        [(0, 1, 0), (1, 2, 2)], procs
    one = ptexplain(str(trace / "rank_1"), cwd=tmp_path)
    assert one.returncode == 0 and "[rank 1] #1 PTC-B005" in one.stdout and "[rank 0]" not in one.stdout, \
        one.stdout + one.stderr


# DDP with compiled autograd: ptc cuts the forward's graph where each gradient
# bucket begins. Each rank writes the sizes of eager DDP's buckets (rebuilt
# after the first backward) beside the report.
DDP_SCRIPT = '''
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import ptc


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.fc3 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


def run(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ptc.config.compiled_autograd = True
    cap_mb = 200 / 2**20  # 200 bytes: each linear's parameters are a bucket of their own
    torch.manual_seed(0)
    eager = DDP(MLP(), bucket_cap_mb=cap_mb)
    ddp = DDP(ptc.compile(MLP()), bucket_cap_mb=cap_mb)
    for step in range(3):
        x = torch.randn(5, 8)
        eager(x).sum().backward()
        ddp(x).sum().backward()
    sizes = eager._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(",")
    with open(os.path.join(out, "buckets_%d.json" % rank), "w") as f:
        json.dump({"eager": len(sizes), "plan": ddp._ptc_bucket_plan}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, int(sys.argv[1]), sys.argv[2]), nprocs=2)
'''


def test_ptexplain_shows_the_pieces_of_ddp_buckets(tmp_path):
    """With compiled autograd, ptc cuts DDP's compiled forward where each
    gradient bucket begins: each rank's report shows the graph's pieces, as
    many as eager DDP's buckets, which bucket boundary each ends at, what it
    holds (ops, modules, kernels forward and backward) and its compile time;
    --json has the same per graph, and --html's page every rank's report
    and compiles."""
    (tmp_path / "ddp_pieces.py").write_text(DDP_SCRIPT)
    trace, page = tmp_path / "trace", tmp_path / "report.html"
    r = run_on_a_free_port(lambda port: ptexplain("--html", str(page), "ddp_pieces.py", str(port),
                                                  str(tmp_path), cwd=tmp_path, trace=trace))
    assert r.returncode == 0, r.stdout + r.stderr
    # the page holds every rank's report and each rank's compiles (main: no
    # page, "holds one trace per rank", exit status 1)
    from test_html_report import check_page

    html = check_page(page)
    assert "<h2>Compiles of rank 0</h2>" in html and "<h2>Compiles of rank 1</h2>" in html, html
    assert html.count("[rank 1] Graph pieces") == 1 and html.count("[rank 0] Graph pieces") == 1
    assert 'id="r1c0-captured-0"' in html, html
    for rank in (0, 1):
        buckets = json.loads((tmp_path / ("buckets_%d.json" % rank)).read_text())
        assert buckets["plan"] == [["fc3"], ["fc2"], ["fc1"]] and buckets["eager"] == 3, buckets
        report = "\n".join(line[len("[rank %d] " % rank):] for line in r.stdout.splitlines()
                           if line.startswith("[rank %d]" % rank))
        assert "graphs                1 (1 cut into 3 pieces: see Graph pieces)" in report, report
        assert "graph 1 of MLP.forward runs as 3 pieces, one autograd node each" in report, report
        section = report[report.index("\nGraph pieces\n"):report.index("\nGraph breaks\n")]
        pieces = [" ".join(text.split()) for text in re.split(r"\n    piece \d ", section)[1:]]
        assert [re.sub(r"[\d.]+ ms", "T ms", re.sub(r"^\d+ ops? in (\S+); forward \d+ kernels?( \+ 1 "
                                                 r"extern)?, backward \d+ kernels?( \+ \d extern)?;",
                                                 r"\1:", p)) for p in pieces] == [
            'fc1: program 1, compiled in T ms ends at the cut "DDP gradient bucket 2 of 3 begins at fc2"',
            'fc2: program 2, compiled in T ms ends at the cut "DDP gradient bucket 3 of 3 begins at fc3"',
            "fc3: program 3, compiled in T ms ends at the graph's end"], section

    again = ptexplain("--json", str(trace), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    for proc in json.loads(again.stdout)["processes"]:
        (graph,) = proc["graphs"]
        assert graph["programs"] == 3 and len(graph["pieces"]) == 3, graph
        assert [p["ends_at"] for p in graph["pieces"]] == [
            "DDP gradient bucket 2 of 3 begins at fc2", "DDP gradient bucket 3 of 3 begins at fc3",
            None], graph
        assert all(p["compile_ms"] > 0 and p["ops"] > 0 and p["kernels"][1] > 0
                   for p in graph["pieces"]), graph


def test_ptexplain_trace_dir_without_measurements(tmp_path):
    r = ptexplain(str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and "holds no measurements" in r.stderr, r.stderr


# One rank, buckets of 200 bytes: DDP's compiled forward cut into three pieces.
ONE_RANK_SCRIPT = '''
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ptc

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=0, world_size=1)
ptc.config.compiled_autograd = True
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                            torch.nn.Tanh(), torch.nn.Linear(16, 4))
ddp = DDP(ptc.compile(model), bucket_cap_mb=200 / 2**20)
for step in range(2):
    ddp(torch.randn(5, 8)).sum().backward()
dist.destroy_process_group()
'''


def test_trace_of_ddp_pieces_holds_every_piece(tmp_path):
    """A graph cut at DDP's bucket boundaries writes each piece's program
    to a trace folder of its own beside the graph's (it used to hold the
    first piece's stages only): its captured piece, joint, forward, backward,
    loops and kernels, listed in index.json, and ptview opens each."""
    import subprocess as sp
    import sys

    (tmp_path / "one_rank.py").write_text(ONE_RANK_SCRIPT)
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTC_")}
    env.update(PTC_TRACE_DIR=str(trace), PYTHONPATH=os.pathsep.join(sys.path))
    r = run_on_a_free_port(lambda port: sp.run([sys.executable, "one_rank.py", str(port)],
                                               cwd=tmp_path, env=env, capture_output=True,
                                               text=True, timeout=300))
    assert r.returncode == 0, r.stdout + r.stderr
    (index,) = trace.rglob("index.json")
    compiles = {c["id"]: c for c in json.loads(index.read_text())["compiles"]}
    whole = [i for i in compiles if ".program_" not in i]
    assert len(whole) == 1, compiles
    parts = sorted(i for i in compiles if i.startswith(whole[0] + ".program_"))
    assert parts == [whole[0] + ".program_%d" % k for k in (1, 2, 3)], compiles
    forwards = set()
    for part in parts:
        c = compiles[part]
        assert c["complete"] and c["frame"] == compiles[whole[0]]["frame"], c
        for stage in ("captured", "joint", "forward", "backward", "loops", "kernels"):
            assert stage in c["stages"], (part, c["stages"])
        folder = index.parent / part
        forwards.add((folder / "forward.ptir").read_text())
        assert "times_ms" in json.loads((folder / "metrics.json").read_text())
    assert len(forwards) == 3  # each piece's own forward
    view = os.path.join(os.environ.get("PTC_BUILD_DIR", "build"), "tools", "viewer", "ptview")
    check = sp.run([view, "--check", str(index.parent)], capture_output=True, text=True,
                   timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    for part in parts:
        out = tmp_path / (part + ".dot")
        drawn = sp.run([view, "--render", str(out), "--compile", part, "--stage", "backward",
                        str(index.parent)], capture_output=True, text=True, timeout=120)
        assert drawn.returncode == 0 and "digraph" in out.read_text(), drawn.stderr
