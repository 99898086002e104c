"""Containers and iterables whose type overrides what CPython reads, against eager.

- Unpacking (a, b = obj; [*obj]) of an object with a Python __iter__ or
  __next__: the items are the ones those methods give.
"""
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402


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
