"""ptc under torch.distributed on this CPU: 2 ranks on gloo, spawned per test
(distributed_common.spawn); each rank's scenario is in
distributed_scenarios.py. Compiled results must equal eager DDP/FSDP's."""
import contextlib
import copy

import pytest

torch = pytest.importorskip("torch")
ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from distributed_common import spawn  # noqa: E402

TOL = 1e-5


def test_ddp_both_forms_match_eager_ddp(tmp_path):
    """ptc.compile(DDP(m)) and DDP(ptc.compile(m)), with torch's autograd and
    with compiled autograd: losses, gradients and parameters of 10 SGD steps
    equal eager DDP's on every rank."""
    for rank, result in enumerate(spawn("ddp_matches_eager", tmp_path)):
        assert set(result) == {"outer/torch", "inner/torch", "outer/compiled", "inner/compiled"}
        for case, worst in result.items():
            assert max(worst.values()) < TOL, (rank, case, worst)


def test_ddp_graphs_split_at_buckets(tmp_path):
    """With compiled autograd the forward is one graph cut into a piece per
    gradient bucket of eager DDP (no graph break), each piece its own
    autograd node, and from the second step (DDP has rebuilt its buckets) an
    all-reduce starts before the backward has reached the input."""
    for rank, result in enumerate(spawn("ddp_buckets", tmp_path)):
        for form, r in result.items():
            assert r["plan"] == [["fc3", "fc2"], ["fc1"]], (rank, form, r)
            assert r["plan_bytes"] == r["eager_bytes"] == [1360, 576], (rank, form, r)
            assert [code for _, code in r["graphs"]] == [None], (rank, form, r)
            assert r["pieces"] == [[2, 2]], (rank, form, r)
            for order in r["orders"][1:]:
                assert order.index("allreduce") < order.index("input grad"), (rank, form, r)


def test_ddp_unused_parameters_static_graph_and_no_sync(tmp_path):
    """find_unused_parameters=True with a layer the forward skips (its
    gradients stay None, as eager's), static_graph=True, and gradients
    accumulated under no_sync() then synchronised: as eager DDP, with both
    autograd paths. Under no_sync the gradients really are rank-local."""
    for rank, result in enumerate(spawn("ddp_modes", tmp_path)):
        assert len(result) == 6, result
        for case, worst in result.items():
            unsynced = worst.pop("unsynced", None)
            assert max(worst.values()) < TOL, (rank, case, worst)
            if unsynced is not None:
                assert unsynced > 1e-3, (rank, case, unsynced)


@pytest.mark.parametrize("scenario", ["fsdp2", "fsdp1"])
def test_fsdp_matches_eager_with_graphs_per_unit(tmp_path, scenario):
    """FSDP2 (fully_shard) and FSDP1 (use_orig_params=True), a unit per
    linear and one at the root: 10 SGD steps equal eager FSDP's with both
    autograd paths; the graphs end at each unit's hooks (PTC-B014), so the
    all-gathers and reduce-scatters run between them: the linears, the relu
    and the tanh between the units' hooks are 5 graphs, compiled once for all
    10 steps (parameters are inputs read per call, not constants)."""
    for rank, result in enumerate(spawn(scenario, tmp_path)):
        assert set(result) == {"torch", "compiled"}
        for case, worst in result.items():
            graphs, breaks = worst.pop("graphs"), worst.pop("breaks")
            assert max(worst.values()) < TOL, (rank, case, worst)
            assert graphs == 5 and "PTC-B014" in breaks, (rank, case, graphs, breaks)


def test_ranks_share_a_cache_and_trace_per_rank(tmp_path):
    """Two ranks compiling the same model into one PTC_CACHE_DIR at once: the
    results are right, the cache holds whole kernel files only (written under
    a temporary name and renamed), and PTC_TRACE_DIR gets a rank_N folder per
    rank, each a trace ptview opens."""
    import os
    import subprocess

    cache, trace = tmp_path / "cache", tmp_path / "trace"
    results = spawn("shared_cache", tmp_path, env={"PTC_CACHE_DIR": str(cache), "PTC_TRACE_DIR": str(trace)})
    for rank, r in enumerate(results):
        assert r["diff"] < TOL, (rank, r)
        assert r["rank_warnings"] == [], (rank, r["rank_warnings"])
        assert r["cache"] and all(name.endswith(".o") for name in r["cache"]), (rank, r["cache"])
    assert results[0]["cache"] == results[1]["cache"]
    assert sorted(os.listdir(trace)) == ["rank_0", "rank_1"]
    ptview = os.path.join(os.environ["PTC_BUILD_DIR"], "tools", "viewer", "ptview")
    for rank in (0, 1):
        folder = trace / ("rank_%d" % rank)
        assert (folder / "index.json").exists()
        out = tmp_path / ("rank_%d.html" % rank)
        r = subprocess.run([ptview, "--html", str(out), str(folder)], capture_output=True, text=True)
        assert r.returncode == 0 and out.exists(), r.stderr
    r = subprocess.run([ptview, "--html", str(tmp_path / "all.html"), str(trace)], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "one trace per rank (rank_0, rank_1): open one" in r.stderr, r.stderr


def test_ranks_compiling_different_graphs_are_reported(tmp_path):
    """Rank 1's batch has another size: its graph differs from rank 0's; a
    rank that sees the other's compile warns, naming both ranks' compiles,
    and the job goes on (no hang: ptc adds no collective)."""
    results = spawn("diverging_compiles", tmp_path)
    warned = [w for ws in results for w in ws]
    assert warned, results
    assert all("differs from rank" in w and "MLP.forward" in w for w in warned), warned


class _Store:
    """The key-value store of a process group, in memory."""

    def __init__(self):
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = value.encode()

    def check(self, keys):
        return all(k in self.kv for k in keys)

    def get(self, key):
        return self.kv[key]


class _Graph:
    def __init__(self, text):
        self.text = text

    def ptir(self):
        return self.text


def test_ranks_on_their_own_gpus_compile_the_same_graph(monkeypatch):
    """NCCL ranks run on a GPU each: rank 0's graph on cuda:0 and rank 1's
    on cuda:1 are the same graph (the ranks' comparison warned on every
    2-GPU DDP run of GPT-2), while another size still differs."""
    import warnings

    from ptc import _distributed

    monkeypatch.setattr(_distributed, "_is_current", lambda group: True)

    def compile_on(store, rank, size):
        text = "graph forward(%%x: f32[%d] cuda:%d) {...}" % (size, rank)
        check = _distributed.RankCheck(store, rank, 2, group=None)
        check({"kind": "compile", "frame": "f", "graph": _Graph(text),
               "guards": ["L['x']: tensor f32[%d]{1} cuda:%d" % (size, rank)]})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = _Store()
        compile_on(store, 0, 8)
        compile_on(store, 1, 8)
        assert [str(w.message) for w in caught] == []
        store = _Store()
        compile_on(store, 0, 8)
        compile_on(store, 1, 9)
    assert len(caught) == 1 and "rank 1's compile 0 differs from rank 0's" in str(caught[0].message)


def test_ddp_gradients_keep_the_layout_contract(tmp_path):
    """DDP of a compiled conv net under compiled autograd, channels-last and
    contiguous: DDP never warns that a gradient's strides differ from its
    bucket view's (a channels-last 1x1 convolution's weight gradient came
    back contiguous: the same memory order, other strides in its size-1
    dims), every .grad is strided as eager's, and gradients and parameters
    equal eager DDP's."""
    for rank, result in enumerate(spawn("ddp_grad_layout", tmp_path)):
        assert result["warnings"] == [], (rank, result["warnings"])
        assert result["strides_differ"] == [], (rank, result["strides_differ"])
        for fmt, worst in result["worst"].items():
            assert max(worst.values()) < 1e-4, (rank, fmt, worst)


def test_ranks_compare_compiles_through_the_current_group(tmp_path):
    """After destroy_process_group and a new init_process_group (another
    FileStore), ptc publishes the ranks' compiles to the new group's store
    and keeps no reference to the destroyed group's (it published to the
    first group's store for the rest of the process)."""
    for rank, r in enumerate(spawn("regroup", tmp_path)):
        assert "MLP.forward" in r["published"], (rank, r)
        assert r["warnings"] == [], (rank, r)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        return torch.tanh(self.bn(self.fc(x))) + x


class _Blocks(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(n))
        self.head = torch.nn.Linear(6, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _cut_before_each_block(model):
    from ptc._split import graph_cut

    for k, block in enumerate(model.blocks):
        block.register_forward_pre_hook(lambda mod, args, k=k: graph_cut("block %d" % k))


def test_graph_cut_compiles_alike_pieces_once():
    """ptc's DDP bucket boundaries, in one process: a graph_cut before each of
    10 blocks of a loop (Linear, BatchNorm in training, tanh) with compiled
    autograd is one compile without a break or recompile, cut into 10
    pieces (nothing comes before the first cut; the last block is with the
    head) made of 3 programs: blocks 1-8 share one, block 0 (its input wants
    no gradient) and the last piece have theirs; outputs, every gradient and
    BatchNorm's running statistics (inputs written in place, through the
    pieces) equal eager's over 3 steps. A cut was a graph break before: each
    block resumed the loop at another item, a recompile per block, and past
    8 the blocks ran eagerly."""
    ptc.config.compiled_autograd = True
    try:
        events = _train_cut_blocks()
    finally:
        ptc.config.compiled_autograd = False
    assert [e["kind"] for e in events] == ["compile", "graph_pieces"], events
    assert events[0]["break"] is None and len(events[0]["cuts"]) == 10, events[0]
    assert (events[1]["pieces"], events[1]["programs"]) == (10, 3), events[1]
    # what the report shows of each piece: its program, the modules it
    # holds and the cut that ends it (the first cut, before block 0, begins
    # the first piece)
    pieces = events[1]["piece_list"]
    assert [p["program"] for p in pieces] == [1] + [2] * 8 + [3], pieces
    assert [p["modules"] for p in pieces] == ["blocks.%d" % k for k in range(9)] + \
        ["blocks.9.fc .. head"], pieces
    assert [p["cut"] for p in pieces] == list(range(1, 10)) + [None], pieces
    assert [events[0]["cuts"][p["cut"]][1] for p in pieces[:-1]] == \
        ["block %d" % k for k in range(1, 10)], events[0]["cuts"]
    assert all(p["ops"] > 0 and p["kernels"][1] > 0 for p in pieces), pieces
    assert [p["compile_ms"] > 0 for p in pieces] == [True, True] + [False] * 7 + [True], pieces


def test_pieces_write_the_running_statistics_themselves():
    """A graph cut into pieces (DDP's buckets) writes BatchNorm's running
    statistics in the piece's own kernels, as a whole graph does, instead of
    returning their new values for a copy_ into the buffers after the call:
    a step of 10 cut blocks makes no copy_ outside the programs (30 before:
    running_mean, running_var and num_batches_tracked of each block), and
    the statistics still equal eager's."""
    from torch.profiler import ProfilerActivity, profile
    profiles = []

    def profiled():
        profiles.append(profile(activities=[ProfilerActivity.CPU]))
        return profiles[-1]

    ptc.config.compiled_autograd = True
    try:
        _train_cut_blocks(around_call=profiled)
    finally:
        ptc.config.compiled_autograd = False
    copies = [e for e in profiles[-1].events() if e.name == "aten::copy_" and e.cpu_parent is None]
    assert copies == []


def _train_cut_blocks(around_call=contextlib.nullcontext):
    """test_graph_cut_compiles_alike_pieces_once's 3 steps, each compiled
    call inside around_call(); ptc's events."""
    torch.manual_seed(0)
    ref = _Blocks(10)
    model = copy.deepcopy(ref)
    _cut_before_each_block(model)
    compiled = ptc.compile(model)
    for step in range(3):
        x = torch.randn(5, 6, generator=torch.Generator().manual_seed(step))
        out_r = ref(x)
        with around_call():
            out_c = compiled(x)
        out_r.square().sum().backward()
        out_c.square().sum().backward()
        assert torch.allclose(out_r, out_c, atol=TOL), step
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-4), name
    for (name, a), b in zip(ref.named_buffers(), model.buffers()):
        assert torch.allclose(a.float(), b.float(), atol=TOL), name
    return compiled._ptc_compiled._events()


# One rank on gloo in a fresh process (the pytest process may have loaded
# torch._dynamo already): what ptc keeps of a process group after
# destroy_process_group. Once torch._dynamo is imported while a group is up
# (an optimizer's step does it too), torch keeps that group alive to the
# end of the process, its gloo threads unjoined (distributed_common.py: the
# SIGABRT at exit that ranks avoid with os._exit).
_ONE_RANK = """
import gc, json, sys, weakref
import torch, torch.distributed as dist
import ptc
dist.init_process_group("gloo", rank=0, world_size=1, init_method="file://" + sys.argv[1])
group = weakref.ref(dist.group.WORLD)
%s
dist.destroy_process_group()
gc.collect()
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules, "group_alive": group() is not None,
                  "result": result}))
"""


def _one_rank(tmp_path, body):
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _ONE_RANK % body, str(tmp_path / "store")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_compiling_imports_no_dynamo_and_keeps_no_group(tmp_path):
    """ptc.compile and a compiled call import no torch._dynamo (ptc read
    nothing of it: it imported it only to note that it could), so the group
    is freed by destroy_process_group (main: imported, and the group alive)."""
    r = _one_rank(tmp_path, "f = ptc.compile(lambda x: torch.relu(x) * 2)\n"
                            "x = torch.randn(5)\n"
                            "result = bool(torch.equal(f(x), torch.relu(x) * 2))\n"
                            "dist.all_reduce(torch.ones(2))\n")
    assert r == {"dynamo": False, "group_alive": False, "result": True}


def test_rank_check_keeps_no_group(tmp_path):
    """The ranks' compile comparison (RankCheck) refers to its group weakly:
    destroy_process_group frees the group, and the check lets go of the
    store at its next event (main held the group for the process's life)."""
    r = _one_rank(tmp_path, "from ptc import _distributed\n"
                            "store = dist.distributed_c10d._get_default_store()\n"
                            "check = _distributed.RankCheck(store, 0, 1, dist.group.WORLD)\n"
                            "del store\n"
                            "check({'kind': 'compile', 'frame': 'f', 'guards': []})\n"
                            "published = len(check.mine)\n"
                            "dist.destroy_process_group()\n"
                            "gc.collect()\n"
                            "check({'kind': 'compile', 'frame': 'g', 'guards': []})\n"
                            "result = [published, len(check.mine), check.store is None]\n"
                            "dist.init_process_group('gloo', rank=0, world_size=1, "
                            "init_method='file://' + sys.argv[1] + '2')\n")
    assert r == {"dynamo": False, "group_alive": False, "result": [1, 1, True]}
