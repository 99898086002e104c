/* Cache-blocked GEMM for the C externs.
 *
 * The classic three-level blocking: B is packed KC x NC into panels NR
 * columns wide, A is packed MC x KC into panels MR rows tall, and a register
 * micro-kernel multiplies one A panel by one B panel into an MR x NR tile of
 * C held in vector registers. Packing reads any strides, so transposed and
 * broadcast operands cost nothing extra. The micro-kernel is written with
 * GCC vector extensions and compiled for AVX-512, AVX2+FMA and baseline x86
 * (target_clones on the x86-64-v4 and -v3 ISA levels), picked at load time
 * for the running CPU. Threads (OpenMP)
 * take one slab of C each (rows or columns, whichever is longer).
 */
#include "runtime/rt.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

enum { MC = 96, KC = 256, NC = 2048 };

/* The packed panels of a serial GEMM of N columns, K deep, in tiles of
 * mr x nr elements of elem bytes: A's MC rows (tiles rounded up) by KC, B's
 * KC by NC columns, each no deeper or wider than the product is. */
static void pack_bytes(int64_t N, int64_t K, size_t elem, int64_t mr, int64_t nr, size_t *a,
                       size_t *b)
{
    int64_t kc = K < KC ? K : KC, nc = N < NC ? N : NC;
    nc = (nc + nr - 1) / nr * nr;
    *a = elem * (size_t)((MC + mr) * kc);
    *b = elem * (size_t)(kc * (nc + nr));
}

/* ---- f32: 6 x 32 tiles ------------------------------------------------------------ */

/* Twelve 16-wide accumulators: enough independent FMA chains to cover the
 * FMA latency on two ports (AVX-512); on AVX2 the compiler spills some. */
enum { SMR = 6, SNR = 32 };
typedef float v16f __attribute__((vector_size(64), aligned(4)));

CLONES static void skernel(int64_t kc, const float *a, const float *b, float *c, int64_t ldc)
{
    v16f l0 = {0}, l1 = {0}, l2 = {0}, l3 = {0}, l4 = {0}, l5 = {0};
    v16f h0 = {0}, h1 = {0}, h2 = {0}, h3 = {0}, h4 = {0}, h5 = {0};
    for (int64_t k = 0; k < kc; k++) {
        v16f bl, bh;
        memcpy(&bl, b + k * SNR, sizeof bl);
        memcpy(&bh, b + k * SNR + 16, sizeof bh);
        const float *ak = a + k * SMR;
        l0 += ak[0] * bl, h0 += ak[0] * bh;
        l1 += ak[1] * bl, h1 += ak[1] * bh;
        l2 += ak[2] * bl, h2 += ak[2] * bh;
        l3 += ak[3] * bl, h3 += ak[3] * bh;
        l4 += ak[4] * bl, h4 += ak[4] * bh;
        l5 += ak[5] * bl, h5 += ak[5] * bh;
    }
    v16f *lo[SMR] = {&l0, &l1, &l2, &l3, &l4, &l5}, *hi[SMR] = {&h0, &h1, &h2, &h3, &h4, &h5};
    for (int i = 0; i < SMR; i++) {
        v16f cur;
        memcpy(&cur, c + i * ldc, sizeof cur);
        cur += *lo[i];
        memcpy(c + i * ldc, &cur, sizeof cur);
        memcpy(&cur, c + i * ldc + 16, sizeof cur);
        cur += *hi[i];
        memcpy(c + i * ldc + 16, &cur, sizeof cur);
    }
}

/* Packing walks the operand along its smaller stride (a transposed weight
 * is read row by row, not column by column). */
static void spack_a(int64_t mc, int64_t kc, const float *A, int64_t sam, int64_t sak, float *out)
{
    for (int64_t i0 = 0; i0 < mc; i0 += SMR) {
        float *panel = out + i0 * kc;
        int64_t mr = mc - i0 < SMR ? mc - i0 : SMR;
        if (sak <= sam) {
            for (int64_t i = 0; i < SMR; i++)
                for (int64_t k = 0; k < kc; k++)
                    panel[k * SMR + i] = i < mr ? A[(i0 + i) * sam + k * sak] : 0.0f;
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = 0; i < SMR; i++)
                    panel[k * SMR + i] = i < mr ? A[(i0 + i) * sam + k * sak] : 0.0f;
        }
    }
}

static void spack_b(int64_t kc, int64_t nc, const float *B, int64_t sbk, int64_t sbn, float *out)
{
    for (int64_t j0 = 0; j0 < nc; j0 += SNR) {
        float *panel = out + j0 * kc;
        int64_t nr = nc - j0 < SNR ? nc - j0 : SNR;
        if (sbn == 1 && nr == SNR) { /* rows of the panel are contiguous in B */
            for (int64_t k = 0; k < kc; k++)
                memcpy(panel + k * SNR, B + k * sbk + j0, sizeof(float) * SNR);
        } else if (sbk < sbn) {
            for (int64_t j = 0; j < SNR; j++)
                for (int64_t k = 0; k < kc; k++)
                    panel[k * SNR + j] = j < nr ? B[k * sbk + (j0 + j) * sbn] : 0.0f;
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = 0; j < SNR; j++)
                    panel[k * SNR + j] = j < nr ? B[k * sbk + (j0 + j) * sbn] : 0.0f;
        }
    }
}

/* One MC x NC block of C from packed A (this thread's) and packed B. */
static void sblock(int64_t mc, int64_t nc, int64_t kc, const float *pa, const float *pb, float *C,
                   int64_t scm, int64_t scn)
{
    float tile[SMR * SNR];
    for (int64_t j0 = 0; j0 < nc; j0 += SNR)
        for (int64_t i0 = 0; i0 < mc; i0 += SMR) {
            int64_t mr = mc - i0 < SMR ? mc - i0 : SMR, nr = nc - j0 < SNR ? nc - j0 : SNR;
            if (mr == SMR && nr == SNR && scn == 1) { /* a whole tile: straight into C */
                skernel(kc, pa + i0 * kc, pb + j0 * kc, C + i0 * scm + j0, scm);
                continue;
            }
            memset(tile, 0, sizeof tile);
            skernel(kc, pa + i0 * kc, pb + j0 * kc, tile, SNR);
            for (int64_t i = 0; i < mr; i++)
                for (int64_t j = 0; j < nr; j++)
                    C[(i0 + i) * scm + (j0 + j) * scn] += tile[i * SNR + j];
        }
}

static void sgemm_serial(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak,
                         const float *B, int64_t sbk, int64_t sbn, float *C, int64_t scm,
                         int64_t scn, bool accumulate)
{
    if (!accumulate)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * scm + j * scn] = 0;
    if (M == 0 || N == 0 || K == 0)
        return;
    size_t a_bytes, b_bytes;
    pack_bytes(N, K, sizeof(float), SMR, SNR, &a_bytes, &b_bytes);
    float *pb = ptc_scratch(PTC_SCRATCH_PACK_B, b_bytes);
    float *pa = ptc_scratch(PTC_SCRATCH_PACK_A, a_bytes);
    int64_t nblocks = (M + MC - 1) / MC;
    for (int64_t jc = 0; jc < N; jc += NC) {
        int64_t nc = N - jc < NC ? N - jc : NC;
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = K - pc < KC ? K - pc : KC;
            spack_b(kc, nc, B + pc * sbk + jc * sbn, sbk, sbn, pb);
            for (int64_t ib = 0; ib < nblocks; ib++) {
                int64_t ic = ib * MC, mc = M - ic < MC ? M - ic : MC;
                spack_a(mc, kc, A + ic * sam + pc * sak, sam, sak, pa);
                sblock(mc, nc, kc, pa, pb, C + ic * scm + jc * scn, scm, scn);
            }
        }
    }
}

/* ---- f64: 6 x 8 tiles ---------------------------------------------------------------- */

enum { DMR = 6, DNR = 16 };
typedef double v8d __attribute__((vector_size(64), aligned(8)));

CLONES static void dkernel(int64_t kc, const double *a, const double *b, double *c, int64_t ldc)
{
    v8d lo[DMR], hi[DMR];
    memset(lo, 0, sizeof lo);
    memset(hi, 0, sizeof hi);
    for (int64_t k = 0; k < kc; k++) {
        v8d bl, bh;
        memcpy(&bl, b + k * DNR, sizeof bl);
        memcpy(&bh, b + k * DNR + 8, sizeof bh);
        for (int i = 0; i < DMR; i++) {
            lo[i] += a[k * DMR + i] * bl;
            hi[i] += a[k * DMR + i] * bh;
        }
    }
    for (int i = 0; i < DMR; i++) {
        v8d cur;
        memcpy(&cur, c + i * ldc, sizeof cur);
        cur += lo[i];
        memcpy(c + i * ldc, &cur, sizeof cur);
        memcpy(&cur, c + i * ldc + 8, sizeof cur);
        cur += hi[i];
        memcpy(c + i * ldc + 8, &cur, sizeof cur);
    }
}

static void dgemm_serial(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak,
                         const double *B, int64_t sbk, int64_t sbn, double *C, int64_t scm,
                         int64_t scn, bool accumulate)
{
    if (!accumulate)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * scm + j * scn] = 0;
    if (M == 0 || N == 0 || K == 0)
        return;
    size_t a_bytes, b_bytes;
    pack_bytes(N, K, sizeof(double), DMR, DNR, &a_bytes, &b_bytes);
    double *pb = ptc_scratch(PTC_SCRATCH_PACK_B, b_bytes);
    double *pa = ptc_scratch(PTC_SCRATCH_PACK_A, a_bytes);
    int64_t nblocks = (M + MC - 1) / MC;
    for (int64_t jc = 0; jc < N; jc += NC) {
        int64_t nc = N - jc < NC ? N - jc : NC;
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = K - pc < KC ? K - pc : KC;
            for (int64_t j0 = 0; j0 < nc; j0 += DNR)
                for (int64_t k = 0; k < kc; k++)
                    for (int64_t j = 0; j < DNR; j++)
                        pb[j0 * kc + k * DNR + j] =
                            j0 + j < nc ? B[(pc + k) * sbk + (jc + j0 + j) * sbn] : 0.0;
            {
                double tile[DMR * DNR];
                for (int64_t ib = 0; ib < nblocks; ib++) {
                    int64_t ic = ib * MC, mc = M - ic < MC ? M - ic : MC;
                    double *o = pa;
                    for (int64_t i0 = 0; i0 < mc; i0 += DMR)
                        for (int64_t k = 0; k < kc; k++)
                            for (int64_t i = 0; i < DMR; i++)
                                *o++ = i0 + i < mc ? A[(ic + i0 + i) * sam + (pc + k) * sak] : 0.0;
                    for (int64_t j0 = 0; j0 < nc; j0 += DNR)
                        for (int64_t i0 = 0; i0 < mc; i0 += DMR) {
                            int64_t mr = mc - i0 < DMR ? mc - i0 : DMR, nr = nc - j0 < DNR ? nc - j0 : DNR;
                            memset(tile, 0, sizeof tile);
                            dkernel(kc, pa + i0 * kc, pb + j0 * kc, tile, DNR);
                            for (int64_t i = 0; i < mr; i++)
                                for (int64_t j = 0; j < nr; j++)
                                    C[(ic + i0 + i) * scm + (jc + j0 + j) * scn] += tile[i * DNR + j];
                        }
                }
            }
        }
    }
}

/* ---- threads ---------------------------------------------------------------------- */

/* The threads of a GEMM: the team for a product worth waking it for, else
 * the calling thread alone. */
static int gemm_threads(int64_t M, int64_t N, int64_t K)
{
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    return M * N * K < ((int64_t)1 << 23) ? 1 : nt;
}

void ptc_gemm_scratch(int64_t M, int64_t N, int64_t K, bool f64, bool in_team,
                      ptc_scratch_need *need)
{
    int nt = in_team ? 1 : gemm_threads(M, N, K);
    int64_t slab = N; /* the columns of a thread's serial GEMM (PARALLEL_GEMM) */
    if (nt > 1 && M < N)
        slab = ((N + SNR - 1) / SNR + nt - 1) / nt * SNR;
    size_t a, b;
    if (f64)
        pack_bytes(slab, K, sizeof(double), DMR, DNR, &a, &b);
    else
        pack_bytes(slab, K, sizeof(float), SMR, SNR, &a, &b);
    ptc_scratch_need_at_least(need, in_team || nt > 1, PTC_SCRATCH_PACK_A, a);
    ptc_scratch_need_at_least(need, in_team || nt > 1, PTC_SCRATCH_PACK_B, b);
}

/* Splits C into one slab per thread, along the longer of M and N, each slab a
 * serial GEMM with its own packed panels. */
#define PARALLEL_GEMM(T, serial)                                                          \
    do {                                                                                  \
        int nt = gemm_threads(M, N, K);                                                   \
        if (nt <= 1) {                                                                    \
            serial(M, N, K, A, sam, sak, B, sbk, sbn, C, scm, scn, accumulate);           \
            return;                                                                       \
        }                                                                                 \
        bool by_rows = M >= N;                                                            \
        int64_t len = by_rows ? M : N;                                                    \
        int64_t unit = by_rows ? SMR : SNR;                                               \
        _Pragma("omp parallel num_threads(nt)")                                           \
        {                                                                                 \
            int t = omp_get_thread_num(), n = omp_get_num_threads();                      \
            int64_t units = (len + unit - 1) / unit;                                      \
            int64_t lo = units * t / n * unit, hi = units * (t + 1) / n * unit;           \
            hi = hi < len ? hi : len;                                                     \
            if (lo < hi) {                                                                \
                if (by_rows)                                                              \
                    serial(hi - lo, N, K, A + lo * sam, sam, sak, B, sbk, sbn,            \
                           C + lo * scm, scm, scn, accumulate);                           \
                else                                                                      \
                    serial(M, hi - lo, K, A, sam, sak, B + lo * sbn, sbk, sbn,            \
                           C + lo * scn, scm, scn, accumulate);                           \
            }                                                                             \
        }                                                                                 \
    } while (0)

void ptc_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak,
               const float *B, int64_t sbk, int64_t sbn, float *C, int64_t scm, int64_t scn,
               bool accumulate)
{
    PARALLEL_GEMM(float, sgemm_serial);
}

void ptc_dgemm(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak,
               const double *B, int64_t sbk, int64_t sbn, double *C, int64_t scm, int64_t scn,
               bool accumulate)
{
    PARALLEL_GEMM(double, dgemm_serial);
}
