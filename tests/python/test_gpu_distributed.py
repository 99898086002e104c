"""ptc under torch.distributed on GPUs: the CPU tests' scenarios
(distributed_scenarios.py) on 2 ranks over NCCL, a GPU each. Skipped
unless torch sees 2 CUDA devices and NCCL."""
import pytest

torch = pytest.importorskip("torch")
ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
if torch.cuda.device_count() < 2 or not torch.distributed.is_available() or \
        not torch.distributed.is_nccl_available():
    pytest.skip("needs 2 CUDA devices and NCCL", allow_module_level=True)

from distributed_common import spawn  # noqa: E402

NCCL = {"PTC_TEST_BACKEND": "nccl"}
TOL = 1e-4  # cuBLAS may sum in another order than the eager run's


def test_ddp_both_forms_match_eager_ddp_nccl(tmp_path):
    for rank, result in enumerate(spawn("ddp_matches_eager", tmp_path, env=NCCL)):
        for case, worst in result.items():
            assert max(worst.values()) < TOL, (rank, case, worst)


def test_ddp_graphs_split_at_buckets_nccl(tmp_path):
    for rank, result in enumerate(spawn("ddp_buckets", tmp_path, env=NCCL)):
        for form, r in result.items():
            assert r["plan_bytes"] == r["eager_bytes"] == [1360, 576], (rank, form, r)
            assert [code for _, code in r["graphs"]] == ["PTC-B027", None], (rank, form, r)
            for order in r["orders"][1:]:
                assert order.index("allreduce") < order.index("input grad"), (rank, form, r)


def test_ddp_modes_nccl(tmp_path):
    for rank, result in enumerate(spawn("ddp_modes", tmp_path, env=NCCL)):
        for case, worst in result.items():
            unsynced = worst.pop("unsynced", None)
            assert max(worst.values()) < TOL, (rank, case, worst)
            assert unsynced is None or unsynced > 1e-3, (rank, case, unsynced)


@pytest.mark.parametrize("scenario", ["fsdp2", "fsdp1"])
def test_fsdp_matches_eager_nccl(tmp_path, scenario):
    for rank, result in enumerate(spawn(scenario, tmp_path, env=NCCL)):
        for case, worst in result.items():
            graphs, breaks = worst.pop("graphs"), worst.pop("breaks")
            assert max(worst.values()) < TOL, (rank, case, worst)
            assert graphs == 5 and "PTC-B014" in breaks, (rank, case, graphs, breaks)
