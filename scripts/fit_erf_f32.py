"""Fits the two polynomials of the GPU's f32 erf (compiler/codegen/cuda/gmath.c)
and reports their error in units of the last place.

    python3 scripts/fit_erf_f32.py [--ex2-error 1.7e-7]

erf(x) = x + x p(x^2) for |x| < 0.92 (p of degree 6), and 1 - 2^q(t) beyond,
t = min(|x|, 3.92) (q of degree 7). Each is a least-squares fit on Chebyshev
nodes with Lawson's reweighting, which moves it towards the minimax fit: p
in the relative error of erf(x)/x, q in the absolute error of log2(erfc(t))
weighted by erfc(t)/erf(t) (what an error in q does to the result). The
check evaluates both in f32 arithmetic (one rounding per fused multiply-add)
on 62,000 points of [1e-6, 5] against torch's float64 erf; --ex2-error models
ex2.approx's relative error (about 2^-22.5) as a constant bias of that size.
Prints the coefficients, highest degree first, as gmath.c holds them.

Then the one polynomial of 1 + erf(z) (gelu's form, g_one_plus_erf): with
a = |z|, erfc(a) = 2^r(a) for a <= 5 (r of degree 9, fitted in the absolute
error of log2(erfc(a)), which is the relative error of erfc), continued past
5 by r's slope there; 1 + erf(z) is erfc(a) for z < 0 and 2 - erfc(a)
otherwise. The check: its error in f32 ulp for z in [-3, 6], its relative
error for z in [-5, -3) (the result is under 2e-5 there) and its absolute
error below -5 (the continuation; erfc(5) is 1.5e-12),
and how many of 100,000 bf16 inputs x in (-4, 4) get gelu(x) rounded to bf16
other than the exact value rounded.
"""
import argparse

import numpy as np
import torch

CUT, TMAX, DEG_SMALL, DEG_BIG = 0.92, 3.92, 6, 7
ERFC_END, DEG_ERFC = 5.0, 9
f32 = np.float32


def erf(x):
    return torch.erf(torch.tensor(x, dtype=torch.float64)).numpy()


def erfc(x):
    return torch.erfc(torch.tensor(x, dtype=torch.float64)).numpy()


def lawson(xs, f, degree, weight, iters=200):
    a = np.vander(xs, degree + 1, increasing=True)
    w = np.ones_like(xs)
    for _ in range(iters):
        sw = np.sqrt(w) * weight
        c = np.linalg.lstsq(a * sw[:, None], f * sw, rcond=None)[0]
        w = w * np.abs(a @ c - f) * weight
        w /= w.sum()
    return c


def chebyshev_nodes(lo, hi, n=4000):
    return np.cos(np.linspace(0, np.pi, n)) * 0.5 * (hi - lo) + 0.5 * (hi + lo)


def horner(coeffs, x):
    """coeffs lowest degree first, in f32 with one rounding per step."""
    r = f32(coeffs[-1])
    for k in coeffs[-2::-1]:
        r = f32(np.float64(r) * np.float64(x) + np.float64(f32(k)))
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ex2-error", type=float, default=0.0)
    a = ap.parse_args()
    xs = chebyshev_nodes(1e-4, CUT)
    p = lawson(xs * xs, erf(xs) / xs - 1, DEG_SMALL, np.ones_like(xs))
    ts = chebyshev_nodes(CUT - 0.01, TMAX + 0.01)
    q = lawson(ts, np.log2(erfc(ts)), DEG_BIG, erfc(ts) / erf(ts))

    def erf32(x):
        ax = abs(x)
        if ax < CUT:
            return f32(np.float64(horner(p, f32(x * x))) * np.float64(x) + np.float64(x))
        tail = f32(2.0 ** np.float64(horner(q, min(ax, f32(TMAX)))) * (1 + a.ex2_error))
        return np.copysign(f32(1) - tail, x)

    pts = np.concatenate([np.geomspace(1e-6, 0.05, 2000), np.linspace(0.05, 5, 60000)]).astype(f32)
    got = np.array([erf32(x) for x in pts], dtype=np.float64)
    want = erf(pts.astype(np.float64))
    err = np.abs(got - want) / np.spacing(np.abs(want).astype(f32)).astype(np.float64)
    i = int(np.argmax(err))
    print("max error %.3f ulp at x = %.6g" % (err[i], pts[i]))
    print("P (x^2, highest first):", ", ".join("%.9g" % f32(c) for c in p[::-1]))
    print("Q (t, highest first):", ", ".join("%.9g" % f32(c) for c in q[::-1]))
    fit_one_plus_erf(a.ex2_error)


def fit_one_plus_erf(ex2_error):
    ts = chebyshev_nodes(0.0, ERFC_END)
    r = lawson(ts, np.log2(erfc(ts)), DEG_ERFC, np.ones_like(ts))
    # the slope of log2(erfc(a)) at the end of the fit: -2/sqrt(pi) e^-a^2 / erfc(a) / ln 2
    end = np.array([ERFC_END])
    slope = float((-2 / np.sqrt(np.pi) * np.exp(-end * end) / erfc(end) / np.log(2))[0])

    def one_plus_erf32(z):
        ax = f32(abs(z))
        ac = min(ax, f32(ERFC_END))
        q = f32(np.float64(f32(ax - ac)) * slope + np.float64(horner(r, ac)))
        e = f32(2.0 ** np.float64(q) * (1 + ex2_error))
        return e if z < 0 else f32(f32(2) - e)

    zs = np.linspace(-6, 6, 60001).astype(f32)
    got = np.array([one_plus_erf32(z) for z in zs], dtype=np.float64)
    want = erfc(-zs.astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(want.astype(f32)).astype(np.float64)
    upper, tail = zs >= -3, (zs < -3) & (zs >= -ERFC_END)
    print("1 + erf: max error %.1f ulp for z >= -3, relative %.2e for -5 <= z < -3, "
          "absolute %.2e below" % (ulp[upper].max(), (np.abs(got - want) / want)[tail].max(),
                                   np.abs(got - want)[zs < -ERFC_END].max()))
    xs = torch.linspace(-4, 4, 100000, dtype=torch.float64).to(torch.bfloat16).double().numpy()
    gelu = np.array([f32(f32(x * 0.5) * one_plus_erf32(f32(f32(x) * f32(0.70710678118654757))))
                     for x in xs])
    bf = lambda v: torch.tensor(v, dtype=torch.float64).to(torch.bfloat16)
    exact = bf(xs * 0.5 * erfc(-xs / np.sqrt(2)))
    print("gelu in bf16: %d of %d inputs rounded otherwise than the exact value" % (
        int((bf(gelu) != exact).sum()), len(xs)))
    print("R (a, highest first):", ", ".join("%.9g" % f32(c) for c in r[::-1]))
    print("slope past %g: %.9g" % (ERFC_END, slope))


if __name__ == "__main__":
    main()
