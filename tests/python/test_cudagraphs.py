"""reduce-overhead's CUDA graph bookkeeping (python/ptc/_cudagraphs.py), on the CPU:
warm-up, record, replay, which inputs are copied, the limit on size sets, and
outputs overwritten by a later replay. A stand-in engine "records" a run by
keeping it and "replays" it by running it again into the recorded outputs, so
these tests pin what the recorder decides; test_gpu_cudagraphs.py runs the
same paths with torch.cuda.CUDAGraph on a GPU (issue 19 item 1)."""
import warnings

import pytest
import torch

import ptc
from ptc import _C, _cudagraphs, _notices

DOUBLE = "# ptc ir v1\ngraph g(%x: f32[s0] cpu) {\n  %0 = mul(%x, 2.0) : f32[s0]\n  return (%0)\n}\n"
ADD = ("# ptc ir v1\ngraph g(%x: f32[4] cpu, %w: f32[4] cpu) {\n"
       "  %0 = add(%x, %w) : f32[4]\n  return (%0)\n}\n")


class ReplayByRerunning:
    """Records a run by keeping it; a replay reruns it into the recorded outputs."""

    def __init__(self, fail=None):
        self.fail = fail
        self.records = 0

    def record(self, run):
        if self.fail:
            raise RuntimeError(self.fail)
        self.records += 1
        outputs = run()
        return (run, outputs), outputs

    def replay(self, graph):
        run, outputs = graph
        with torch.inference_mode():  # a graph writes its outputs whatever the mode they came in
            for static, fresh in zip(outputs, run()):
                static.copy_(fresh)


def no_marked_steps():
    """torch's step count back to "never marked" (torch._dynamo.reset does the same)."""
    trees = __import__("sys").modules.get("torch._inductor.cudagraph_trees")
    if trees is not None:
        trees.MarkStepBox.mark_step_counter = 0


@pytest.fixture(autouse=True)
def fresh():
    _notices._recorded.clear()
    _cudagraphs.stats(reset=True)
    no_marked_steps()
    yield
    _notices._recorded.clear()
    no_marked_steps()


def recorder(text=DOUBLE, **kw):
    return _cudagraphs.Recorder(_C._compile_ptir(text), "reduce-overhead",
                                engine=ReplayByRerunning(**kw))


def test_warm_up_then_record_then_replay_with_eagers_results():
    r = recorder()
    for k in range(5):
        x = torch.randn(6)
        (y,) = r((x,))
        assert torch.equal(y, x * 2)
    s = _cudagraphs.stats()
    assert (s["warmups"], s["recorded"], s["replayed"]) == (1, 1, 3), s
    assert s["inputs_copied"] == 3 and s["copies_skipped"] == 0, s


def test_one_graph_per_size_set_up_to_the_limit(monkeypatch):
    monkeypatch.setattr(_cudagraphs, "SIZE_SETS_LIMIT", 2)
    r = recorder()
    for n in (3, 3, 3, 5, 5, 5):
        x = torch.randn(n)
        assert torch.equal(r((x,))[0], x * 2)
    assert _cudagraphs.stats()["recorded"] == 2
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(7)
            assert torch.equal(r((x,))[0], x * 2)
    s = _cudagraphs.stats()
    assert s["recorded"] == 2 and s["plain_runs"] == 3, s
    texts = [str(w.message) for w in seen]
    assert len(texts) == 1 and "more than 2 sets of input sizes" in texts[0], texts
    x = torch.randn(3)  # a recorded size still replays
    assert torch.equal(r((x,))[0], x * 2) and _cudagraphs.stats()["replayed"] == 3


def test_an_output_of_an_earlier_replay_raises_torchs_error_when_read():
    r = recorder()
    x = torch.ones(4)
    r((x,))
    (kept,) = r((x,))  # recorded: a static output's alias
    kept_clone = kept.clone()
    (newer,) = r((x + 1,))
    with pytest.raises(RuntimeError, match="accessing tensor output of CUDAGraphs that has been "
                                           "overwritten by a subsequent run"):
        kept.sum()
    assert torch.equal(kept_clone, x * 2) and torch.equal(newer, (x + 1) * 2)
    assert _cudagraphs.stats()["outputs_invalidated"] == 1


def test_outputs_dropped_before_the_next_call_are_not_counted():
    r = recorder()
    for _ in range(4):
        r((torch.ones(4),))  # each result is dropped at once
    assert _cudagraphs.stats()["outputs_invalidated"] == 0


def test_a_recorded_graphs_output_is_read_in_place_by_the_next_graph():
    first, second = recorder(), recorder()
    for k in range(4):
        x = torch.full((4,), float(k))
        (y,) = first((x,))
        (z,) = second((y,))
        assert torch.equal(z, x * 4)
    s = _cudagraphs.stats()
    # replays (calls 3 and 4): first copies x in; second reads first's output where it lies
    assert s["inputs_copied"] == 2 and s["copies_skipped"] == 2, s


def test_parameters_are_read_in_place_and_a_moved_one_is_recorded_again():
    r = recorder(ADD)
    w = torch.nn.Parameter(torch.ones(4), requires_grad=False)
    x = torch.arange(4.0)
    for _ in range(3):
        assert torch.equal(r((x, w))[0], x + 1)
    with torch.no_grad():
        w.add_(1)  # in place: the graph sees the new values
    assert torch.equal(r((x, w))[0], x + 2)
    s = _cudagraphs.stats()
    assert s["copies_skipped"] == 2 and s["inputs_copied"] == 2, s
    moved = torch.nn.Parameter(torch.full((4,), 5.0), requires_grad=False)
    assert torch.equal(r((x, moved))[0], x + 5)
    assert _cudagraphs.stats()["rerecorded"] == 1


def test_inputs_the_entry_holds_are_read_in_place_and_a_moved_one_is_recorded_again():
    """held: what ptc._C says a module or the entry holds (buffers such as
    BatchNorm's running statistics, constants) is read in place like a
    parameter; fixed_signature: recordings are keyed by nothing."""
    r = _cudagraphs.Recorder(_C._compile_ptir(ADD), "reduce-overhead",
                             engine=ReplayByRerunning(), held=(1,), fixed_signature=True)
    buf = torch.ones(4)  # a plain tensor, as a module's buffer is
    x = torch.arange(4.0)
    for _ in range(3):
        assert torch.equal(r((x, buf))[0], x + 1)
    buf.add_(1)
    assert torch.equal(r((x, buf))[0], x + 2)
    s = _cudagraphs.stats()
    assert s["copies_skipped"] == 2 and s["inputs_copied"] == 2, s
    assert list(r.graphs) == [()]
    assert torch.equal(r((x, torch.full((4,), 5.0)))[0], x + 5)
    assert _cudagraphs.stats()["rerecorded"] == 1


def test_an_input_read_in_place_that_moves_is_copied_after_one_re_recording():
    """A buffer the program replaces at every call (a cache, say) is
    recorded again once, then copied in, not recorded again at every call."""
    r = _cudagraphs.Recorder(_C._compile_ptir(ADD), "reduce-overhead",
                             engine=ReplayByRerunning(), held=(1,), fixed_signature=True)
    x = torch.arange(4.0)
    for k in range(6):
        buf = torch.full((4,), float(k))
        assert torch.equal(r((x, buf))[0], x + k)
    s = _cudagraphs.stats()
    assert (s["recorded"], s["rerecorded"], s["replayed"]) == (2, 1, 3), s


def test_a_failed_recording_runs_without_graphs_with_one_warning():
    r = recorder(fail="operation not permitted when stream is capturing")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(4):
            x = torch.randn(4)
            assert torch.equal(r((x,))[0], x * 2)
    texts = [str(w.message) for w in seen]
    assert len(texts) == 1 and "runs without CUDA graphs" in texts[0], texts
    assert "not permitted when stream is capturing" in texts[0]
    assert _cudagraphs.stats()["plain_runs"] == 3  # the failed recording's call and two more



OVERWRITTEN_ERROR = "accessing tensor output of CUDAGraphs that has been overwritten"


def test_outputs_of_one_step_live_until_the_next_step():
    """torch.compiler.cudagraph_mark_step_begin(): within a step, a second call
    whose first outputs are held gets its own recording; the next step's
    replays reuse the recordings and overwrite the previous step's outputs."""
    mark_step = pytest.importorskip("torch.compiler").cudagraph_mark_step_begin
    r = recorder()
    r((torch.ones(4),))  # warm-up
    for step in range(3):
        mark_step()
        a, b = torch.full((4,), 1.0 + step), torch.full((4,), 10.0 + step)
        (ya,) = r((a,))
        (yb,) = r((b,))  # ya is still held: not overwritten
        assert torch.equal(ya + yb, (a + b) * 2)
        if step:
            with pytest.raises(RuntimeError, match=OVERWRITTEN_ERROR):
                kept[0].sum()  # noqa: F821 -- the previous step's outputs
        kept = (ya, yb)
    s = _cudagraphs.stats()
    assert s["recorded"] == 2 and s["replayed"] == 4, s  # two recordings, replayed in steps 2 and 3
    assert s["outputs_invalidated"] == 4, s


def test_within_a_step_dropped_outputs_free_the_recording():
    mark_step = pytest.importorskip("torch.compiler").cudagraph_mark_step_begin
    r = recorder()
    mark_step()
    for k in range(4):
        x = torch.full((4,), float(k))
        assert torch.equal(r((x,))[0], x * 2)  # each result dropped at once
    s = _cudagraphs.stats()
    assert (s["warmups"], s["recorded"], s["replayed"]) == (1, 1, 2), s


def test_without_marked_steps_a_replay_overwrites_the_last_outputs():
    r = recorder()
    r((torch.ones(4),))
    (first,) = r((torch.ones(4),))
    (second,) = r((torch.ones(4) * 3,))
    with pytest.raises(RuntimeError, match=OVERWRITTEN_ERROR):
        first.sum()
    assert torch.equal(second, torch.full((4,), 6.0)) and _cudagraphs.stats()["recorded"] == 1


def test_more_held_calls_in_a_step_than_the_limit_run_plainly_with_one_warning(monkeypatch):
    mark_step = pytest.importorskip("torch.compiler").cudagraph_mark_step_begin
    monkeypatch.setattr(_cudagraphs, "STEP_SLOTS_LIMIT", 2)
    r = recorder()
    r((torch.ones(4),))
    mark_step()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        held = [r((torch.full((4,), float(k)),))[0] for k in range(4)]
    assert [h.tolist() for h in held] == [[2.0 * k] * 4 for k in range(4)]
    texts = [str(w.message) for w in seen]
    assert len(texts) == 1 and "more than 2 times in one step" in texts[0], texts
    s = _cudagraphs.stats()
    assert s["recorded"] == 2 and s["plain_runs"] == 2, s


# ---- training: a compiled forward and backward (TrainGraphs) -------------------------

class ScaleProgram:
    """Stands in for ptc._C.TrainProgram of y = x * w: the forward returns y
    and the tensors its backward reads; the backward, the two gradients."""
    ninputs, noutputs, nsaved = 2, 1, 2
    tangent_of, grad_of = (0,), (0, 1)
    draws = False

    def forward(self, x, w):
        return (x * w, x + 0, w + 0)

    def backward(self, saved_x, saved_w, g):
        return (g * saved_w, g * saved_x)


def train_graphs():
    from ptc import _autograd
    graphs = _cudagraphs.TrainGraphs(ScaleProgram(), "reduce-overhead",
                                     engine=ReplayByRerunning())
    return graphs, lambda x, w: _autograd.apply(graphs, x, w)[0]


def test_training_steps_replay_the_forward_and_backward_with_eagers_gradients():
    graphs, f = train_graphs()
    w = torch.nn.Parameter(torch.ones(4))
    w_eager = torch.nn.Parameter(torch.ones(4))
    for step in range(5):
        x = torch.arange(4.0) + step
        for fn, p in ((f, w), (lambda a, b: a * b, w_eager)):
            p.grad = None
            (fn(x, p) * torch.arange(1.0, 5.0)).sum().backward()
            with torch.no_grad():
                p.sub_(0.1 * p.grad)
        assert torch.allclose(w, w_eager) and torch.allclose(w.grad, w_eager.grad), step
    s = _cudagraphs.stats()
    # forward: warm-up, record, 3 replays; backward: warm-up (plain forward's saved
    # tensors), warm-up (the recorded forward's), record, 2 replays
    assert (s["recorded"], s["replayed"]) == (2, 5), s
    # replays copy in x (forward) and the tangent (backward); the parameter and the
    # saved tensors (where the forward's replay left them) are read in place
    assert s["inputs_copied"] == 3 + 2 and s["copies_skipped"] == 3 + 2 * 2, s


def test_a_leafs_new_gradient_is_a_copy_so_the_next_replay_leaves_it_alone():
    graphs, f = train_graphs()
    w = torch.nn.Parameter(torch.ones(4))
    x = torch.arange(4.0)
    grads = []
    for _ in range(4):
        w.grad = None
        f(x, w).sum().backward()
        grads.append(w.grad)
    assert graphs.backwards.last is not None  # the last backward was a replay
    assert all(torch.equal(g, x) for g in grads)  # none was overwritten or invalidated
    assert len({g.data_ptr() for g in grads}) == 4


def test_gradients_accumulate_across_replays_as_in_eager():
    graphs, f = train_graphs()
    w = torch.nn.Parameter(torch.ones(4))
    x = torch.arange(4.0)
    for _ in range(5):  # no zeroing: .grad sums five steps
        f(x, w).sum().backward()
    assert torch.equal(w.grad, 5 * x)


def test_a_forward_is_not_replayed_while_its_backward_is_pending():
    """Two micro-batches: the second forward runs before the first's
    backward, so it must not overwrite the tensors the first saved."""
    graphs, f = train_graphs()
    w = torch.nn.Parameter(torch.ones(4))
    w_eager = torch.nn.Parameter(torch.ones(4))
    for step in range(4):
        xs = [torch.randn(4), torch.randn(4)]
        losses = [f(x, w).pow(2).sum() for x in xs]
        for loss in losses:
            loss.backward()
        for x in xs:
            (x * w_eager).pow(2).sum().backward()
        assert torch.allclose(w.grad, w_eager.grad), step
    # two forward recordings (the second while the first's backward was pending),
    # each with its own backward recording
    assert len(next(iter(graphs.forwards.graphs.values()))) == 2
    assert sum(len(v) for v in graphs.backwards.graphs.values()) == 2


def test_a_dropped_autograd_graph_frees_its_forward_recording():
    graphs, f = train_graphs()
    w = torch.nn.Parameter(torch.ones(4))
    for _ in range(5):
        f(torch.randn(4), w)  # the result and its graph dropped, no backward
    assert len(next(iter(graphs.forwards.graphs.values()))) == 1
    assert _cudagraphs.stats()["replayed"] == 3


# ---- random ops: each recording reads its RNG offset from its own cell ----------------

DROP = ("# ptc ir v1\ngraph g(%x: f32[256] cpu) {\n"
        "  %0 = dropout(%x, 0.5, true, seed=9) : f32[256]\n  return (%0)\n}\n")


def test_a_recording_that_draws_draws_anew_at_each_replay_as_plain_runs_do():
    """The stand-in engine reruns a recording at replay, and the CPU program
    reads its cell's value when it runs, as the recorded CUDA kernels do:
    each replay's mask is new, torch.manual_seed repeats the sequence, and
    the calls draw what plain runs after the same seed draw. Before, a
    recording would have repeated one draw (so the mode refused to record)."""
    program = _C._compile_ptir(DROP)
    assert _C._compiled_draws(program) and not _C._compiled_draws(_C._compile_ptir(DOUBLE))
    x = torch.ones(256)

    def calls(run, n=6):
        torch.manual_seed(3)
        return [run((x,))[0].clone() for _ in range(n)]

    recorded = calls(_cudagraphs.Recorder(program, "reduce-overhead", engine=ReplayByRerunning(),
                                          draws=True))
    s = _cudagraphs.stats()
    assert (s["warmups"], s["recorded"], s["replayed"]) == (1, 1, 4), s
    assert all(((m == 0) | (m == 2)).all() for m in recorded)
    assert len({tuple(m.tolist()) for m in recorded}) == 6  # every call a new mask
    again = calls(_cudagraphs.Recorder(program, "reduce-overhead", engine=ReplayByRerunning(),
                                       draws=True))
    plain = calls(lambda inputs: _C._run_compiled(program, inputs))
    for a, b, c in zip(recorded, again, plain):
        assert torch.equal(a, b) and torch.equal(a, c)


class DropProgram:
    """Stands in for the TrainProgram of y = x * mask(offset): the forward
    draws its offset (or takes rng=, a recording's cell) and saves it last;
    the backward recomputes the mask from the saved offset."""
    ninputs, noutputs, nsaved = 1, 1, 1
    tangent_of, grad_of = (0,), (0,)
    draws = True

    @staticmethod
    def mask(offset):
        gen = torch.Generator().manual_seed(int(offset))
        return (torch.rand(8, generator=gen) < 0.5).float()

    def forward(self, x, rng=None):
        rng = _C._rng_draw() if rng is None else rng
        return (x * self.mask(rng), rng)

    def backward(self, offset, g):
        return (g * self.mask(offset),)


def two_micro_batches(graphs, steps):
    """Steps of two forwards, then their backwards, through graphs over
    DropProgram on ones: each gradient must be its own forward's mask times
    the upstream gradient (3). Returns the masks seen."""
    from ptc import _autograd
    masks = set()
    for step in range(steps):
        xs = [torch.ones(8, requires_grad=True) for _ in range(2)]
        ys = [_autograd.apply(graphs, x)[0] for x in xs]
        for y in ys:
            (y * 3).sum().backward()
        for x, y in zip(xs, ys):
            assert torch.equal(x.grad, 3 * y.detach()), step  # y = mask * 1
            masks.add(tuple(y.tolist()))
    return masks


def test_two_forwards_before_their_backwards_keep_their_own_offsets():
    """Each forward recording has its own cell, and the backward's recording
    of it reads that cell: a gradient is its forward's mask times the
    upstream gradient even when the second forward (another recording,
    another draw) runs before the first's backward."""
    graphs = _cudagraphs.TrainGraphs(DropProgram(), "reduce-overhead", engine=ReplayByRerunning())
    torch.manual_seed(1)
    assert len(two_micro_batches(graphs, 4)) == 8
    assert len(next(iter(graphs.forwards.graphs.values()))) == 2
    assert sum(len(v) for v in graphs.backwards.graphs.values()) == 2


def test_the_backward_of_a_forward_run_without_a_graph_is_not_recorded(monkeypatch):
    """Past the limit of recordings a step holds, a forward runs plainly
    with a host offset; its backward must run plainly too: a recording
    would keep that offset's value for every later replay (the stand-in
    engine, which reruns, could not show the stale masks; the recordings
    made show the decision)."""
    monkeypatch.setattr(_cudagraphs, "STEP_SLOTS_LIMIT", 1)
    graphs = _cudagraphs.TrainGraphs(DropProgram(), "reduce-overhead", engine=ReplayByRerunning())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the limit's notice
        two_micro_batches(graphs, 4)
    assert sum(len(v) for v in graphs.forwards.graphs.values()) == 1
    assert sum(len(v) for v in graphs.backwards.graphs.values()) == 1


def test_a_recording_made_under_inference_mode_replays_outside_it():
    """A recording's static input buffers and its offset cell are normal
    tensors even when it is made under torch.inference_mode: inference
    tensors could not be copied into or filled in place by the replays that
    follow outside the mode (torch raised "Inplace update to inference
    tensor outside InferenceMode")."""
    r = _cudagraphs.Recorder(_C._compile_ptir(DROP), "reduce-overhead",
                             engine=ReplayByRerunning(), draws=True)
    x = torch.ones(256)
    with torch.inference_mode():
        r((x,))
        r((x,))  # recorded here
    masks = {tuple(r((x,))[0].tolist()) for _ in range(3)}
    assert len(masks) == 3 and _cudagraphs.stats()["replayed"] == 3
