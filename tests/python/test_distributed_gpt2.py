"""A 2-layer GPT-2 (transformers, small config) trained under DDP and under
FSDP2 on 2 gloo ranks: ptc's losses, gradients and parameters equal eager
DDP's / FSDP2's over 10 SGD steps, with torch's autograd and with compiled
autograd (under DDP in both wrap orders, its forward split at DDP's
gradient buckets). The scenarios are distributed_scenarios.gpt2_ddp and
gpt2_fsdp2."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from distributed_common import spawn  # noqa: E402

TOL = 1e-5  # relative to the loss and to the largest gradient


def test_gpt2_ddp_matches_eager_ddp(tmp_path):
    """Both wrap orders, both autograd paths: 10 SGD steps equal eager DDP's.
    With torch's autograd the graph needs gradients and runs through torch
    ops (ptc's documented default), so it equals eager exactly.

    With compiled autograd the forward runs as ptc's kernels, one graph cut
    into 4 pieces where each of eager DDP's 4 rebuilt gradient buckets
    begins, each piece its own autograd node: ptc's bucket plan holds the
    bytes of eager's buckets, the tied embedding / output weight counted
    once (it was counted twice, making 5 buckets). From the second step (DDP
    rebuilt its buckets) 3 of the 4 buckets' all-reduces are issued before
    the backward of the first piece begins (with one piece, none would
    be)."""
    for rank, result in enumerate(spawn("gpt2_ddp", tmp_path)):
        assert set(result) == {"outer/torch", "inner/torch", "outer/compiled", "inner/compiled"}
        for case, r in result.items():
            assert max(r["loss"], r["grad"], r["param"]) < TOL, (rank, case, r)
            if case.endswith("/torch"):
                assert r["fallbacks"] == ["autograd_fallback"] and r["plan_bytes"] == [], (rank, case, r)
                continue
            assert r["fallbacks"] == [], (rank, case, r)
            assert r["plan_bytes"] == r["eager_bytes"] == [33664, 33920, 21376, 23168], (rank, case, r)
            assert r["graphs"] == [None] and r["recompiles"] == [], (rank, case, r)
            assert [pieces for pieces, _ in r["pieces"]] == [4], (rank, case, r)
            assert r["early_allreduces"][1:] == [3] * 9, (rank, case, r)


def test_gpt2_of_12_blocks_under_ddp_compiles_once(tmp_path):
    """A 12-layer GPT-2 under DDP with compiled autograd and a gradient bucket
    per block: the forward is one graph (no recompile, no fallback, no
    warning) cut into 13 pieces (the embeddings, a piece per block starting
    at its first module, the last block with the head), and the 11 alike
    block pieces share one program: 3 distinct programs. 10 SGD steps equal
    eager DDP's, and 12 buckets' all-reduces start before the first piece's
    backward. A cut was a graph break that resumed in the middle of `for
    block in self.h`, a new entry per block: past 8 recompiles the rest of
    the blocks ran eagerly, with a recompile-limit warning."""
    for rank, result in enumerate(spawn("gpt2_deep_ddp", tmp_path)):
        assert [w for w in result.pop("warnings") if "ptc" in w] == [], (rank, result)
        assert set(result) == {"outer", "inner"}
        for form, r in result.items():
            assert max(r["loss"], r["grad"], r["param"]) < TOL, (rank, form, r)
            assert r["buckets"] == 13, (rank, form, r)
            assert r["graphs"] == [None] and r["recompiles"] == [], (rank, form, r)
            assert r["fallbacks"] == [] and r["pieces"] == [[13, 3]], (rank, form, r)
            assert r["early_allreduces"][1:] == [12] * 9, (rank, form, r)


def test_gpt2_fsdp2_matches_eager_fsdp2(tmp_path):
    """FSDP2 with a unit per block and one at the root: 10 SGD steps equal
    eager FSDP2's with both autograd paths (with compiled autograd, as ptc's
    kernels: no fallback), and the graphs follow the units: the embeddings,
    each block and the head are 4 graphs, each ending at a unit's hooks
    (PTC-B014), where the all-gathers and reduce-scatters run."""
    for rank, result in enumerate(spawn("gpt2_fsdp2", tmp_path)):
        # FSDP2's state is keyed by id(): a guard on dict[<id>] differs per
        # process, which is not a different graph (it warned on every run)
        assert result.pop("rank_warnings") == [], (rank, result)
        assert set(result) == {"torch", "compiled"}
        for case, r in result.items():
            assert max(r["loss"], r["grad"], r["param"]) < TOL, (rank, case, r)
            assert r["graphs"] == ["PTC-B014"] * 4, (rank, case, r)
        assert result["compiled"]["fallbacks"] == [], (rank, result)
