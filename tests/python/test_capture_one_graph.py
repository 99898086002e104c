"""Constructs torch.compile traces as one graph, against eager.

Each program here is one graph with no break under torch.compile (checked
with a counting backend, torch 2.11); ptc must return eager's results, leave
eager's side effects (mutations the caller sees, identity of returned
views) and make one graph too. Programs where torch.compile itself breaks
are pinned as breaks with their code.
"""
import contextlib

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from test_capture_inplace_inputs import counts  # noqa: E402  (graphs, breaks, details)


def compiles(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return len([e for e in handle._events() if e["kind"] == "compile"])


def as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def run_both(fn, make_args, calls=2, backend="eager"):
    """fn eagerly and compiled on fresh copies of the same arguments: the
    results (values and strides) and the arguments after each call must be
    equal."""
    compiled = ptc.compile(fn, backend=backend)
    for _ in range(calls):
        want_args, got_args = make_args(), make_args()
        want, got = as_tuple(fn(*want_args)), as_tuple(compiled(*got_args))
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert torch.equal(w, g) and w.stride() == g.stride(), (w, g)
        for w, g in zip(want_args, got_args):
            assert torch.equal(w, g), (w, g)
    return compiled


# ---- in-place writes through permuted views ---------------------------------------------


def writes_through_transpose(x):
    x.t().add_(1)
    return x.sum()


def writes_through_permute(x):
    x.permute(2, 0, 1)[1].sub_(1)
    return x.transpose(-1, 0).sum(0)


def writes_through_a_row_of_a_transpose(x):
    x.t()[0].add_(1)
    return x + 0


def writes_base_with_a_live_transpose(x):
    y = x.transpose(0, 1)
    x.mul_(3)  # y sees it
    y[1].add_(1)  # and x sees this
    return y + 0, x * 1


def writes_through_transpose_of_an_intermediate(x):
    y = x * 2
    z = y.permute(1, 0)
    z[0] = 5
    return y, z


def x23():
    return (torch.arange(6.0).reshape(2, 3),)


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn, make", [
    (writes_through_transpose, lambda: (torch.arange(9.0).reshape(3, 3),)),
    (writes_through_permute, lambda: (torch.arange(24.0).reshape(2, 3, 4),)),
    (writes_through_a_row_of_a_transpose, x23),
    (writes_base_with_a_live_transpose, x23),
    (writes_through_transpose_of_an_intermediate, x23),
])
def test_writes_through_permuted_views_are_one_graph(fn, make, backend):
    # main: 2 graphs, 1 break (PTC-B012, 'other than basic indexing') for each
    compiled = run_both(fn, make, backend=backend)
    assert counts(compiled) == (1, 0, []) and compiles(compiled) == 1


def returns_written_transpose(x):
    y = x.t()
    y.add_(1)
    return y


def returns_view_of_written_row(x):
    y = x[0]
    y.add_(1)
    return y


def returns_transpose_after_write(x):
    x.add_(1)
    return x.t()


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn", [returns_written_transpose, returns_view_of_written_row,
                                returns_transpose_after_write])
def test_a_returned_view_of_a_written_argument_is_a_view_of_it(fn, backend):
    # main: a copy (y._base is None), so writes through it missed x
    compiled = run_both(fn, x23, backend=backend)
    assert counts(compiled) == (1, 0, [])
    x = torch.zeros(2, 3)
    y = compiled(x)
    assert y._base is x
    y.fill_(7)
    assert bool((x == 7).any())


# ---- writes through detach(), which shares its argument's storage ------------------------


def writes_through_detach(x):
    y = x.detach()
    y.add_(1)
    x.detach()[0].fill_(9)
    return y * 2, x.sum()


def reads_a_detach_after_its_base_is_written(x):
    y = x.detach()
    x.mul_(2)
    return y + 0


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn", [writes_through_detach, reads_a_detach_after_its_base_is_written])
def test_writes_through_detach_reach_the_argument(fn, backend):
    # main: writes_through_detach left x unchanged and returned 2 * (x + 1)
    compiled = run_both(fn, x23, backend=backend)
    assert counts(compiled) == (1, 0, [])


def writes_through_detach_of_a_grad_argument(w):
    w.detach().mul_(2)  # an EMA-style update of a parameter's data
    return w * 3


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_a_write_through_detach_of_a_grad_argument_breaks_and_reaches_it(backend):
    # main: w unchanged, and w * 3 of the old value
    compiled = ptc.compile(writes_through_detach_of_a_grad_argument, backend=backend)
    for _ in range(2):
        want_w, got_w = [torch.arange(6.0).requires_grad_() for _ in range(2)]
        want, got = writes_through_detach_of_a_grad_argument(want_w), compiled(got_w)
        assert torch.equal(want, got) and torch.equal(want_w, got_w)
        want.sum().backward()
        got.sum().backward()
        assert torch.equal(want_w.grad, got_w.grad)
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "other than basic indexing" in details[0]


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_a_returned_detach_of_a_grad_argument_shares_its_storage(backend):
    # main: a copy, so a write through it missed w
    compiled = ptc.compile(lambda w: w.detach(), backend=backend)
    w = torch.zeros(2, 3, requires_grad=True)
    y = compiled(w)
    assert not y.requires_grad
    y.fill_(7)
    assert bool((w == 7).all())


# ---- a write ptc cannot trace breaks with the tensors as they were ----------------------


def writes_a_strided_slice_of_a_reshape(x):
    return x.reshape(-1)[::2].mul_(3), x


def writes_a_strided_slice_of_a_slice(x):
    y = x[1:]
    y[::2].zero_()
    return x + 0, y


def writes_a_strided_slice_of_an_intermediate(x):
    t = x * 1
    t[::2].mul_(5)
    return t


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn", [writes_a_strided_slice_of_a_reshape, writes_a_strided_slice_of_a_slice,
                                writes_a_strided_slice_of_an_intermediate])
def test_an_untraceable_write_through_a_view_runs_once_for_real(fn, backend):
    # main: the view kept the written value when the write-back broke, so
    # the op ran twice on a copy (x.reshape(-1)[::2].mul_(3) gave 9x, x unchanged)
    compiled = run_both(fn, lambda: (torch.arange(5.0),), backend=backend)
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and details == ["strided slice assignment"]


# ---- in-place writes through view, reshape, flatten, squeeze and unsqueeze ---------------


def writes_an_item_of_a_flat_view(x):
    x.view(-1)[0] = 1
    return x.sum()


def adds_through_a_view(x):
    y = x.view(2, -1)
    y.add_(1)
    return x * 1


def writes_through_reshape_flatten_unsqueeze(x):
    x.reshape(-1).mul_(2)
    x.flatten()[1:3].fill_(7)
    x.unsqueeze(0).squeeze(0).sub_(1)
    x.unsqueeze(-1)[1].add_(5)
    return x + 0


def writes_a_view_with_live_aliases(x):
    flat, row, t = x.view(-1), x[0], x.view(3, 2).t()
    flat.mul_(2)
    t[1].add_(1)  # a reshape, then a permute, then a row
    x.add_(1)
    return flat + 0, row + 0, t + 0


def writes_a_view_of_an_intermediate(x):
    y = x * 2
    y.view(-1)[0] = 100
    return y


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn", [writes_an_item_of_a_flat_view, adds_through_a_view,
                                writes_through_reshape_flatten_unsqueeze,
                                writes_a_view_with_live_aliases, writes_a_view_of_an_intermediate])
def test_writes_through_reshaped_views_are_one_graph(fn, backend):
    # main: PTC-B012 ('in-place op on a view of a tensor from outside other
    # than basic indexing or permute/transpose') for each; torch.compile: 1 graph
    compiled = run_both(fn, x23, backend=backend)
    assert counts(compiled) == (1, 0, []) and compiles(compiled) == 1


def returns_a_written_view(x):
    y = x.view(3, 2)
    y[0, 0] = -1
    return y, x.unsqueeze(0)


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_a_returned_reshaped_view_of_a_written_argument_is_a_view_of_it(backend):
    compiled = run_both(returns_a_written_view, x23, backend=backend)
    assert counts(compiled) == (1, 0, [])
    x = torch.zeros(2, 3)
    y, z = compiled(x)
    assert y._base is x and z._base is x and x[0, 0] == -1
    y.fill_(7)
    assert bool((x == 7).all()) and bool((z == 7).all())


def writes_a_reshape_of_a_transposed_argument(x):
    x.reshape(-1).add_(1)  # eager: reshape copies a transposed tensor, x is unchanged
    return x + 0


def test_a_reshape_that_may_copy_stays_a_break():
    # only a row-major argument's reshape is surely a view: of another it
    # runs for real, which leaves x unchanged as eager does
    compiled = run_both(writes_a_reshape_of_a_transposed_argument,
                        lambda: (torch.arange(6.0).reshape(3, 2).t(),))
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "other than basic indexing, permute/transpose, view/reshape" in details[0]


# ---- functools.lru_cache / functools.cache ----------------------------------------------

import functools  # noqa: E402


@functools.lru_cache
def _doubled(n):
    return n * 2


@functools.cache
def _pair(n, m=2):
    return (n, m)


@functools.lru_cache(maxsize=4)
def _scale_table(n):
    return torch.arange(float(n)) + 1


@functools.cache
def _shifted(t):
    return t.relu() + 1


def lru_of_constants(x, n):
    a, b = _pair(n, m=2)
    return x * _doubled(3) + a + b, _pair(n, m=2)


def lru_returning_a_tensor(x):
    return x * _scale_table(x.shape[0]), _scale_table(x.shape[0])


def lru_of_a_tensor_made_here(x):
    return _shifted(x * 2)


def lru_of_an_argument(x):
    return _shifted(x) * 3


def test_lru_cache_of_constants_is_one_graph_and_recompiles_per_argument():
    # main: (1, 1, ['call to a _lru_cache_wrapper']); torch.compile: 1 graph
    compiled = ptc.compile(lru_of_constants, backend="eager")
    x = torch.arange(3.0)
    for n in (3, 3, 4):
        want, got = lru_of_constants(x, n), compiled(x, n)
        assert torch.equal(want[0], got[0]) and got[1] == (n, 2)
        assert got[1] is want[1]  # the cached tuple itself, as eager returns it
    # one graph per value of n (a guard on it)
    assert counts(compiled) == (2, 0, []) and compiles(compiled) == 2


def test_lru_cache_returning_a_tensor_reads_the_cached_tensor():
    compiled = ptc.compile(lru_returning_a_tensor, backend="eager")
    for n in (3, 3, 5):
        x = torch.ones(n)
        want, got = lru_returning_a_tensor(x), compiled(x)
        assert torch.equal(want[0], got[0])
        assert got[1] is _scale_table(n)  # eager returns the cached object
    assert counts(compiled) == (2, 0, []) and compiles(compiled) == 2  # one per size


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_lru_cache_of_a_tensor_made_in_the_call_is_traced_into(backend):
    # a fresh tensor is a new key on every eager call: the function runs each time
    compiled = run_both(lru_of_a_tensor_made_here, lambda: (torch.linspace(-2, 2, 5),), calls=3,
                        backend=backend)
    assert counts(compiled) == (1, 0, [])


def test_lru_cache_of_an_argument_breaks_and_returns_the_cached_result():
    # eager's cache holds a result for the caller's tensor: after x changes
    # in place eager still returns the old one, and so must ptc
    compiled = ptc.compile(lru_of_an_argument, backend="eager")
    x = torch.tensor([-1.0, 2.0])
    first = compiled(x)
    x.mul_(10)
    assert torch.equal(compiled(x), lru_of_an_argument(x))
    assert torch.equal(compiled(x), first)
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "lru_cache function _shifted with an argument from outside" in details[0]


class _Notes:
    """Hashes and compares by identity, as logging.Logger does."""

    def __init__(self):
        self.lines = []

    def note(self, msg):
        self.lines.append(msg)


@functools.lru_cache(None)
def _note_once(notes, msg):  # transformers' logger.warning_once
    notes.note(msg)


class _EqualNotes(_Notes):
    def __eq__(self, other):
        return isinstance(other, _EqualNotes)

    __hash__ = _Notes.__hash__


_notes, _other_notes, _equal_notes = _Notes(), _Notes(), _EqualNotes()


def note_once_then_add(x, notes):
    _note_once(notes, f"seen {x.shape[0]}")
    return x + 1


def test_lru_cache_of_an_object_keyed_by_identity_is_one_graph():
    # main: a PTC-B006 break ("with an argument from outside the graph"), which
    # split GPT-2's training step (PreTrainedModel.loss_function's warning_once)
    compiled = ptc.compile(note_once_then_add, backend="eager")
    x = torch.ones(3)
    for notes in (_notes, _notes, _other_notes, _notes):
        assert torch.equal(compiled(x, notes), x + 1)
    # eager's cache: one note per (object, message), made on the first call
    assert _notes.lines == ["seen 3"] and _other_notes.lines == ["seen 3"]
    # one graph per object (an identity guard), no break
    assert counts(compiled) == (2, 0, []) and compiles(compiled) == 2


def test_lru_cache_of_an_object_with_its_own_eq_still_breaks():
    compiled = ptc.compile(note_once_then_add, backend="eager")
    compiled(torch.ones(2), _equal_notes)
    compiled(torch.ones(2), _equal_notes)
    assert _equal_notes.lines == ["seen 2"]
    graphs, breaks, details = counts(compiled)
    assert breaks == 1 and "lru_cache function _note_once with an argument from outside" in details[0]


def test_lru_cache_wrapper_replaced_recompiles():
    # the trace called this wrapper: another one bound to the name is another trace
    global _doubled
    saved = _doubled
    compiled = ptc.compile(lru_of_constants, backend="eager")
    x = torch.ones(2)
    try:
        assert torch.equal(compiled(x, 1)[0], x * 9)
        _doubled = functools.lru_cache(lambda n: n * 10)
        assert torch.equal(compiled(x, 1)[0], lru_of_constants(x, 1)[0])  # 33
    finally:
        _doubled = saved
    assert compiles(compiled) == 2


# ---- list and dict subclasses ----------------------------------------------------------


class DoublingList(list):
    def append(self, v):
        super().append(v * 2)


class ShiftingDict(dict):
    def __setitem__(self, k, v):
        super().__setitem__(k, v + 1)


def subclass_instances_made_here(x):
    items = DoublingList([1])
    items.append(x)
    table = ShiftingDict()
    table["k"] = x
    return items, table


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_subclass_instances_made_here_keep_what_their_methods_stored(backend):
    # main: the returned list was rebuilt through its own append (pickle's
    # way), which doubled every item again: [2, x * 4] instead of [1, x * 2]
    compiled = ptc.compile(subclass_instances_made_here, backend=backend)
    x = torch.arange(3.0)
    for _ in range(2):
        (want_l, want_d), (got_l, got_d) = subclass_instances_made_here(x), compiled(x)
        assert type(got_l) is DoublingList and type(got_d) is ShiftingDict
        assert got_l[0] == want_l[0] == 1 and torch.equal(got_l[1], want_l[1])
        assert list(got_d) == ["k"] and torch.equal(got_d["k"], want_d["k"])
    assert counts(compiled) == (1, 0, [])


# Methods of subclasses that call the base's through super(), on instances
# from outside: ptc breaks in the override (a mutation of an outside object),
# and the break's call must be the base's method, not the override again.


class OverridingList(list):
    def append(self, v):
        super().append(v * 2)

    def extend(self, vs):
        super().extend([v * 3 for v in vs])

    def insert(self, i, v):
        super().insert(i, v * 5)

    def pop(self, *i):
        return super().pop(*i) * 10


class OverridingDict(dict):
    def update(self, other):
        super().update({k: v * 2 for k, v in other.items()})

    def setdefault(self, k, v):
        return super().setdefault(k, v * 7)


class OverridingSet(set):
    def add(self, v):
        super().add(v * 2)


def appends_to_outside(items, x):
    items.append(x)
    return x + 1


def extends_inserts_and_reads_outside(items, x):
    items.extend([x, x + 1])
    items.insert(0, x)
    return items[-1] + items.pop()


def updates_outside(table, x):
    table.update({"a": x})
    return table.setdefault("b", x) + 1


def adds_to_outside(s, x):
    s.add(3)
    return x + 1


def same_items(want, got):
    assert type(want) is type(got) and len(want) == len(got), (want, got)
    pairs = zip(want.values(), got.values()) if isinstance(want, dict) else zip(want, got)
    for w, g in pairs:
        # eager's value: a real tensor (not one of the trace's), once transformed
        assert type(w) is type(g), (w, g)
        assert torch.equal(w, g) if type(w) is torch.Tensor else w == g, (w, g)


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize(
    "fn, make",
    [
        (appends_to_outside, OverridingList),
        (extends_inserts_and_reads_outside, lambda: OverridingList([1.0])),
        (updates_outside, OverridingDict),
        (adds_to_outside, OverridingSet),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_a_super_call_in_an_overriding_method_runs_the_base_method_once(fn, make, backend):
    # main: the break's call was rebuilt as getattr(self, name), the override,
    # so it ran twice: [x * 4] for [x * 2], {3 * 4} for {3 * 2}, pop() * 100
    compiled = ptc.compile(fn, backend=backend)
    for _ in range(2):
        want_obj, got_obj = make(), make()
        want, got = fn(want_obj, torch.arange(3.0)), compiled(got_obj, torch.arange(3.0))
        assert torch.equal(want, got), (want, got)
        if isinstance(want_obj, set):
            assert want_obj == got_obj
        else:
            same_items(want_obj, got_obj)


# ---- a constant integer tensor as a list index --------------------------------------------


def list_indexed_by_a_constant_tensor(x):
    items = [x, x * 2, x * 3]
    return items[torch.tensor(1)] + items[torch.tensor(-1)], (x, x + 1)[torch.tensor([1])]


def list_indexed_by_a_tensor_argument(x, i):
    return [x, x * 2, x * 3][i] + 1


def list_indexed_by_a_float_tensor(x):
    return [x, x * 2][torch.tensor(1.0)]


def test_a_constant_integer_tensor_indexes_a_list_in_the_graph():
    # main: (2, 1, ['a tensor used as an index of a list']); torch.compile: 1 graph
    compiled = run_both(list_indexed_by_a_constant_tensor, lambda: (torch.arange(3.0),))
    assert counts(compiled) == (1, 0, [])


def test_a_tensor_argument_as_a_list_index_still_breaks():
    # its value is the caller's: torch.compile breaks here too
    compiled = ptc.compile(list_indexed_by_a_tensor_argument, backend="eager")
    x = torch.arange(3.0)
    for i in (0, 2):
        assert torch.equal(compiled(x, torch.tensor(i)), list_indexed_by_a_tensor_argument(x, torch.tensor(i)))
    assert counts(compiled)[1:] == (1, ["a tensor used as an index of a list"])


def test_a_float_tensor_index_raises_eagers_error():
    compiled = ptc.compile(list_indexed_by_a_float_tensor, backend="eager")
    with pytest.raises(TypeError, match="only integer tensors of a single element"):
        compiled(torch.ones(2))


# ---- a Python number as the first argument of a binary torch function ------------------------

NUMBER_FIRST = [torch.add, torch.sub, torch.subtract, torch.mul, torch.multiply, torch.div,
                torch.divide, torch.true_divide, torch.remainder, torch.floor_divide,
                torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor]


def number_first_operands():
    for number in (3, 2.5, True):
        for x in (torch.arange(1.0, 4.0), torch.arange(1, 4), torch.tensor([True, False, True]),
                  torch.arange(1.0, 4.0).half(), torch.tensor(2)):
            yield number, x


@pytest.mark.parametrize("fn", NUMBER_FIRST, ids=lambda f: f.__name__)
def test_a_number_as_input_of_a_binary_function_is_one_graph(fn):
    # main: PTC-B022 'torch.mul(input): expected a tensor, got int', where
    # torch.compile makes one graph. Eager's dtype (the number wrapped: 3 with
    # an int64 tensor stays int64, 2.5 makes float32, with float16 float16)
    # and eager's errors (sub of a bool, bitwise of a float)
    for number, x in number_first_operands():
        def f(x):
            return fn(number, x)
        try:
            want = f(x)
        except Exception as e:  # noqa: BLE001 (eager's error, whatever its type)
            with pytest.raises(type(e)):
                ptc.compile(f, backend="eager")(x)
            continue
        compiled = ptc.compile(f, backend="eager", fullgraph=True)
        got = compiled(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)  # and dtype
        assert counts(compiled) == (1, 0, [])


def number_first_with_alpha(x):
    return torch.add(2, x, alpha=3) + torch.sub(1.5, x, alpha=2) + torch.mul(2, 3)


def test_a_number_as_input_with_alpha_runs_the_generated_code():
    compiled = run_both(number_first_with_alpha, lambda: (torch.arange(4.0),), backend="ptc")
    assert counts(compiled) == (1, 0, [])


def test_a_number_as_input_where_torch_rejects_it_raises_eagers_error():
    f = lambda x: torch.maximum(2, x)  # noqa: E731
    with pytest.raises(TypeError, match="must be Tensor, not int"):
        ptc.compile(f, backend="eager")(torch.ones(2))


# ---- writes to list and dict subclass instances from outside ---------------------------------

import collections  # noqa: E402


class PlainList(list):
    pass


class PlainDict(dict):
    pass


class DoublingDict(dict):
    def __setitem__(self, k, v):
        super().__setitem__(k, v * 2)


def logs_into_a_list(x, items):
    items.append(x.sum())
    items.extend([x * 2, 3])
    return x + 1


def writes_a_dict(x, table):
    table["k"] = x * 2
    table.update(u=1)
    table.setdefault("s", 5)
    del table["a"]
    return x + 1


def writes_through_an_override(x, table):
    table["k"] = x  # DoublingDict.__setitem__, traced, and its super() call logged
    return x + 1


def keeps_order(x, table):
    table["z"] = x
    table["a"] = 0  # an existing key keeps its place in an OrderedDict
    table.pop("b")
    return x + 1


SUBCLASS_WRITES = [
    (logs_into_a_list, lambda: PlainList([1])),
    (writes_a_dict, lambda: PlainDict(a=1)),
    (writes_a_dict, lambda: collections.defaultdict(list, a=1)),
    (writes_through_an_override, lambda: DoublingDict(a=1)),
    (keeps_order, lambda: collections.OrderedDict(b=1, a=2)),
    (writes_a_dict, lambda: collections.OrderedDict(b=1, a=2)),
]


@pytest.mark.parametrize("backend", ["eager", "ptc"])
@pytest.mark.parametrize("fn, make", SUBCLASS_WRITES,
                         ids=[f"{f.__name__}-{type(m()).__name__}" for f, m in SUBCLASS_WRITES])
def test_writes_to_a_subclass_instance_from_outside_are_one_graph(fn, make, backend):
    # main: PTC-B009 ('item of a PlainDict from outside assigned',
    # 'PlainList.append() on an object from outside'); torch.compile: 1 graph.
    # The writes are replayed after the graph with the C type's own methods
    # (OrderedDict's keep its order), not the subclass's overrides again.
    compiled = ptc.compile(fn, backend=backend)
    for _ in range(2):
        want_obj, got_obj = make(), make()
        want, got = fn(torch.arange(3.0), want_obj), compiled(torch.arange(3.0), got_obj)
        assert torch.equal(want, got)
        same_items(want_obj, got_obj)
        if isinstance(want_obj, dict):
            assert list(want_obj) == list(got_obj)
    assert counts(compiled) == (1, 0, [])


def reads_after_a_write(x, items):
    items.append(2)
    return x + len(items) + items[-1]


class CountingList(list):
    def __len__(self):
        return 99


def test_a_read_of_a_written_subclass_instance_is_one_graph_unless_it_has_methods():
    # main: a break for every subclass. One that adds no methods (an
    # __init__ aside) is read through a shadow like a list; one with methods
    # of its own may read itself otherwise than its storage: no shadow
    for cls, want_counts in ((PlainList, (0, [])),
                             (CountingList, (1, ["an outside CountingList read after a write"]))):
        compiled = ptc.compile(reads_after_a_write, backend="eager")
        want_obj, got_obj = cls([1]), cls([1])
        assert torch.equal(compiled(torch.zeros(2), got_obj), reads_after_a_write(torch.zeros(2), want_obj))
        assert got_obj == want_obj and type(got_obj) is cls
        assert counts(compiled)[1:] == want_counts


# ---- d[key] of a missing key: __missing__, as dict's lookup calls it --------------------------


class DefaultSeven(dict):
    def __missing__(self, k):
        return 7


def reads_missing_keys(x, table):
    return x + table["a"] + table["zz"]


def appends_to_a_missing_key(x, table):
    table["q"].append(x.sum())
    table["q"].append(1)
    return x + len(table["q"])


@pytest.mark.parametrize("make", [lambda: collections.Counter("aab"), lambda: DefaultSeven(a=1),
                                  lambda: collections.defaultdict(int, a=1)],
                         ids=["Counter", "__missing__", "defaultdict"])
def test_a_missing_key_read_calls_missing_in_the_graph(make):
    # main: fullgraph raised PTC-B013 (KeyError: 'zz'); torch.compile: 1 graph
    compiled = ptc.compile(reads_missing_keys, backend="eager", fullgraph=True)
    for _ in range(2):
        want_obj, got_obj = make(), make()
        want = reads_missing_keys(torch.zeros(2), want_obj)
        assert torch.equal(compiled(torch.zeros(2), got_obj), want)
        assert dict(got_obj) == dict(want_obj)  # defaultdict stored the default
    assert counts(compiled) == (1, 0, [])


def test_a_defaultdict_missing_key_stores_its_factorys_value():
    compiled = ptc.compile(appends_to_a_missing_key, backend="eager", fullgraph=True)
    for factory in (list, list, lambda: [5]):
        want_obj, got_obj = collections.defaultdict(factory), collections.defaultdict(factory)
        want = appends_to_a_missing_key(torch.arange(3.0), want_obj)
        assert torch.equal(compiled(torch.arange(3.0), got_obj), want)
        same_items(want_obj, got_obj)
    with pytest.raises(KeyError, match="q"):  # no factory: eager's KeyError
        ptc.compile(appends_to_a_missing_key, backend="eager")(torch.zeros(2),
                                                               collections.defaultdict())


# ---- copy.copy of a builtin container ----------------------------------------------------------


import copy  # noqa: E402


def copies_and_extends(x, items):
    items.append(x.sum())  # a pending write the copy sees
    c = copy.copy(items)
    c.append(x * 2)
    return x + len(c), c, len(items)


def copies_and_writes_an_inner_list(x, items):
    c = copy.copy(items)
    c["q"].append(x + 1)  # shallow: the inner list is the caller's
    c["new"] = 1
    return x * len(c), list(c), type(c).__name__


def copies_a_set(x, items):
    c = copy.copy(items)
    c.add(5)
    return x + len(c), sorted(c), len(items)


def copies_an_immutable(x, items):
    return x + 1, copy.copy(items) is items


COPIES = [
    (copies_and_extends, lambda: [1]),
    (copies_a_set, lambda: {1, 2}),
    (copies_and_writes_an_inner_list, lambda: {"q": [], "a": 1}),
    (copies_and_writes_an_inner_list, lambda: collections.OrderedDict(q=[], b=2)),
    (copies_and_writes_an_inner_list, lambda: collections.defaultdict(list, a=3)),
    (copies_an_immutable, lambda: (1, 2)),
    (copies_an_immutable, lambda: frozenset([1])),
]


def plain_value(v):
    if isinstance(v, torch.Tensor):
        return (type(v), v.tolist())
    if isinstance(v, (list, tuple)):
        return [plain_value(i) for i in v]
    if isinstance(v, dict):
        return (type(v), [(k, plain_value(i)) for k, i in v.items()],
                getattr(v, "default_factory", None))
    return v


@pytest.mark.parametrize("fn, make", COPIES,
                         ids=[f"{f.__name__}-{type(m()).__name__}" for f, m in COPIES])
def test_copy_copy_of_a_builtin_container_is_one_graph(fn, make):
    # main: PTC-B006 'copy.copy (runs for real as one call)'; torch.compile: 1 graph
    compiled = ptc.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        want_obj, got_obj = make(), make()
        want, got = fn(torch.arange(3.0), want_obj), compiled(torch.arange(3.0), got_obj)
        assert plain_value(want) == plain_value(got)
        assert plain_value(want_obj) == plain_value(got_obj)
    assert counts(compiled) == (1, 0, [])


class OwnCopy(list):
    def __copy__(self):
        return OwnCopy(self + ["copied"])


def test_copy_copy_of_another_object_runs_for_real():
    compiled = ptc.compile(copies_and_extends, backend="eager")
    want, got = copies_and_extends(torch.ones(2), OwnCopy()), compiled(torch.ones(2), OwnCopy())
    assert plain_value(want) == plain_value(got)
    assert counts(compiled)[2][0] == "copy.copy (runs for real as one call)"


# ---- operators on a list, tuple or dict from outside ---------------------------------------------


def merges_dicts(x, table):
    merged = table | {"z": x * 2}
    merged["a"].append(1)  # the caller's inner list
    return merged["z"] + len(merged), sorted(merged)


def merges_into_a_new_dict(x, table):
    d = {"a": [], "q": 5}
    d |= table
    return x * d["q"], list(d)


def concatenates(x, items):
    both = items + [x + 1]
    return both[0] * both[-1], len(both * 2)


def compares(x, items):
    return x + (items == [1, 2]) + (items < [1, 3]) + (items != items[:1])


def repeats_a_tuple(x, items):
    return sum(items * 2) + x


OPERATORS = [
    (merges_dicts, lambda n: {"a": [], "b": n}),
    (merges_into_a_new_dict, lambda n: {"q": n} if n > 1 else {"b": n}),
    (concatenates, lambda n: [torch.full((2,), float(n))] * n),
    (compares, lambda n: [1, n]),
    (repeats_a_tuple, lambda n: (n, torch.ones(2) * n)),
]


@pytest.mark.parametrize("fn, make", OPERATORS, ids=[f.__name__ for f, _ in OPERATORS])
def test_an_operator_on_an_outside_container_is_one_graph(fn, make):
    # main: PTC-B006 'operator on an outside dict' (list, tuple); torch.compile: 1 graph.
    # The contents change from call to call: the operator reads them under guards.
    compiled = ptc.compile(fn, backend="eager", fullgraph=True)
    for n in (1, 2, 2, 3):
        want_obj, got_obj = make(n), make(n)
        want, got = fn(torch.arange(2.0), want_obj), compiled(torch.arange(2.0), got_obj)
        assert plain_value(want) == plain_value(got), (n, want, got)
        assert plain_value(want_obj) == plain_value(got_obj)
    assert counts(compiled)[1] == 0


# ---- a user's context manager written in Python ---------------------------------------------------


FLAG = {"on": False}


class Scaling:
    def __init__(self, k):
        self.k, self.log = k, []

    def __enter__(self):
        self.log.append("enter")
        FLAG["on"] = True
        return self.k

    def __exit__(self, kind, value, tb):
        self.log.append(("exit", kind.__name__ if kind else None))
        FLAG["on"] = False
        return kind is KeyError  # suppresses a KeyError only


def with_a_manager_made_here(x, k):
    s = Scaling(k)
    with s as factor:
        y = x * factor if FLAG["on"] else x
    return y, s.log, FLAG["on"]


def with_a_manager_from_outside(x, manager):
    with manager as factor:
        y = x * factor
    manager.k += 1
    return y, manager.log


def with_a_suppressed_error(x, k):
    s = Scaling(k)
    with s:
        y = x + 1
        raise KeyError("k")
    return y, s.log


def with_two_managers(x, k):
    a, b = Scaling(k), Scaling(k + 3)
    with a as i, b as j:
        y = x * i + j
    return y, a.log, b.log


@pytest.mark.parametrize("fn, make", [
    (with_a_manager_made_here, lambda: 2),
    (with_a_manager_from_outside, lambda: Scaling(3)),
    (with_a_suppressed_error, lambda: 2),
    (with_two_managers, lambda: 2),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_user_context_manager_is_traced(fn, make):
    # main: PTC-B016 'with-block on a Scaling' (its __enter__ ran for real at a break);
    # torch.compile: 1 graph
    compiled = ptc.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        results = []
        for f in (fn, compiled):
            arg = make()
            FLAG["on"] = False
            results.append((plain_value(f(torch.arange(3.0), arg)), FLAG["on"],
                            getattr(arg, "k", None), getattr(arg, "log", None)))
        assert results[0] == results[1], results
    assert counts(compiled) == (1, 0, [])


STEPS = []


@contextlib.contextmanager
def scaled(k):
    STEPS.append(("enter", k))
    with torch.no_grad():
        yield k * 2
    STEPS.append(("exit", k))


def with_generator_managers(x, k):
    with scaled(k) as a, scaled(k + 1) as b:
        y = x * a + b
    with scaled(3):
        return y + 1, y.requires_grad, list(STEPS)


@scaled(5)
def decorated(x):
    return x + 1, list(STEPS)


def with_a_generator_manager_that_never_stops(x, k):
    with scaled_twice():
        y = x + k
    return y


@contextlib.contextmanager
def scaled_twice():
    yield 1
    yield 2  # eager's RuntimeError("generator didn't stop") at the exit


@pytest.mark.parametrize("fn", [with_generator_managers, lambda x, k: decorated(x)],
                         ids=["with", "decorator"])
def test_a_contextmanager_generator_is_traced(fn):
    # main: PTC-B016 'with-block on a _GeneratorContextManager' then PTC-B021
    # (next() of its generator, made for real), two breaks per manager;
    # torch.compile: 1 graph
    compiled = ptc.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        results = []
        for f in (fn, compiled):
            STEPS.clear()
            results.append((plain_value(f(torch.arange(3.0, requires_grad=True), 2)), list(STEPS)))
        assert results[0] == results[1], results
    assert counts(compiled) == (1, 0, [])


def test_a_contextmanager_generator_that_never_stops_raises_like_eager():
    compiled = ptc.compile(with_a_generator_manager_that_never_stops, backend="eager")
    for f in (with_a_generator_manager_that_never_stops, compiled):
        with pytest.raises(RuntimeError, match="generator didn't stop"):
            f(torch.ones(2), 1)


class TorchStyleManager:
    pass


TorchStyleManager.__module__ = "torch.fake"
TorchStyleManager.__enter__ = lambda self: 1
TorchStyleManager.__exit__ = lambda self, *exc: None


def with_a_torch_manager(x, manager):
    with manager as one:
        return x + one


def test_a_python_manager_of_torch_runs_for_real():
    # torch's own Python managers set process state through C calls: not traced
    compiled = ptc.compile(with_a_torch_manager, backend="eager")
    assert torch.equal(compiled(torch.zeros(2), TorchStyleManager()), torch.ones(2))
    assert counts(compiled)[2] == ["with-block on a TorchStyleManager"]
