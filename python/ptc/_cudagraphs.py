"""mode="reduce-overhead": each compiled CUDA graph of ptc recorded once into a
CUDA graph and replayed, as torch's CUDA-graph trees do.

A ``Recorder`` stands in front of one compiled program (one guard entry's
graph). For each set of input sizes and strides (one for a static entry, one
per concrete size set of a dynamic one, up to ``SIZE_SETS_LIMIT``) the first
call runs the program plainly -- the warm-up that loads its kernels and lets
torch's lazy state settle -- and the second records it: the inputs are copied
into static buffers and the run is captured on torch's capture stream, its
temporaries and outputs allocated from the graph's private memory pool. Later
calls copy in each input that is not already its static buffer and replay.

Inputs whose address is stable are not copied: the graph reads them where
they were recorded. These are the inputs the compiled entry says a module or
the entry holds (its parameters, buffers such as BatchNorm's running
statistics, and constant tensors: ``held``), any other nn.Parameter, and
outputs of another recorded graph (across a graph break the next graph reads
the previous one's output buffer, as in torch's trees); one that moves is
recorded again, and copied in from then on (a buffer the program replaces at
each call costs one re-recording, not one per call). Where the guards fix
every input's dtype, device and sizes (``fixed_signature``), a replay looks
up no input's metadata: its host cost is one address check of the inputs
read in place (in torch's C++) and a copy per other input.
The outputs a replay returns share memory with the graph's static outputs, so
the next replay overwrites them: outputs of an earlier replay the user still
holds lose their storage at the next replay and raise torch's own error when
read ("accessing tensor output of CUDAGraphs that has been overwritten by a
subsequent run"), never silently showing newer values. ``.clone()`` keeps a
result.

Steps (``torch.compiler.cudagraph_mark_step_begin()``, torch's own call, read
here): until the user first marks a step, each replay overwrites the previous
one's outputs, as above. Once steps are marked, outputs live until the next
step, as in torch's trees: a call whose graph still has outputs of the current
step the user holds runs another recording of it (its own static buffers and
pool, up to ``STEP_SLOTS_LIMIT`` per size set), so ``f(a) + f(b)`` within one
step reads two sets of outputs; the next step's replay reuses the first
recording and overwrites the previous step's outputs (reading one raises
torch's error).

Random ops (dropout, rand): ptc's kernels draw with the run's RNG offset
(ptc._C), which a plain run takes from torch's default generator. A
recording of a program that draws has its own offset cell, a 0-dim int64
tensor on the device, which its kernels read when they run: before each
replay (and before the recording's own first run) the recorder fills it with
a fresh offset from torch's generator, as torch's CUDAGraph.replay fills its
philox offset tensor, so each replay draws new numbers and a call draws from
torch's generator as a plain run would (torch.manual_seed reproduces the
sequence, and replays match plain runs after the same seed).

A program whose capture fails (an extern that synchronises, say) runs without
CUDA graphs from then on, with one warning; torch's random number generator
and current stream are left as they were before the capture.

Training (``TrainGraphs``, with ptc's compiled autograd): the compiled forward
and the compiled backward are each recorded as above, as torch's trees do for
AOT autograd's pair. The forward's static outputs include the tensors saved
for the backward, so the backward reads them where the forward's replay left
them (no copy; parameters are read in place too) and only its tangents are
copied in. A forward recording whose backward has not run yet is not
replayed -- that would overwrite the saved tensors -- so a second forward
before the first's backward (two micro-batches) records another copy (up to
``STEP_SLOTS_LIMIT``); a backward that has run, or whose autograd graph was
dropped, frees it, and the next forward's replay overwrites the last step's
outputs (reading one kept raises torch's error). Each forward recording has
its own backward recording (keyed by the saved tensors' addresses). A
forward that draws saves its recording's offset cell as the RNG offset, so
the backward's recording of it reads the cell that forward's replay filled
and recomputes the forward's masks; the backward of a forward that ran
without a graph (its warm-up, or past a limit) has a host offset, which a
recording would keep for every replay, so it runs plainly. A
gradient for a leaf whose ``.grad`` is None is handed over as a copy:
AccumulateGrad would keep the tensor itself as ``.grad``, which the next
backward replay overwrites.
"""
import sys
import weakref

from . import _C, _notices

SIZE_SETS_LIMIT = 8  # recorded graphs per program (dynamic sizes) before plain runs
STEP_SLOTS_LIMIT = 4  # recordings of one size set whose outputs live in the same step

OVERWRITTEN = (
    "Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent "
    "run. To prevent overwriting, clone the tensor outside of ptc.compile() before you run the "
    "compiled function again, or call torch.compiler.cudagraph_mark_step_begin() before each "
    "model invocation (outputs then live until the next step).")

# data_ptr of every live graph's static outputs -> that graph (weakly)
_static_outputs = weakref.WeakValueDictionary()

_stats = {"recorded": 0, "replayed": 0, "warmups": 0, "inputs_copied": 0, "copies_skipped": 0,
          "rerecorded": 0, "plain_runs": 0, "outputs_invalidated": 0}


def stats(reset=False):
    """Counts since the last reset: graphs recorded, replays, warm-up runs,
    inputs copied into static buffers and copies skipped (the input was the
    static buffer), re-records (a parameter moved), plain runs (no graph) and
    earlier outputs invalidated by a replay."""
    out = dict(_stats)
    if reset:
        for k in _stats:
            _stats[k] = 0
    return out


class TorchGraphs:
    """Records and replays with torch.cuda.CUDAGraph, each graph in its own
    private pool (torch.cuda.graph_pool_handle()): graphs of one program never
    share memory, so no replay can write into another graph's outputs."""

    def record(self, run):
        import torch
        graph = torch.cuda.CUDAGraph()
        undo = _capture_undo()
        try:
            with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle()):
                outputs = run()
        except BaseException:
            undo()
            raise
        graph.replay()  # the capture computed nothing: this call's results
        return graph, outputs

    def replay(self, graph):
        graph.replay()


def _capture_undo():
    """What puts torch's CUDA state back after a capture that fails.

    When the captured work raises (an extern that synchronises, say), torch's
    CUDAGraph.capture_end raises in turn at cudaStreamEndCapture, before it
    ends the capture of the device's default generator and before
    torch.cuda.graph restores the current stream. The generator would stay
    marked as capturing for the rest of the process -- every later random op
    on the device raising "Offset increment outside graph capture encountered
    unexpectedly" -- and later work would run on the capture stream. The
    returned function restores the generator's state (as it was before the
    capture, not capturing) and the stream."""
    import torch
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    saved = gen.clone_state()
    stream = torch.cuda.current_stream()

    def undo():
        gen.graphsafe_set_state(saved)
        torch.cuda.set_stream(stream)
    return undo


def _step():
    """The step torch.compiler.cudagraph_mark_step_begin() last began: 0
    until it is first called (it imports torch's cudagraph_trees, which
    keeps the count; a module not imported means no step was marked)."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    return trees.MarkStepBox.mark_step_counter if trees is not None else 0


def _all_tensors(inputs):
    """Are all inputs tensors? (Under fixed_signature, once a recording is
    made, the guards keep them what they were then.)"""
    import torch
    return all(isinstance(t, torch.Tensor) for t in inputs)


def _signature(inputs):
    return tuple((t.dtype, t.device, tuple(t.shape), tuple(t.stride())) for t in inputs)


def _stable_address(t):
    """Parameters and outputs of a live recorded graph keep their address."""
    import torch
    if isinstance(t, torch.nn.Parameter):
        return True
    return t.data_ptr() != 0 and t.data_ptr() in _static_outputs


class _Graph:
    """One recorded graph: static inputs, static outputs, the handed-out aliases."""

    def __init__(self, recorder, inputs):
        import torch
        self.rng = _offset_cell(inputs) if recorder.draws else None
        self.fixed = []       # indices of the inputs read in place (not copied)
        self.fixed_ptrs = [None] * len(inputs)  # by input index: the address recorded
        self.copied = []      # (index, static buffer) of the inputs copied in
        static_inputs = []
        # normal tensors even under torch.inference_mode: replays outside it copy into them
        with torch.no_grad(), torch.inference_mode(False):
            for i, t in enumerate(inputs):
                if i not in recorder.moved and (i in recorder.held or _stable_address(t)):
                    self.fixed.append(i)
                    self.fixed_ptrs[i] = t.data_ptr()
                    static_inputs.append(t.detach())  # its own hold on the storage
                else:
                    buf = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                    buf.copy_(t)
                    self.copied.append((i, buf))
                    static_inputs.append(buf)
        self.static_inputs = static_inputs  # held for the graph's life: it reads them
        args = tuple(static_inputs)
        self.redraw()  # the recording's own run (TorchGraphs: its first replay) reads it
        self.graph, outputs = recorder.engine.record(lambda: recorder.run_plain(args, self.rng))
        self.static_outputs = tuple(outputs)
        for t in self.static_outputs:
            if t.data_ptr():
                _static_outputs[t.data_ptr()] = self
        self.handed = []  # weak references to the aliases the last replay returned
        self.step = 0     # the step (_step()) of the last hand_out
        self.pending = 0  # backwards still to read this (forward) graph's saved tensors

    def redraw(self):
        """A fresh RNG offset from torch's generator for the next replay (a
        plain run would draw one too), written into the offset cell on the
        current stream, before the replay that reads it."""
        if self.rng is not None:
            self.rng.fill_(int(_C._rng_draw()))

    def free_in(self, step):
        """May a replay in `step` overwrite this graph's outputs? Not while a
        backward still needs them; else without marked steps always, and
        with them unless the user still holds outputs this graph handed out
        in the same step."""
        if self.pending:
            return False
        return step == 0 or self.step != step or all(ref() is None for ref in self.handed)

    def backward_pending(self):
        """A token whose life is one pending backward of this graph's
        outputs: dropped (the backward ran, or its autograd graph is gone),
        the graph may be replayed again."""
        token = _Pending()
        self.pending += 1
        weakref.finalize(token, self._backward_done)
        return token

    def _backward_done(self):
        self.pending -= 1

    def moved(self, inputs):
        """Indices of the inputs read in place that are elsewhere now."""
        return {i for i in self.fixed if inputs[i].data_ptr() != self.fixed_ptrs[i]}

    def fixed_moved(self, inputs):
        import torch
        return bool(self.fixed) and not torch._C._tensors_data_ptrs_at_indices_equal(
            list(inputs), self.fixed_ptrs, self.fixed)

    def copy_in(self, inputs):
        import torch
        _stats["copies_skipped"] += len(self.fixed)
        with torch.no_grad():
            for i, buf in self.copied:
                t = inputs[i]
                if t.data_ptr() == buf.data_ptr() and t.stride() == buf.stride():
                    _stats["copies_skipped"] += 1
                else:
                    buf.copy_(t)
                    _stats["inputs_copied"] += 1

    def invalidate_handed(self):
        """Outputs of the previous replay still held lose their storage: reading
        them raises OVERWRITTEN instead of showing this replay's values."""
        import torch
        for ref in self.handed:
            t = ref()
            if t is not None:
                torch._C._set_storage_access_error_msg(t, OVERWRITTEN)
                _stats["outputs_invalidated"] += 1
        self.handed = []

    def hand_out(self):
        """Aliases of the static outputs (an output listed twice is one tensor)."""
        self.step = _step()
        made = {}
        out = []
        for s in self.static_outputs:
            if id(s) not in made:
                made[id(s)] = s.detach()
                self.handed.append(weakref.ref(made[id(s)]))
            out.append(made[id(s)])
        return tuple(out)


class _Pending:
    """See _Graph.backward_pending."""


def _offset_cell(inputs):
    """A recording's RNG offset cell on the inputs' device (its first CUDA
    input's): see the module's notes on random ops."""
    import torch
    device = next((t.device for t in inputs if t.is_cuda), inputs[0].device if inputs else "cuda")
    with torch.inference_mode(False):  # as _Graph's static inputs
        return torch.zeros((), dtype=torch.int64, device=device)


class Recorder:
    """Runs one compiled program, recording and replaying its CUDA graphs.

    program: a capsule for ptc._C._run_compiled, or a callable of the input
    tuple (a training program's forward or backward); engine: what records
    and replays (TorchGraphs; tests of the bookkeeping give another);
    by_address: recordings are kept per address of the inputs read in place
    (a backward: one per forward recording whose saved tensors it reads);
    held: indices of the inputs a module or the compiled entry holds (read in
    place); fixed_signature: the guards fix every input's dtype, device and
    sizes, so recordings need no key of them (the ptc._C entry says both);
    draws: the program has random ops, so each recording reads its offset
    from its own cell, filled before each replay (a callable program then
    takes rng=, the cell)."""

    def __init__(self, program, mode, engine=None, by_address=False, held=(),
                 fixed_signature=False, draws=False):
        self.program = program
        self.mode = mode
        self.engine = engine or TorchGraphs()
        self.by_address = by_address
        self.held = frozenset(held)
        self.moved = set()    # inputs read in place that moved once: copied in from then on
        self.fixed_signature = fixed_signature
        self.draws = draws
        self.graphs = {}      # input signature -> its recordings (_Graph), see _step()
        self.warmed = set()   # signatures run once (the warm-up)
        self.disabled = None  # why this program runs without graphs
        self.last = None      # the recording the last call replayed or made, if any

    def run_plain(self, inputs, rng=None):
        """One run without a graph; rng: the offset cell of a recording,
        else random ops draw a fresh offset."""
        if callable(self.program):
            return tuple(self.program(tuple(inputs)) if rng is None
                         else self.program(tuple(inputs), rng=rng))
        return _C._run_compiled(self.program, tuple(inputs), rng)

    def _key(self, inputs):
        key = () if self.fixed_signature else _signature(inputs)
        if self.by_address:
            key += tuple(t.data_ptr() if _stable_address(t) else 0 for t in inputs)
        return key

    def __call__(self, inputs):
        self.last = None
        if self.disabled:
            _stats["plain_runs"] += 1
            return self.run_plain(inputs)
        if not (self.fixed_signature and self.graphs) and not _all_tensors(inputs):
            return self._without("a graph input is not a tensor", inputs)
        key = self._key(inputs)
        slots = self.graphs.get(key)
        if not slots:
            return self._first_calls(key, inputs)
        step = _step()
        g = next((g for g in slots if g.free_in(step)), None)
        if g is None:  # each recording holds outputs of this step: one more
            return self._record(key, inputs)
        if g.fixed_moved(inputs):
            _stats["rerecorded"] += 1
            self.moved.update(g.moved(inputs))
            g.invalidate_handed()
            slots.remove(g)
            return self._record(key, inputs)
        g.copy_in(inputs)
        g.invalidate_handed()
        g.redraw()
        self.engine.replay(g.graph)
        _stats["replayed"] += 1
        self.last = g
        return g.hand_out()

    def _first_calls(self, key, inputs):
        if key not in self.warmed:
            if len(self.warmed) >= SIZE_SETS_LIMIT:
                _notices.not_acted_on(
                    "mode=%r: a compiled graph met more than %d sets of input sizes; new sizes run "
                    "without CUDA graphs." % (self.mode, SIZE_SETS_LIMIT))
                _stats["plain_runs"] += 1
                return self.run_plain(inputs)
            self.warmed.add(key)
            _stats["warmups"] += 1
            return self.run_plain(inputs)
        return self._record(key, inputs)

    def _record(self, key, inputs):
        slots = self.graphs.setdefault(key, [])
        if len(slots) >= STEP_SLOTS_LIMIT:
            _notices.not_acted_on(
                "mode=%r: a compiled graph was called more than %d times in one step "
                "(torch.compiler.cudagraph_mark_step_begin) with its earlier outputs still held; "
                "further calls in a step run without CUDA graphs." % (self.mode, STEP_SLOTS_LIMIT))
            _stats["plain_runs"] += 1
            return self.run_plain(inputs)
        try:
            g = _Graph(self, inputs)
        except _C.InternalError:
            raise  # ptc's own failure: the caller falls back to eager
        except RuntimeError as e:
            return self._without("recording it failed (%s)" % str(e).splitlines()[0], inputs)
        slots.append(g)
        _stats["recorded"] += 1
        self.last = g
        return g.hand_out()

    def _without(self, why, inputs):
        self.disabled = why
        _notices.not_acted_on("mode=%r: a compiled graph runs without CUDA graphs: %s."
                              % (self.mode, why))
        _stats["plain_runs"] += 1
        return self.run_plain(inputs)


class TrainGraphs:
    """A training program (ptc._C.TrainProgram: compiled forward and
    backward) whose forward and backward are recorded into CUDA graphs;
    ptc._autograd's CompiledFunction runs it as it runs the program itself
    (see the module's notes on training)."""

    plan = None  # ptc._autograd's, set on the first call

    def __init__(self, program, mode, engine=None, held=(), fixed_signature=False):
        self.program = program
        self.ninputs, self.noutputs = program.ninputs, program.noutputs
        self.nsaved = program.nsaved
        self.tangent_of, self.grad_of = program.tangent_of, program.grad_of
        self.draws = program.draws
        self.forwards = Recorder(lambda inputs, **rng: program.forward(*inputs, **rng),
                                 mode, engine, held=held, fixed_signature=fixed_signature,
                                 draws=self.draws)
        self.backwards = Recorder(lambda args: program.backward(*args), mode, engine,
                                  by_address=True)

    def forward(self, *inputs):
        return self.forwards(inputs)

    def backward_pending(self):
        """What the autograd node holds until its backward has run: the
        forward recording it read is not replayed before (None: the forward
        ran plainly)."""
        g = self.forwards.last
        return g.backward_pending() if g is not None else None

    def backward(self, *args):
        offset = args[self.nsaved - 1] if self.draws else None  # saved last
        if offset is not None and not _stable_address(offset):
            # a forward run without a graph drew it on the host: see the notes on training
            self.backwards.last = None
            _stats["plain_runs"] += 1
            return self.backwards.run_plain(args)
        return self.backwards(args)

    def grads_for(self, grads, inputs):
        """The gradients as autograd may keep them: a copy for a leaf without
        a .grad, which AccumulateGrad would make the static output itself."""
        if self.backwards.last is None:
            return grads
        out = []
        for g, i in zip(grads, self.grad_of):
            leaf = inputs[i]() if inputs[i] is not None else None
            keeps = leaf is not None and leaf.grad is None and g is not None
            out.append(g.clone() if keeps else g)
        return tuple(out)
