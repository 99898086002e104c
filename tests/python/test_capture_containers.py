"""Containers whose type overrides what CPython reads, against eager.

- Lists, tuples and dicts from outside the call whose subclass overrides
  __getitem__, __iter__, __len__ or keys: a C method of the base type
  (l.count, d.get, super().__getitem__ in the override) reads the object's
  own storage, and so do the guards, so each call sees its own contents.
- Unpacking (a, b = obj; [*obj]) of an object with a Python __iter__ or
  __next__: the items are the ones those methods give.
Each program runs eagerly and compiled on containers whose contents change
from call to call, with and without fullgraph.
"""
import collections
import functools
import operator
import warnings

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


class IterPlusOne(list):
    def __iter__(self):
        return iter([v + 1 for v in super().__iter__()])


class TimesTen(list):
    def __getitem__(self, i):
        return super().__getitem__(i) * 10


class PlainGetitemDict(dict):
    def __getitem__(self, k):
        return super().__getitem__(k)


class FirstKeyOnly(dict):
    def keys(self):
        return list(super().keys())[:1]


class SaysNine(tuple):
    def __len__(self):
        return 9

    def __iter__(self):
        return iter([4, 5])


def count_of_ones(x, items):
    return x + items.count(1)


def first_item(x, items):
    return x + items[0]


def get_and_index(x, table):
    return x + table.get("a", 0) + table["a"]


def keys_and_values(x, table):
    return x + len(table.keys()) + sum(table.values())


def merged(x, table):
    return x + len({**table}) + len(table.keys())


def tuple_reads(x, t):
    a, b = t
    return x + len(t) + t.count(1) + a + b + sum([*t])


def ordered_keys(x, table):
    return x + sum(k * i for i, k in enumerate(table))


def lists(n):
    return [1] * n + [2]


def dicts(n):
    return {k: n for k in "abc"[:n]}


def ordered(n):
    d = collections.OrderedDict((k, k) for k in range(n + 1))
    d.move_to_end(0)
    return d


CASES = [
    (count_of_ones, lambda n: IterPlusOne(lists(n))),
    (first_item, lambda n: TimesTen(lists(n)[::-1])),
    (get_and_index, lambda n: PlainGetitemDict(dicts(n))),
    (keys_and_values, lambda n: PlainGetitemDict(dicts(n))),
    (merged, lambda n: FirstKeyOnly(dicts(n))),
    (tuple_reads, lambda n: SaysNine(lists(n))),
    (ordered_keys, ordered),
]


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_outside_container_reads_follow_its_contents(fn, make, fullgraph):
    # main: stale values from the first call (count_of_ones 1 for 2,
    # get_and_index, keys_and_values), the override run twice (first_item:
    # 100 for 10), or under fullgraph an InternalError "a fresh entry rejects
    # its own state" where the guards read len/keys through the override
    # (merged, tuple_reads, ordered_keys; without fullgraph: a warning and eager)
    compiled = ptc.compile(fn, backend="eager", fullgraph=fullgraph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (1, 2, 3, 2):
            want, got = fn(torch.zeros(2), make(n)), compiled(torch.zeros(2), make(n))
            assert torch.equal(want, got), (n, want, got)


def copy_of(x, table):
    return x + 1, table.copy()


class MyDefaultDict(collections.defaultdict):
    pass


@pytest.mark.parametrize("make", [lambda n: ordered(n), lambda n: collections.defaultdict(list, a=[n]),
                                  lambda n: collections.defaultdict(lambda: n, a=n)],
                         ids=["OrderedDict", "defaultdict", "defaultdict-lambda"])
def test_a_copy_of_an_outside_ordered_or_default_dict_is_one_graph(make):
    # main: PTC-B006 ('OrderedDict.copy() on an object from outside'); eager's
    # copy is one of its type, in its order, with its default_factory
    compiled = ptc.compile(copy_of, backend="eager", fullgraph=True)
    for n in (1, 2, 2):
        table = make(n)
        want, got = copy_of(torch.zeros(2), make(n))[1], compiled(torch.zeros(2), table)[1]
        assert type(got) is type(want) and list(got.items()) == list(want.items())
        assert got is not table
        if isinstance(want, collections.defaultdict):
            assert got.default_factory is table.default_factory
            assert got["missing"] == want["missing"]


def test_a_copy_of_a_subclass_instance_still_breaks():
    # a subclass's copy() builds through its own constructor: it runs for real
    compiled = ptc.compile(copy_of, backend="eager")
    table = MyDefaultDict(int, a=1)
    got = compiled(torch.zeros(2), table)[1]
    assert type(got) is MyDefaultDict and got == table and got.default_factory is int
    with pytest.raises(Exception, match="PTC-B"):
        ptc.compile(copy_of, backend="eager", fullgraph=True)(torch.zeros(2), table)


# ---- unpacking through Python __iter__ and __next__ --------------------------------------


class Pair:
    def __iter__(self):
        return iter([4, 5])


class CountDown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        return self.n


class PairTuple(tuple):
    def __iter__(self):
        return iter([4, 5])


def unpacks_made_here(x):
    a, b = Pair()
    c, *d = CountDown(3)
    e, f = PairTuple((1, 2))
    return x + a + b + c + e + f, d, [*Pair()], {*CountDown(2)}


def unpacks_an_argument(x, pair):
    a, b = pair
    c, *d = pair
    return x * a + b, c, d, [*pair]


class Counts:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def spreads_an_argument(x, counts):
    return (lambda *items: x + len(items))(*counts)


def test_spreading_an_argument_traces_its_iter():
    # main: f(*obj) ran obj.__iter__ for real, unguarded: the first call's
    # count served the others
    compiled = ptc.compile(spreads_an_argument, backend="eager", fullgraph=True)
    for n in (1, 2, 3):
        want = spreads_an_argument(torch.zeros(2), Counts(n))
        got = compiled(torch.zeros(2), Counts(n))
        assert torch.equal(want, got), (n, want, got)
    with pytest.raises(TypeError, match="argument after \\* must be an iterable, not int"):
        ptc.compile(spreads_an_argument, backend="eager")(torch.zeros(2), 5)


def test_unpacking_runs_python_iter_and_next():
    # main: a, b = Pair() gave (list_iterator, the Pair) and [*PairTuple(...)]
    # of an argument crashed the process
    x = torch.arange(3.0)
    want, got = unpacks_made_here(x), ptc.compile(unpacks_made_here, fullgraph=True)(x)
    assert torch.equal(want[0], got[0]) and want[1:] == got[1:]
    for pair in (Pair(), PairTuple((1, 2))):
        want = unpacks_an_argument(x, pair)
        got = ptc.compile(unpacks_an_argument, backend="eager")(x, pair)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:]


# ---- views of an outside dict --------------------------------------------------------------


def views_of(x, table):
    return x + len(table.keys() & {"a", "b"}), table.keys() - {"a"}, table.keys(), table.items()


def test_views_of_an_outside_dict_are_views_of_it():
    # main: d.keys() was a list: `keys() & {...}` raised TypeError, and the
    # returned view was a list copy that did not follow the dict
    compiled = ptc.compile(views_of, backend="eager", fullgraph=True)
    for n in (1, 2, 3):
        table = {k: n for k in "abc"[:n]}
        want, got = views_of(torch.zeros(2), dict(table)), compiled(torch.zeros(2), table)
        assert torch.equal(want[0], got[0]) and want[1] == got[1]
        assert type(got[2]) is type(want[2]) and type(got[3]) is type(want[3])
        table["z"] = 9
        assert list(got[2]) == list(table) and list(got[3]) == list(table.items())


def ordered_views(x, table):
    return x + 1, table.keys(), table.values(), table.items()


@pytest.mark.parametrize("fullgraph", [False, True])
def test_views_of_an_outside_ordered_dict_are_its_views(fullgraph):
    # main: the views came back as lists (a known difference, it said): not
    # odict_keys/odict_values/odict_items, and not live views of the caller's
    # OrderedDict
    compiled = ptc.compile(ordered_views, backend="eager", fullgraph=fullgraph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (1, 2, 2):
            table = ordered(n)
            want, got = ordered_views(torch.zeros(2), ordered(n)), compiled(torch.zeros(2), table)
            for w, g in zip(want[1:], got[1:]):
                assert type(g) is type(w) and list(g) == list(w), (w, g)
            table.move_to_end(n)
            table[-1] = -1
            assert list(got[1]) == list(table) and list(got[3]) == list(table.items())


# ---- a functools.partial from outside ----------------------------------------------------------


def calls_partial(x, fn):
    return fn(x)


def scaled(k, x):
    return x * k


def test_an_outside_partial_with_other_arguments_is_guarded():
    # main: the partial's args and keywords were read with no guard: the
    # first call's (other=1) served every later one
    compiled = ptc.compile(calls_partial, backend="eager", fullgraph=True)
    for n in (1, 2, 3, 2):
        for fn in (functools.partial(torch.add, other=n), functools.partial(scaled, n)):
            assert torch.equal(compiled(torch.ones(2), fn), calls_partial(torch.ones(2), fn)), n


def applies_getter(x, getter):
    return getter(x) if isinstance(getter, operator.methodcaller) else x + getter([1, 2, 3])


def test_an_outside_operator_getter_is_guarded_by_identity():
    # main: a getter passed in was taken apart with no guard: itemgetter(1)
    # and methodcaller("add", 2) served by the first call's itemgetter(0) and
    # methodcaller("add", 1)
    compiled = ptc.compile(applies_getter, backend="eager", fullgraph=True)
    for n in (1, 2, 1):
        for getter in (operator.itemgetter(n), operator.methodcaller("add", n)):
            want = applies_getter(torch.ones(2), getter)
            assert torch.equal(compiled(torch.ones(2), getter), want)


class IterThroughSuper(list):
    def __iter__(self):
        return super().__iter__()


def sums_through_super_iter(x, items):
    return x + sum(items)


def test_super_iter_of_an_outside_list_is_a_read():
    # main: super().__iter__() on an outside list broke as a mutation
    # (PTC-B009 "LI.__iter__() on an object from outside")
    compiled = ptc.compile(sums_through_super_iter, backend="eager", fullgraph=True)
    for n in (1, 2, 3):
        items = IterThroughSuper([n] * n)
        want = sums_through_super_iter(torch.zeros(2), items)
        assert torch.equal(compiled(torch.zeros(2), items), want)
