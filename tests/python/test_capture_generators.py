"""Generator functions called inside a compiled function, against eager.

torch.compile inlines a generator that the function makes and consumes
(for-loops, list(), sum(), zip(), next(), unpacking, yield from): one graph. ptc runs
the generator's body traced, one item at a time when the program asks for
it, so side effects (printed text, appends, closures read late) happen in
eager's order; a generator the function returns, or that is live at a break,
comes back as a real generator at eager's position, or the function runs
for real where that position cannot be rebuilt. send(), throw() and close()
are traced with CPython 3.11's semantics, and so are generator functions
with try/finally, try/except and with blocks; one left unfinished inside
such a block (CPython runs its clean-up when it frees it) makes its call run
for real (PTC-B015). Each program runs eagerly and under
ptc.compile(backend="eager") twice (test_capture_iterators.observe: results,
iterators by type and remaining items, exceptions, printed text, the
argument, no ptc warning) and pins the first call's graph and break counts.
"""
import collections.abc
import traceback

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from test_capture_iterators import assert_like_eager, counts, observe  # noqa: E402

COUNTS = {}  # program -> (graphs, breaks) on the first call


def case(graphs, breaks):
    def add(fn):
        COUNTS[fn] = (graphs, breaks)
        return fn
    return add


def scaled(x, n, scale=1):
    for i in range(n):
        yield x * i * scale


@case(1, 0)
def consumed_by_sum_list_and_for(x):
    acc = x
    for v in scaled(x, 2):
        acc = acc + v
    return sum(scaled(x, 3)), list(scaled(x, 2, scale=3)), list(scaled(n=2, x=x)), acc


@case(1, 0)
def zipped_enumerated_unpacked(x):
    a, b = scaled(x, 2)
    pairs = [p + q for p, q in zip(scaled(x, 2), scaled(x + 1, 3))]
    return a + b, pairs, dict(enumerate(scaled(x, 2)))


@case(1, 0)
def advanced_by_next_interleaved(x):
    first, second = scaled(x, 3), scaled(x + 1, 3)
    return next(first), next(second), next(first), next(second, None)


@case(1, 0)
def body_runs_when_advanced(x):
    log = []

    def logged(n):
        for i in range(n):
            log.append(("gen", i))
            yield x + i

    for v in logged(2):
        log.append(("loop", len(log)))
    gen = logged(3)
    log.append("made")
    next(gen)
    return x + 1, log


@case(1, 0)
def closure_read_when_advanced(x):
    k = 2

    def late():
        for i in range(2):
            yield x * k + i

    gen = late()
    k = 5
    return list(gen)


@case(1, 0)
def generators_of_generators(x):
    def inner(y):
        for i in range(2):
            yield y + i

    def outer(y):
        for v in inner(y):
            yield v * 2

    return sum(outer(x)), [r.sum() for r in rows(x.view(2, 1))]


def rows(t):
    for row in t:
        yield row


@case(1, 0)
def stops_early(x):
    seen = []

    def counted():
        for i in range(5):
            seen.append(i)
            yield x * i

    for v in counted():
        if len(seen) == 2:
            break
    return v, seen, any(True for _ in counted()), seen


@case(1, 0)
def returned_generators_at_their_position(x):
    import types
    fresh, done, keywords = scaled(x, 2), scaled(x, 1), scaled(n=2, x=x, scale=3)
    list(done)
    return x + 1, fresh, done, keywords, isinstance(fresh, types.GeneratorType), iter(fresh) is fresh


@case(1, 0)
def returns_its_value_and_receives_none(x):
    def returning():
        got = yield x
        yield got
        return 7

    return x + 1, list(returning())


@case(1, 0)
def next_raises_the_return_value_once(x):
    def returning():
        yield x
        return 5

    gen, values = returning(), []
    next(gen)
    for _ in range(2):
        try:
            next(gen)
        except StopIteration as e:
            values.append(e.value)
    return x + 1, values


@case(1, 0)
def raises_into_the_callers_except_block(x):
    def failing():
        yield x
        raise KeyError("k")

    def stopping():
        yield x
        raise StopIteration  # PEP 479: a RuntimeError

    seen = []
    try:
        for v in failing():
            seen.append(v)
    except KeyError as e:
        seen.append(str(e))
    try:
        list(stopping())
    except RuntimeError as e:
        seen.append(str(e))
    return x + 1, seen


@case(0, 1)
def raises_to_the_caller_of_the_compiled_function(x):
    def failing():
        yield x + 1
        raise KeyError("k")

    return list(failing())


def delegating(x):
    got = yield from scaled(x, 2)  # scaled returns None: got is None
    total = yield from counted_to(x, 2)
    yield from [x + 10, x + 11]
    yield from (t * 3 for t in [x])
    yield (got, total)


def counted_to(x, n):
    for i in range(n):
        yield x - i
    return n * 10


@case(1, 0)
def yield_from_generators_lists_and_genexprs(x):
    return list(delegating(x)), sum(v for v in delegating(x) if not isinstance(v, tuple))


@case(0, 1)
def suspended_generator_returned(x):
    # A started generator cannot be rebuilt at its yield: the function
    # runs for real (PTC-B025), never a wrong generator.
    gen = scaled(x, 3)
    next(gen)
    return x + 1, gen


@case(1, 1)
def bad_arguments_raise_at_the_call(x):
    try:
        scaled(x)
    except TypeError as e:
        return x + 1, str(e)


def accumulator():
    total = 0
    while True:
        got = yield total
        total = total + got


@case(1, 0)
def send_values_into_a_yield(x):
    acc = accumulator()
    first = acc.send(None)  # starts it, as next() does
    acc.send(x)
    doubled = acc.send(x * 2)

    def echo():
        a = yield 1
        b = yield a
        return (a, b)

    e = echo()
    seen = [next(e), e.send("a")]
    try:
        e.send("b")
    except StopIteration as stop:
        seen.append(stop.value)
    try:
        e.send(None)  # finished: StopIteration with no value
    except StopIteration as stop:
        seen.append(stop.value)
    try:
        echo().send(5)
    except TypeError as err:
        seen.append(str(err))
    return first, doubled, seen


def logged_steps(x, log):
    try:
        log.append("start")
        yield x + 1
        log.append("resumed")
        yield x + 2
    finally:
        log.append("finally")


@case(1, 0)
def close_runs_finally_at_the_yield(x):
    log = []
    gen = logged_steps(x, log)
    v = next(gen)
    log.append("closing")
    r = gen.close()
    log.append(("closed", r, list(gen)))
    unstarted = logged_steps(x, log)
    unstarted.close()  # not started: no code of its runs
    unstarted.close()
    done = logged_steps(x, log)
    items = list(done)
    done.close()
    return v, items, log


def reraising_generator_exit():
    try:
        yield 1
    except GeneratorExit:
        raise


def ignoring_generator_exit(log):
    try:
        yield 1
    except GeneratorExit:
        log.append("caught")
    yield 2


@case(1, 0)
def close_of_a_generator_that_handles_generator_exit(x):
    log = []
    gen = reraising_generator_exit()
    next(gen)
    log.append(gen.close())
    bad = ignoring_generator_exit(log)
    next(bad)
    try:
        bad.close()
    except RuntimeError as err:
        log.append(str(err))
    log.append(next(bad, "exhausted"))
    return x + 1, log


def recovering(x):
    for i in range(3):
        try:
            yield x + i
        except ValueError as err:
            yield ("recovered", str(err))


@case(1, 0)
def throw_raises_at_the_yield(x):
    gen = recovering(x)
    a = next(gen)
    b = gen.throw(ValueError("bad"))
    c = next(gen)
    d = gen.throw(ValueError)  # a class: raised as ValueError()
    seen = [a, b, c, d, next(gen)]
    try:
        gen.throw(KeyError("k"))  # not caught inside: ends the generator
    except KeyError as err:
        seen.append(("caller", str(err), list(gen)))
    try:
        recovering(x).throw(ValueError("early"))  # not started: no code of its runs
    except ValueError as err:
        seen.append(str(err))
    try:
        recovering(x).throw(3)
    except TypeError as err:
        seen.append(str(err))
    return seen


class PairError(Exception):
    def __init__(self, a, b=0):
        super().__init__(a, b)
        self.total = a + b


def logging_errors(x, log):
    while True:
        try:
            yield x
        except Exception as err:
            log.append((type(err).__name__, repr(err.args)))


@case(1, 0)
def throw_of_type_and_value(x):
    # throw(type, value[, None]) normalised as CPython 3.11 does (main broke)
    log = []
    gen = logging_errors(x, log)
    next(gen)
    gen.throw(ValueError, "v")
    gen.throw(ValueError, None)
    gen.throw(PairError, (1, 2))  # a tuple: the class's arguments
    gen.throw(KeyError, KeyError("same"), None)
    gen.throw(LookupError, KeyError("subclass"))  # an instance of a subclass: itself
    gen.throw(KeyError, ValueError("other"))  # another class's: the argument
    gen.throw(ValueError("instance"), None)
    for wrong in [(ValueError("i"), 1), (3,), (ValueError, 1, 5), (1, 2, 3, 4), ()]:
        try:
            gen.throw(*wrong)
        except TypeError as err:
            log.append(str(err))
    gen.close()
    return x + 1, log


def answering(x, log):
    got = yield x
    log.append(("inner", got))
    got = yield x * 2
    log.append(("inner", got))
    return "inner done"


def delegating_to_answering(x, log):
    returned = yield from answering(x, log)
    log.append(("outer", returned))
    got = yield x * 3
    log.append(("outer", got))


@case(1, 0)
def send_through_a_yield_from(x):
    # send(v) into a generator at a yield from goes to the inner generator
    # (main broke); a list's or map's iterator has no send: AttributeError
    log = []
    gen = delegating_to_answering(x, log)
    seen = [next(gen), gen.send(5), gen.send(6)]
    try:
        gen.send(7)
    except StopIteration as stop:
        log.append(("stop", stop.value))

    def over(items):
        yield from items

    for items in ([x, x + 1], map(lambda t: t * 2, [x])):
        gen = over(items)
        next(gen)
        try:
            gen.send(1)
        except AttributeError as err:
            log.append(str(err))
    return seen, log


def inner_with_finally(x, log):
    try:
        yield x
        yield x * 2
    finally:
        log.append("inner finally")


def outer_with_finally(x, log):
    try:
        yield from inner_with_finally(x, log)
    finally:
        log.append("outer finally")


def closing_raises(log):
    try:
        yield 1
    finally:
        log.append("inner closing")
        raise KeyError("from the inner close")


def catching_the_inner_close(log):
    try:
        yield from closing_raises(log)
    except KeyError as err:
        log.append(("outer caught", err.args))
    yield 5


@case(1, 0)
def close_and_throw_through_a_yield_from(x):
    # close() and throw(GeneratorExit) close the inner generator first, then
    # raise GeneratorExit (or what the inner close raised) in the outer one;
    # throw() into a list's iterator is raised at the yield from (main broke)
    log = []
    gen = outer_with_finally(x, log)
    first = next(gen)
    log.append(gen.close())
    log.append(next(gen, "exhausted"))
    gen = outer_with_finally(x, log)
    next(gen)
    try:
        gen.throw(GeneratorExit)
    except GeneratorExit:
        log.append("GeneratorExit out")
    gen = catching_the_inner_close(log)
    next(gen)
    try:
        gen.close()
    except RuntimeError as err:  # it yields 5 after catching: ignored GeneratorExit
        log.append(str(err))
    log.append(list(gen))

    def over_a_list():
        try:
            yield from [x, x + 1]
        except ValueError as err:
            log.append(("caught", err.args))
            yield x * 5

    gen = over_a_list()
    next(gen)
    caught = gen.throw(ValueError("v"))
    gen.close()
    return first, caught, log


def inner_handling(x, log):
    try:
        yield x
    except ValueError as err:
        log.append(("inner caught", err.args))
        yield x * 2
    return "inner returned"


def inner_passing(x, log):
    yield x
    yield x * 3


def inner_returning(x, log):
    try:
        yield x
    except ValueError:
        return "returned on the throw"


def outer_catching(inner, x, log):
    try:
        returned = yield from inner(x, log)
        log.append(("returned", returned))
    except ValueError as err:
        log.append(("outer caught", err.args))
        yield x * 4
    yield x * 5


@case(1, 0)
def throw_through_a_yield_from_a_generator(x):
    # throw() into a generator at a yield from a generator: the inner one
    # first; its next item, its return value (yield from's value) or what it
    # raises (thrown in the outer one past the loop) decide (main broke)
    log, got = [], []
    for inner in (inner_handling, inner_passing, inner_returning):
        gen = outer_catching(inner, x, log)
        next(gen)
        got.append(gen.throw(ValueError("v")))
        got.append(list(gen))

    def not_catching():
        return (yield from inner_handling(x, log))

    gen = not_catching()
    next(gen)
    try:
        gen.throw(KeyError("k"))
    except KeyError as err:
        log.append(("escaped", err.args))
    return got, log


@case(1, 0)
def dropped_inside_an_except_block(x):
    # left suspended in an except block: closing it only leaves the block,
    # no code of the program's runs, so the trace need not place it
    gen = recovering(x)
    next(gen)
    return gen.throw(ValueError("v")), x + 1


@case(1, 0)
def finally_and_except_blocks_run_through(x):
    log = []
    total = sum(logged_steps(x, log))
    for v in logged_steps(x * 2, log):
        total = total + v

    def skipping(x):
        for i in range(3):
            try:
                yield x / (i - 1) if i != 1 else 1 // 0
            except ZeroDivisionError:
                log.append("skipped")

    return total, list(skipping(x)), log


WEIGHT = torch.ones(2, requires_grad=True)


class Recorder:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", exc[0]))
        return False


@case(1, 0)
def with_blocks_in_the_generator(x):
    w = WEIGHT
    log = []

    def under_no_grad(t):
        with torch.no_grad():
            yield t * 2
            yield t * 3

    outside = []
    for v in under_no_grad(w):  # the block is on while the loop body runs
        outside.append((v.requires_grad, (w * 4).requires_grad))

    def recorded(t):
        with Recorder(log):
            yield t + 1
            log.append("inside")

    gen = recorded(x)
    first = next(gen)
    gen.close()
    return outside, (w * 5).requires_grad, first, log, list(recorded(x))


@case(1, 0)
def send_into_a_yield_from_of_an_endless_generator(x):
    def outer():
        got = yield from accumulator()
        yield got

    gen = outer()
    next(gen)
    return gen.send(x), x + 1


@case(1, 3)
def unfinished_generator_with_finally_runs_for_real(x):
    log = []

    def closing():
        try:
            yield x
            yield x + 1
        finally:
            log.append("closed")

    for v in closing():
        break
    return v + 1, log


class Triple(collections.abc.Sequence):
    def __len__(self):
        return 3

    def __getitem__(self, i):
        if i >= 3:
            raise IndexError(i)
        return i + 1


@case(1, 0)
def unfinished_generator_in_typed_excepts_is_traced(x):
    # closing it raises GeneratorExit at the yield, which none of its clauses
    # catches: no code of it runs, so it is traced (a Sequence's __iter__ is
    # one, left unfinished by zip over a shorter list as transformers' cache
    # set-up does; main ran the call for real, and broke under fullgraph)
    def items():
        try:
            yield x
            yield x + 1
        except IndexError:
            return
        except (KeyError, ValueError):
            pass
        except Exception as e:
            raise RuntimeError("never") from e

    for v in items():
        break
    return v + 1, [x * k for _, k in zip("ab", Triple())]


@case(1, 3)
def unfinished_generator_catching_generator_exit_runs_for_real(x):
    log = []

    def items():
        try:
            yield x
            yield x + 1
        except GeneratorExit:
            log.append("closed")
            raise

    for v in items():
        break
    return v + 1, log


# ---- updates consume a generator item by item -------------------------------------

@case(1, 0)
def updates_consume_generators_lazily(x):
    # list.extend, set.update, set.difference_update and dict.update take a
    # generator's items one at a time: its body sees the items added so far
    # (main drained it first: [1, 1, 1])
    seen = []
    items, s, d = [1], {1}, {}

    def watching(size_of, n, make=lambda i: i):
        for i in range(n):
            seen.append(size_of())
            yield make(i)

    items.extend(watching(lambda: len(items), 3))
    s.update(watching(lambda: len(s), 3, lambda i: i + 10), [7, 8])
    s.difference_update(watching(lambda: len(s), 2, lambda i: i + 10))
    d.update(watching(lambda: len(d), 3, lambda i: (i, x * i)), z=x)
    try:
        s.update(watching(lambda: len(s), 3, lambda i: [i] if i == 1 else i + 20))
    except TypeError as err:  # unhashable: the items before it stay added
        seen.append(str(err))
    try:
        d.update(watching(lambda: len(d), 2, lambda i: (i,)))
    except ValueError as err:
        seen.append(str(err))
    return items, sorted(s), d, seen


@case(1, 0)
def list_iadd_consumes_a_generator_lazily(x):
    # l += gen is l.extend(gen): the generator sees the items added so far,
    # and an error half way leaves the items before it (main broke: B-opaque)
    items = [1]
    items += (items[-1] + i for i in range(3))

    def failing():
        yield x * 2
        raise ValueError("half way")

    try:
        items += failing()
    except ValueError as err:
        items.append(str(err))
    items += map(lambda i: i + len(items), range(2))
    return items


CASES = [pytest.param(fn, *n, id=fn.__name__) for fn, n in COUNTS.items()]


@pytest.mark.parametrize("fn,graphs,breaks", CASES)
def test_like_eager(fn, graphs, breaks):
    assert_like_eager(fn, graphs, breaks)


@pytest.mark.parametrize("fn", [fn for fn, n in COUNTS.items() if n[1] == 0])
def test_fullgraph_like_eager(fn):
    assert observe(ptc.compile(fn, backend="eager", fullgraph=True)) == observe(fn)


@pytest.mark.parametrize("fn", [consumed_by_sum_list_and_for, generators_of_generators])
def test_compiled_backend_like_eager(fn):
    assert observe(ptc.compile(fn)) == observe(fn)


OUTSIDE = {"list": [0], "set": {0}, "dict": {"k": 0}}


def extend_outside(x):
    seen = []
    out = OUTSIDE

    def watching(size_of, make):
        for i in range(3):
            seen.append(size_of())
            yield make(i)

    out["list"].extend(watching(lambda: len(out["list"]), lambda i: i))
    out["set"].update(watching(lambda: len(out["set"]), lambda i: i + 1))
    out["dict"].update(watching(lambda: len(out["dict"]), lambda i: (str(i), i)))
    return x + 1, seen


def extend_outside_then_fail(x):
    out = OUTSIDE

    def failing():
        yield 5
        yield [6]  # unhashable: eager has added 5, then raises

    out["set"].update(failing())
    return x + 1


def extend_outside_print_inside(x):
    out = OUTSIDE

    def printing():
        yield 1
        print("inside", len(out["list"]))  # a break inside: the call reruns for real
        yield 2

    out["list"].extend(printing())
    return x + 1


def iadd_outside(x):
    # l += gen on an outside list: main drained the generator before the
    # write, so it read [0] three times (a silent wrong result: [0, 1, 1, 1])
    out = OUTSIDE["list"]
    out += (out[-1] + 1 for i in range(3))
    return x + 1


@pytest.mark.parametrize("fn,graphs,breaks", [
    (extend_outside, 1, 0), (extend_outside_then_fail, 0, 1), (extend_outside_print_inside, 1, 1),
    (iadd_outside, 1, 0)])
def test_outside_updates_from_generators_like_eager(fn, graphs, breaks):
    def reset():
        OUTSIDE["list"][:] = [0]
        OUTSIDE["set"].clear()
        OUTSIDE["set"].add(0)
        OUTSIDE["dict"].clear()
        OUTSIDE["dict"]["k"] = 0

    compiled = ptc.compile(fn, backend="eager")
    for call in range(2):
        reset()
        want = observe(fn), repr(OUTSIDE)
        reset()
        got = observe(compiled), repr(OUTSIDE)
        assert not got[0]["warnings"], got[0]["warnings"]
        assert got == want, "call %d" % (call + 1)
        if call == 0:
            assert counts(compiled) == (graphs, breaks)


try:
    raise ValueError("outside")
except ValueError as _e:
    OUTSIDE_TB = _e.__traceback__


def throw_with_a_traceback(x):
    # throw(type, value, tb): the exception carries tb into the generator,
    # and out of it. ptc breaks (PTC-B015) and runs it for real; torch 2.11's
    # Dynamo makes one graph that drops tb (1 where eager gives 3) and
    # raises Unsupported under fullgraph=True when the generator catches it
    def g():
        yield 1

    it = g()
    next(it)
    try:
        it.throw(ValueError, ValueError("a"), OUTSIDE_TB)
    except ValueError as e:
        return x + len(traceback.extract_tb(e.__traceback__))


def test_throw_with_a_traceback_breaks_and_keeps_it():
    compiled = ptc.compile(throw_with_a_traceback, backend="eager")
    for _ in range(2):
        assert torch.equal(compiled(torch.zeros(1)), throw_with_a_traceback(torch.zeros(1)))
    handle = getattr(compiled, "_ptc_compiled", compiled)
    (only,) = ptc.ExplainOutput(list(handle._events()), None).breaks
    assert only["code"] == "PTC-B015" and only["detail"] == "generator.throw() with a traceback"
    with pytest.raises(ptc.GraphBreakError, match="PTC-B015"):
        ptc.compile(throw_with_a_traceback, fullgraph=True)(torch.zeros(1))


def throw_with_a_traceback_into_a_try(x):
    # the generator catches it in a try block whose clause also catches
    # close()'s GeneratorExit: left suspended there by the break, its call
    # runs for real, and that break says why
    def g():
        try:
            yield 1
        except BaseException as e:
            yield 2 + len(traceback.extract_tb(e.__traceback__))

    it = g()
    next(it)
    r = it.throw(ValueError, ValueError("a"), OUTSIDE_TB)
    it.close()
    return x + r


def test_a_generator_run_for_real_says_where_the_trace_stopped():
    compiled = ptc.compile(throw_with_a_traceback_into_a_try, backend="eager")
    for _ in range(2):
        want = throw_with_a_traceback_into_a_try(torch.zeros(1))
        assert torch.equal(compiled(torch.zeros(1)), want)
    handle = getattr(compiled, "_ptc_compiled", compiled)
    first = ptc.ExplainOutput(list(handle._events()), None).breaks[0]
    assert first["code"] == "PTC-B015"
    assert first["detail"].endswith("(the trace stopped at: generator.throw() with a traceback)")
