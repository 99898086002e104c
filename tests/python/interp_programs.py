"""Plain-Python programs for checking ptc's bytecode interpreter against CPython.

Each PROGRAMS entry is (function, args, kwargs). They cover the opcodes of
3.11 and 3.12 that ordinary functions use: arithmetic and comparisons,
containers and unpacking, comprehensions, closures and cells, exceptions
(try/except/finally, with, raise from, re-raise), f-strings, pattern
matching, classes and super(), keyword and star arguments, imports, globals.
No torch: these also run on a Python without it.
"""
import collections
import dataclasses
import functools
import math

GLOBAL_LIST = [1, 2, 3]
COUNTER = 0


def arith(a, b):
    return a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, -a, +a, ~a, a << 2, a >> 1, a & b, a | b, a ^ b


def inplace_ops(a, b):
    x = a
    x += b
    x -= 1
    x *= 3
    x //= 2
    x **= 2
    x %= 1000
    x <<= 1
    x >>= 1
    x |= 8
    x &= 255
    x ^= 3
    y = 1.5
    y /= 2
    return x, y


def compare_chain(a, b, c):
    return a < b < c, a <= b, a == b, a != c, a > c >= b, a is b, a is not None, 3 in [a, b, c]


def truthiness(*xs):
    return [bool(x) for x in xs], [not x for x in xs], [x and 1 or 2 for x in xs]


def containers(n):
    t = (1, 2, n)
    l = [n, *t, *range(2)]
    s = {n, 1, 2}
    d = {"a": n, **{"b": 2}, "c": l[1]}
    return t, l, sorted(s), d, l[1:3], l[::-1], t[-1], d.get("z", 5)


def unpacking(seq):
    a, b, *rest = seq
    *init, last = seq
    x, (y, z) = 1, (2, 3)
    first, *mid, end = range(5)
    return a, b, rest, init, last, x, y, z, first, mid, end


def comprehensions(n):
    sq = [i * i for i in range(n) if i % 2 == 0]
    dd = {i: str(i) for i in range(n)}
    ss = {i % 3 for i in range(n)}
    nested = [[j for j in range(i)] for i in range(n)]
    gen = sum(i for i in range(n))
    return sq, dd, ss, nested, gen


def comprehension_shadow(x):
    y = [x for x in range(3)]
    return x, y


def closures(n):
    acc = []

    def add(v):
        acc.append(v * n)
        return len(acc)

    def counter():
        count = 0

        def inc():
            nonlocal count
            count += 1
            return count

        return inc

    c = counter()
    add(1)
    add(2)
    return acc, c(), c(), (lambda q: q + n)(10)


def make_adder(k):
    return lambda v: v + k


def closure_from_outside(x):
    f = make_adder(x)
    return f(1), f(2)


def default_args(a, b=2, *args, c=3, d, **kwargs):
    return a, b, args, c, d, sorted(kwargs.items())


def call_kinds(x):
    r1 = default_args(1, d=4)
    r2 = default_args(1, 2, 3, 4, c=5, d=6, e=7)
    args = (1, 2)
    kw = {"d": 9, "z": 1}
    r3 = default_args(*args, **kw)
    r4 = max(x, 3, key=lambda v: -v)
    r5 = functools.partial(default_args, 0, d=1)(5)
    return r1, r2, r3, r4, r5


def fstrings(name, value):
    return f"{name}={value}", f"{value:>8.3f}|{name!r}|{name!s:^10}", f"{value!a}", f"{{literal}}{value:{'x' if value > 3 else 'd'}}"


def try_except(x):
    out = []
    try:
        out.append(1)
        if x:
            raise ValueError("bad %d" % x)
        out.append(2)
    except ValueError as e:
        out.append(str(e))
    except (TypeError, KeyError):
        out.append("other")
    else:
        out.append("else")
    finally:
        out.append("finally")
    return out


def try_nested(x):
    log = []
    try:
        try:
            1 / x
        except ZeroDivisionError:
            log.append("zde")
            raise
        finally:
            log.append("inner-finally")
    except ArithmeticError as e:
        log.append(type(e).__name__)
    return log


def raise_from(x):
    try:
        try:
            {}[x]
        except KeyError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as e:
        return str(e), type(e.__cause__).__name__, e.__suppress_context__


def reraise_context(x):
    try:
        try:
            raise ValueError("a")
        except ValueError:
            raise TypeError("b")
    except TypeError as e:
        return type(e.__context__).__name__, str(e.__context__)


def finally_return(x):
    try:
        return x
    finally:
        x = -1


def loop_control(n):
    out = []
    for i in range(n):
        if i == 1:
            continue
        if i == 6:
            break
        out.append(i)
    else:
        out.append("no-break")
    i = 0
    while i < 3:
        i += 1
    else:
        out.append("while-else")
    return out, i


class Ctx:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", et.__name__ if et else None))
        return et is KeyError


def with_blocks(x):
    log = []
    with Ctx(log) as c:
        log.append(c is not None)
    with Ctx(log):
        raise KeyError(x)
    try:
        with Ctx(log):
            raise ValueError(x)
    except ValueError:
        log.append("escaped")
    return log


def match_stmt(v):
    match v:
        case 0:
            return "zero"
        case [x, y]:
            return ("pair", x, y)
        case {"k": val}:
            return ("dict", val)
        case str() as s if len(s) > 2:
            return ("long str", s)
        case Point(x=0, y=yy):
            return ("on y axis", yy)
        case _:
            return "other"


@dataclasses.dataclass
class Point:
    x: int
    y: int

    def norm2(self):
        return self.x * self.x + self.y * self.y


class Base:
    scale = 2

    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v * self.scale

    @property
    def prop(self):
        return self.v + 100

    @classmethod
    def make(cls, v):
        return cls(v)

    @staticmethod
    def helper(a):
        return a * 3


class Child(Base):
    scale = 5

    def get(self):
        return super().get() + 1

    def __repr__(self):
        return "Child(%r)" % self.v


def classes(v):
    c = Child(v)
    b = Base.make(v)
    p = Point(v, v + 1)
    return c.get(), b.get(), c.prop, Child.helper(v), repr(c), p.norm2(), p == Point(v, v + 1), isinstance(c, Base)


class Vec:
    def __init__(self, *xs):
        self.xs = xs

    def __add__(self, o):
        if isinstance(o, Vec):
            return Vec(*(a + b for a, b in zip(self.xs, o.xs)))
        return NotImplemented

    def __radd__(self, o):
        return Vec(*(a + o for a in self.xs))

    def __len__(self):
        return len(self.xs)

    def __getitem__(self, i):
        return self.xs[i]

    def __iter__(self):
        return iter(self.xs)

    def __eq__(self, o):
        return isinstance(o, Vec) and self.xs == o.xs

    def __bool__(self):
        return any(self.xs)


def dunders(a):
    v = Vec(a, 2) + Vec(1, 1)
    w = 10 + Vec(a)
    return v.xs, w.xs, len(v), v[0], list(v), v == Vec(a + 1, 3), bool(Vec(0, 0)), [x for x in v]


def globals_and_builtins(x):
    global COUNTER
    COUNTER += x
    return COUNTER, len(GLOBAL_LIST), math.sqrt(16), abs(-x), min(3, x), divmod(17, 5)


def imports(x):
    import os.path
    from collections import OrderedDict as OD
    return os.path.join("a", str(x)), list(OD([(1, 2)]).items()), collections.Counter("aab")["a"]


def dels(x):
    a = [1, 2, 3]
    del a[0]
    d = {"k": 1, "j": 2}
    del d["k"]
    y = x
    del y
    try:
        return y  # noqa: F821
    except UnboundLocalError as e:
        return a, d, "unbound"


def slicing(s):
    return s[1:], s[:-1], s[::2], s[1:5:2], s[-3:]


def strings(s):
    return s.upper(), s.split(","), "-".join(["a", s]), s.startswith("a"), s * 2, "%s:%d" % (s, 3)


def recursion(n):
    return 1 if n <= 1 else n * recursion(n - 1)


def generator_use(n):
    def gen(k):
        for i in range(k):
            yield i * 2

    return list(gen(n)), sum(gen(n)), next(iter(gen(n)))


def nested_functions(x):
    def outer(a):
        def inner(b):
            return a + b + x

        return inner(a * 2)

    return outer(1), outer(x)


def star_calls(*args, **kwargs):
    def f(a, b=0, *rest, **kw):
        return a, b, rest, sorted(kw)

    return f(*args, **kwargs), f(*args, 9, **{"x": 1})


def set_ops(a):
    s = {1, 2, 3}
    t = {a, 3}
    return s | t, s & t, s - t, s ^ t


def chained_assign(x):
    a = b = c = x
    a += 1
    return a, b, c


def ternary_and_walrus(xs):
    if (n := len(xs)) > 2:
        r = "long"
    else:
        r = "short"
    return n, r, [y for x in xs if (y := x * 2) > 2]


def assert_fail(x):
    assert x > 0, "x must be positive"
    return x


def exception_in_callee(x):
    def boom(v):
        return 1 / v

    try:
        return boom(x)
    except ZeroDivisionError as e:
        return "caught %s" % e


def type_checks(x):
    return isinstance(x, int), issubclass(bool, int), type(x).__name__, callable(len), hasattr(x, "real"), getattr(x, "nope", "dflt")


def loops_over_dict(d):
    out = []
    for k, v in d.items():
        out.append((k, v))
    for k in d:
        out.append(k)
    return out, list(d.values()), [k for k in reversed(list(d))]


def enumerate_zip(a):
    return list(enumerate(a, 1)), list(zip(a, a[1:])), [i * v for i, v in enumerate(a)], dict(zip("abc", a))


def kwonly_errors(x):
    def f(a, *, b):
        return a + b

    try:
        f(1, 2)
    except TypeError as e:
        return "TypeError", str(e)


def bigger_stack(n):
    return [(i, j, k) for i in range(n) for j in range(i) for k in range(j)]


def lambda_sort(pairs):
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


def format_and_repr(x):
    return repr([x, "s", 1.5, None]), str({1: x}), format(x, "05d"), ascii("é")


def mutate_arg(lst):
    lst.append(len(lst))
    lst[0] = "changed"
    return lst


def exception_types(x):
    errors = []
    for thing in ([], {}, None, "s"):
        try:
            thing[5]
        except Exception as e:
            errors.append(type(e).__name__)
    return errors


def early_return_in_loop(xs):
    for x in xs:
        if x > 2:
            return x
    return None


def while_true(n):
    i = 0
    total = 0
    while True:
        i += 1
        if i % 2:
            continue
        total += i
        if i > n:
            break
    return total


def deep_closure(x):
    def a():
        def b():
            def c():
                return x * 2
            return c()
        return b()
    return a()


def class_in_function(x):
    class Local:
        k = x

        def val(self):
            return self.k + 1

    return Local().val(), Local.__name__


def super_with_args(v):
    class A:
        def f(self):
            return "A"

    class B(A):
        def f(self):
            return "B" + super(B, self).f()

    return B().f()


PROGRAMS = [
    (arith, (7, 3), {}),
    (inplace_ops, (5, 7), {}),
    (compare_chain, (1, 2, 3), {}),
    (compare_chain, (3, 3, 1), {}),
    (truthiness, (0, 1, "", "a", [], [0], None, 0.0), {}),
    (containers, (5,), {}),
    (unpacking, ([1, 2, 3, 4],), {}),
    (comprehensions, (6,), {}),
    (comprehension_shadow, ("x",), {}),
    (closures, (3,), {}),
    (closure_from_outside, (4,), {}),
    (default_args, (1,), {"d": 2}),
    (call_kinds, (7,), {}),
    (fstrings, ("name", 3.14159), {}),
    (try_except, (0,), {}),
    (try_except, (3,), {}),
    (try_nested, (0,), {}),
    (try_nested, (2,), {}),
    (raise_from, ("k",), {}),
    (reraise_context, (1,), {}),
    (finally_return, (5,), {}),
    (loop_control, (4,), {}),
    (loop_control, (9,), {}),
    (with_blocks, (1,), {}),
    (match_stmt, (0,), {}),
    (match_stmt, ([1, 2],), {}),
    (match_stmt, ({"k": 9},), {}),
    (match_stmt, ("hello",), {}),
    (match_stmt, (Point(0, 7),), {}),
    (match_stmt, (3.5,), {}),
    (classes, (4,), {}),
    (dunders, (3,), {}),
    (globals_and_builtins, (2,), {}),
    (imports, (1,), {}),
    (dels, (1,), {}),
    (slicing, ("abcdefgh",), {}),
    (strings, ("a,b,c",), {}),
    (recursion, (6,), {}),
    (generator_use, (4,), {}),
    (nested_functions, (3,), {}),
    (star_calls, (1, 2, 3), {"k": 4}),
    (set_ops, (5,), {}),
    (chained_assign, (1,), {}),
    (ternary_and_walrus, ([1, 2, 3],), {}),
    (ternary_and_walrus, ([1],), {}),
    (assert_fail, (1,), {}),
    (assert_fail, (-1,), {}),
    (exception_in_callee, (0,), {}),
    (exception_in_callee, (4,), {}),
    (type_checks, (3,), {}),
    (loops_over_dict, ({"a": 1, "b": 2},), {}),
    (enumerate_zip, ([4, 5, 6],), {}),
    (kwonly_errors, (1,), {}),
    (bigger_stack, (5,), {}),
    (lambda_sort, ([("a", 2), ("b", 3), ("c", 2)],), {}),
    (format_and_repr, (42,), {}),
    (exception_types, (1,), {}),
    (early_return_in_loop, ([1, 2, 3, 4],), {}),
    (early_return_in_loop, ([1],), {}),
    (while_true, (10,), {}),
    (deep_closure, (5,), {}),
    (class_in_function, (3,), {}),
    (super_with_args, (1,), {}),
    (arith, (1, 0), {}),  # ZeroDivisionError
    (default_args, (), {}),  # binding TypeError
]
