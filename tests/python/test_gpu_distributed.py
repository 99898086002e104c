"""ptc under torch.distributed on GPUs: the CPU tests' scenarios
(distributed_scenarios.py) on 2 ranks over NCCL, a GPU each (cuda:<rank>,
bound to the process group). Skipped unless torch sees 2 CUDA devices and
NCCL. All scenarios run in one start of the 2 ranks (module fixture), so
the file takes about as long as its compiles; each test judges one
scenario's results. A hang fails: a collective times out after 120 s in the
rank, and the ranks are killed after 300 s."""
import pytest

torch = pytest.importorskip("torch")
ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
if torch.cuda.device_count() < 2 or not torch.distributed.is_available() or \
        not torch.distributed.is_nccl_available():
    pytest.skip("needs 2 CUDA devices and NCCL", allow_module_level=True)

from distributed_common import spawn  # noqa: E402

SCENARIOS = ("ddp_matches_eager", "ddp_buckets", "ddp_modes", "fsdp2", "fsdp1", "gpt2_ddp", "gpt2_fsdp2",
             "gpt2_deep_ddp")
TOL = 1e-4  # ptc's kernels and cuBLAS may sum in another order than the eager run's


@pytest.fixture(scope="module")
def nccl(tmp_path_factory):
    env = {"PTC_TEST_BACKEND": "nccl", "PTC_TEST_SCENARIOS": ",".join(SCENARIOS)}
    return spawn("several", tmp_path_factory.mktemp("nccl"), env=env, timeout=300, collective_timeout=120)


def results(nccl, scenario):
    """The scenario's result per rank; fails with a rank's traceback."""
    out = []
    for rank, r in enumerate(nccl):
        result = r[scenario]
        if isinstance(result, dict) and "error" in result:
            pytest.fail("rank %d: %s raised:\n%s" % (rank, scenario, result["error"]))
        out.append(result)
    return out


def test_ddp_both_forms_match_eager_ddp_nccl(nccl):
    for rank, result in enumerate(results(nccl, "ddp_matches_eager")):
        assert set(result) == {"outer/torch", "inner/torch", "outer/compiled", "inner/compiled"}
        for case, worst in result.items():
            assert max(worst.values()) < TOL, (rank, case, worst)


def test_ddp_graphs_split_at_buckets_nccl(nccl):
    for rank, result in enumerate(results(nccl, "ddp_buckets")):
        for form, r in result.items():
            assert r["plan_bytes"] == r["eager_bytes"] == [1360, 576], (rank, form, r)
            assert [code for _, code in r["graphs"]] == [None], (rank, form, r)
            assert r["pieces"] == [[2, 2]], (rank, form, r)
            for order in r["orders"][1:]:
                assert order.index("allreduce") < order.index("input grad"), (rank, form, r)


def test_ddp_modes_nccl(nccl):
    for rank, result in enumerate(results(nccl, "ddp_modes")):
        assert len(result) == 6, result
        for case, worst in result.items():
            unsynced = worst.pop("unsynced", None)
            assert max(worst.values()) < TOL, (rank, case, worst)
            assert unsynced is None or unsynced > 1e-3, (rank, case, unsynced)


@pytest.mark.parametrize("scenario", ["fsdp2", "fsdp1"])
def test_fsdp_matches_eager_nccl(nccl, scenario):
    for rank, result in enumerate(results(nccl, scenario)):
        assert set(result) == {"torch", "compiled"}
        for case, worst in result.items():
            graphs, breaks = worst.pop("graphs"), worst.pop("breaks")
            assert max(worst.values()) < TOL, (rank, case, worst)
            assert graphs == 5 and "PTC-B014" in breaks, (rank, case, graphs, breaks)


def test_gpt2_ddp_nccl(nccl):
    """As test_distributed_gpt2 on the CPU: both wrap orders and autograd
    paths equal eager DDP; with compiled autograd the forward splits at
    eager DDP's 4 buckets (one graph cut into 4 pieces) and 3 all-reduces
    start before the first piece's backward."""
    for rank, result in enumerate(results(nccl, "gpt2_ddp")):
        for case, r in result.items():
            assert max(r["loss"], r["grad"], r["param"]) < TOL, (rank, case, r)
            if case.endswith("/compiled"):
                assert r["fallbacks"] == [], (rank, case, r)
                assert r["plan_bytes"] == r["eager_bytes"] == [33664, 33920, 21376, 23168], (rank, case, r)
                assert r["graphs"] == [None] and r["recompiles"] == [], (rank, case, r)
                assert [pieces for pieces, _ in r["pieces"]] == [4], (rank, case, r)
                assert r["early_allreduces"][1:] == [3] * 9, (rank, case, r)


def test_gpt2_of_12_blocks_under_ddp_nccl(nccl):
    """As test_distributed_gpt2's 12-block case: one graph, 13 pieces, 3
    distinct programs, no recompile or fallback, equal to eager DDP."""
    for rank, result in enumerate(results(nccl, "gpt2_deep_ddp")):
        assert [w for w in result.pop("warnings") if "ptc" in w] == [], (rank, result)
        for form, r in result.items():
            assert max(r["loss"], r["grad"], r["param"]) < TOL, (rank, form, r)
            assert r["graphs"] == [None] and r["recompiles"] == [], (rank, form, r)
            assert r["fallbacks"] == [] and r["pieces"] == [[13, 3]], (rank, form, r)
            assert r["early_allreduces"][1:] == [12] * 9, (rank, form, r)


def test_gpt2_fsdp2_nccl(nccl):
    for rank, result in enumerate(results(nccl, "gpt2_fsdp2")):
        assert result.pop("rank_warnings") == [], (rank, result)  # see test_distributed_gpt2
        for case, r in result.items():
            assert max(r["loss"], r["grad"], r["param"]) < TOL, (rank, case, r)
            assert r["graphs"] == ["PTC-B014"] * 4, (rank, case, r)
        assert result["compiled"]["fallbacks"] == [], (rank, result)
