/* How a kernel runs on the GPU, chosen from its sizes.
 *
 * One outer iteration of a kernel is run by a team of T threads (a power of
 * two). Flat kernels (only pointwise groups without inner loops) use T = 1
 * and, when the innermost outer range allows, a vectorised form in which a
 * thread handles W consecutive elements with 16-byte loads and stores.
 * Kernels with inner loops or reductions pick T from the work of one outer
 * iteration: a thread per iteration when that work is tiny or when the
 * memory accesses are contiguous across outer iterations rather than inside
 * them (a reduction over a strided dimension: threads then read consecutive
 * addresses), a warp or part of one for ordinary rows (softmax, layer_norm:
 * the reduction is warp shuffles only), and a whole block for long rows when
 * there are too few rows to fill the GPU; a kernel of pointwise groups only
 * (a per-row factor, then a pass over the row: a BatchNorm fold's weights)
 * with too few rows grows its team past a warp until the teams fill a wave.
 * A reduction group splits its team into Tk x Tr: Tr threads share one
 * reduction, Tk kept elements run side by side.
 *
 * Kernel-local buffers live in registers / local memory for T = 1 (flat
 * kernels forward them and never store them), in shared memory for teams
 * when a block's share fits, and otherwise in a global scratch area (part of
 * the run's arena), one slot per resident team. Index arithmetic is 32-bit
 * when the kernel's sizes are below 2^30 elements (ptc_cuda_fits_i32). A
 * kernel over symbolic sizes is planned with 32-bit indices too, unless its
 * static sizes already rule them out; every call checks the rule with its
 * own sizes, and one that fails it runs the kernel's 64-bit variant, planned
 * with wide_index and generated when a call first needs it (runtime).
 *
 * Sizes that are symbolic are only known at run time. Where the team size
 * depends on them (a softmax over a row of s0 elements: a warp for short
 * rows, a block for long ones), the kernel is planned in a few forms, one
 * team size each, found by planning with every symbol short, medium and
 * long (SYM_SCALES); each form is an entry of the kernel's module and the
 * runtime picks the one nearest to the team the call's sizes want
 * (ptc_cuda_pick). A flat kernel's vectorised form needs its innermost outer
 * range divisible by W, which a symbolic range shows when W divides every
 * term (768*s0). A kernel that column mode takes (below) gets a column-mode
 * form besides, which calls whose sizes it fits (ptc_cuda_col_fits) run.
 *
 * Column mode (a split reduction) takes kernels that reduce over a strided
 * dimension: every group runs once per outer iteration (no inner ranges),
 * and every load of its reductions is either contiguous in the last outer
 * variable or the same for every column (a LayerNorm's per-row statistics).
 * Such a kernel has few outer iterations (768 columns of a bias gradient)
 * and long ones (2048 rows). A block takes C consecutive columns x R row
 * slices: the C threads of a slice read consecutive addresses (C elements
 * fill at least a 32-byte sector), each thread sums every R-th row of its
 * column, and the R partial states of a column meet in a tree through
 * shared memory, in an order fixed by the plan, so that results are the
 * same run to run (no atomics). Slice 0 then stores the results and runs the
 * epilogue (the conversion or pointwise work after the sums). Over static
 * sizes it is the kernel's plan where it fits; over symbolic ones a form.
 *
 * Reductions outside row and column mode get a vectorised form too where
 * their loads along the innermost reduced range are contiguous and aligned
 * (plan_red_vec): a thread loads W consecutive elements of a row as one
 * 16-byte vector and folds them into W-lane states, so that a block keeps
 * four times the bytes in flight of the scalar form's 2-byte loads of bf16
 * (BatchNorm statistics: 51.4 us in ptc against 30.2 in Inductor on an
 * H200 before it, the kernel bound by the bytes in flight of an SM).
 *
 * Split rows: a kernel over static sizes whose team is a whole block (long
 * rows) and whose rows are too few to fill one wave of blocks (a resnet
 * BatchNorm's 64 channels of 32*112*112 elements: 64 blocks on 132 SMs)
 * gives each row S blocks, as many as fill the wave (plan_split). Only
 * kernels whose first group reduces whole rows and whose later groups are
 * per-row pointwise work (the epilogue) split. Block j of row o folds
 * elements j*L .. (j+1)*L-1 (eight loads in flight a thread),
 * its threads' states meet as in any block, and thread 0 writes the block's
 * partial state to the scratch area and counts the block done on the row's
 * counter (a fence, then an atomic add). The block that counts the row's
 * last resets the counter for the next launch and combines the S partial
 * states, thread t taking partial t, through the block's usual shuffle and
 * shared-memory tree: an order fixed by the plan, whichever block came last,
 * so that results are the same run to run (no float atomics). It then
 * stores the row's results and runs the epilogue. The counters sit at the
 * start of the scratch area (PTC_CUDA_SPLIT_COUNTERS), zeroed by the runtime
 * once a run; a kernel that splits never shares a launch. Row-mode kernels
 * (whose rows are shorter), symbolic sizes and Welford reductions keep their
 * forms: on an H200 BatchNorm statistics (var_mean of bf16 [32,C,H,W] over
 * N,H,W) were as fast or up to twice as fast unsplit (C=64 at 56x56: 39.4
 * us split, 19.3 unsplit; C=128: 46.7, 23.5; C=64 at 112x112: 68.0, 70.0),
 * where sums of the same rows gained (bench/gpu/split_rows.py).
 *
 * A kernel whose every store is to an f16 / bf16 buffer evaluates gelu's
 * 1 + erf(z) as erfc(-z) (g_one_plus_erf): one polynomial and one ex2
 * instead of erf's two and a select, 3e-6 relative error where a bf16 ulp is
 * 4e-3; f32 kernels keep erf's 1.5 ulp.
 *
 * For tests, PTC_CUDA_TEAM=N forces the team size of non-flat kernels and
 * PTC_CUDA_SMEM_LIMIT=BYTES the shared memory a block may use for locals;
 * for timing, PTC_CUDA_ERFC=0 turns the erfc form off and =2 gives it to
 * every kernel, PTC_CUDA_PACKED_ADD=0 turns off bf16 sums in pairs
 * (cuda/body.c's half_add), PTC_CUDA_ROW_MIN_BLOCKS=N has row-mode kernels ask
 * ptxas for registers that let N blocks share an SM (.minnctapersm: more
 * rows in flight, at the price of spills where the row does not fit), and
 * PTC_CUDA_SPLIT_COLUMNS=0 turns column mode off, PTC_CUDA_SPLIT_ROWS=0
 * split rows, PTC_CUDA_RED_VECTOR=0 reductions' vector loads
 * (plan_red_vec; PTC_CUDA_RED_VECTOR_UNROLL=N sets RED_VEC_UNROLL), and
 * PTC_CUDA_COLUMN_TILE=C
 * (a power of two up to 32) makes its tiles C columns wide (narrower tiles:
 * more blocks, each reading part of a sector), and PTC_CUDA_WARPS_LOOP=1
 * combines a block's warps' reduction states in a loop (the same merges in
 * the same order, in a third of the code for the driver's JIT: a block of
 * 1024 threads unrolls 31 Welford merges), and PTC_CUDA_ROW_AHEAD=1 has a
 * team of a 16-bit row kernel load its next row while it works on the
 * current one (=2: rows of any type; kernel.c's emit_rows_ahead), giving
 * each team PTC_CUDA_ROW_AHEAD_ROWS rows at least (4), and
 * PTC_CUDA_ROW_FORWARD=1 keeps a row kernel's row-long locals (softmax's
 * exponentials) in registers from their store to the later groups' loads
 * (cuda/body.c's row_forwarded: softmax over 1024 bf16, 8 shared loads of 16
 * bytes a lane fewer, 63 -> 64 registers; over 3000 f32, 60 -> 72). All are
 * part of the plan, hence of the cache key.
 */
#include "codegen/cuda/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The numbers of the plan. Hardware limits say so; the rest are thresholds
 * chosen by hand when the backend was written (on an H100), not derived.
 *
 * SMEM_LIMIT: shared memory a block may use without opting in with
 *   cuFuncSetAttribute (48 KiB on every GPU since Kepler).
 * LARGE: sizes at or above 2^30 elements get 64-bit index arithmetic; below,
 *   32-bit offsets keep a factor of 2 of headroom for sums of terms
 *   (ptc_cuda_fits_i32).
 * SYM_HINT: the size a symbolic dimension is assumed to have when choosing
 *   the default form; SYM_SCALES: the sizes that find the other forms (a
 *   tiny, a short and a long row).
 * FLAT_BIG_BLOCK: flat kernels take FLAT_BLOCK_BIG-thread blocks (256) from
 *   64 Ki threads' work on (about two blocks per SM of an H100), FLAT_BLOCK
 *   (128) below.
 * TINY_WORK: a thread per outer iteration when one iteration's work is at most
 *   this (pooling windows).
 * MANY_OUTER: contiguous-across-outer access with at least this many outer
 *   iterations (128 blocks of 128 threads: about one per SM) runs a thread each.
 * OUTER_PER_SM: at least this many outer iterations per SM fill the GPU with
 *   warp-sized teams; fewer, and BLOCK_WORK of work per iteration, get a team
 *   of a block to share the row. A warp-sized team gives each thread at least
 *   WARP_TEAM_WORK elements of the iteration, a block team BLOCK_TEAM_WORK
 *   (enough work per thread to hide a load's latency; chosen by hand).
 * PRIVATE_BYTES: locals of a thread-per-iteration kernel stay in registers /
 *   local memory up to this size, else go to global scratch.
 * TEAM_BLOCK: threads per block for teams of up to a warp.
 * LOCAL_ALIGN: each kernel-local buffer of a team starts at a multiple of
 *   this many bytes, the widest (16-byte vector) access's alignment.
 * ROW_MAX, ROW_TEAM, ROW_CHUNKS, ROW_MAX_CHUNKS: row mode takes rows of at most
 *   ROW_MAX elements, grows the team (to ROW_TEAM) until a thread has at most
 *   ROW_CHUNKS vector chunks, and gives up above ROW_MAX_CHUNKS (registers).
 *   ROW_AHEAD_ROWS: rows each team is given at least where it loads its next
 *   row ahead (PTC_CUDA_ROW_AHEAD; PTC_CUDA_ROW_AHEAD_ROWS sets it): the
 *   loads of three rows of four overlap work (chosen by hand, not timed:
 *   fewer rows a team leave more of them unoverlapped, more rows fewer and
 *   longer blocks, a longer tail).
 * SECTOR: the bytes of one DRAM / L2 transaction; a slice of a column-mode
 *   block reads at least one. COL_ROWS_PER_THREAD: rows each thread of a
 *   column sums at least (its loads in flight); COL_TILES_PER_SM: column
 *   tiles widen to a warp only while at least this many blocks per SM remain.
 * SM_THREADS: the threads one SM holds (sm_80, sm_90); a wave is SM_THREADS /
 *   block blocks per SM. SPLIT_THREAD_WORK: the elements of a row each
 *   thread of a split-rows block folds at least (its loads in flight).
 * RED_VEC_UNROLL: 16-byte vectors a thread of a vectorised reduction loads
 *   an unrolled iteration (split rows, Welford): 64 bytes in flight where
 *   the scalar form has 16 (eight bf16); on an H200, 2 and 8 timed the
 *   same as 4 on BatchNorm statistics and sums (PTC_CUDA_RED_VECTOR_UNROLL
 *   sets it, for timing).
 * SPLIT_VEC_MIN_ROW: the elements a row needs for split rows where the
 *   reduction loads vectors: with 16-byte loads one block keeps a shorter
 *   row's bytes in flight, and splitting it only adds the combine (BatchNorm
 *   backward sums, bf16, on an H200, two runs: [32,64,56,56] 13.5 us split,
 *   7.5 unsplit; [32,128,56,56] 21.5, 15.7; [32,64,112,112] 33.8, 35.3). */
enum {
    SMEM_LIMIT = 48 * 1024,
    LARGE = 1 << 30,
    SYM_HINT = 64,
    FLAT_BIG_BLOCK = 64 * 1024,
    FLAT_BLOCK_BIG = 256,
    FLAT_BLOCK = 128,
    TINY_WORK = 16,
    MANY_OUTER = 16384,
    OUTER_PER_SM = 16,
    BLOCK_WORK = 2048,
    WARP_TEAM_WORK = 4,
    BLOCK_TEAM_WORK = 8,
    PRIVATE_BYTES = 4096,
    TEAM_BLOCK = 256,
    LOCAL_ALIGN = 16,
    ROW_MAX = 1 << 20,
    ROW_TEAM = 512,
    ROW_CHUNKS = 8,
    ROW_MAX_CHUNKS = 16,
    ROW_AHEAD_ROWS = 4,
    SECTOR = 32,
    COL_ROWS_PER_THREAD = 16,
    COL_TILES_PER_SM = 2,
    SM_THREADS = 2048,
    SPLIT_THREAD_WORK = 16,
    RED_VEC_UNROLL = 4,
    SPLIT_VEC_MIN_ROW = 1 << 18,
};
static const double SYM_SCALES[] = {256, 4, 8192}; /* the first gives form 0 */
/* Vectorised accesses move 16 bytes (ld.global.v4.f32), at most MAX_VEC elements. */
enum { VEC_BYTES = 16 };

static int env_int(const char *name, int lo, int hi, int dflt)
{
    static const char *warned[16]; /* the names warned about (literals) */
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (!*end && x >= lo && x <= hi)
        return (int)x;
    for (int i = 0; i < 16; i++) {
        const char *seen = NULL;
        if (__atomic_compare_exchange_n(&warned[i], &seen, name, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            fprintf(stderr, "ptc: warning: %s=%s is not a whole number in [%d, %d]; %d is used\n",
                    name, v, lo, hi, dflt);
            break;
        }
        if (seen == name)
            break;
    }
    return dflt;
}

/* The product of sizes for planning, a symbolic size with each of its
 * symbols assumed to be `scale`: 3072*s0*s1, a collapsed [s0, s1, 3072], is
 * millions of elements (taking the whole expression as one symbol's size
 * planned a GPT-2 MLP's flat kernels with small blocks, its rows as few). */
static double prod_at(const ptc_dim *d, int n, double scale)
{
    double p = 1;
    for (int i = 0; i < n; i++)
        p *= ptc_dim_hint_at(d[i], scale);
    return p;
}

static double prod(const ptc_dim *d, int n)
{
    return prod_at(d, n, SYM_HINT);
}

static int pow2_floor(double x)
{
    int p = 1;
    while (p * 2 <= x && p < MAX_BLOCK)
        p *= 2;
    return p;
}

static bool is_local(const ptc_schedule *s, int buf)
{
    return s->is_local[buf];
}

/* Coefficient of variable v in x is exactly 1, outside of div / mod atoms. */
static bool unit_in(const ptc_ix *x, int v)
{
    bool nested;
    ptc_dim k = ptc_ix_coeff(x, v, &nested);
    return !nested && ptc_dim_is_static(k) && k.value == 1;
}

typedef struct access_info {
    bool outer_contig; /* some non-local access has stride 1 in the last outer var */
    bool inner_contig; /* ... in the last inner or reduction var of its group */
    bool pointwise;    /* no group reduces */
} access_info;

static void scan_offset(const ptc_schedule *s, const ptc_kernel *k, const ptc_kgroup *G, int buf,
                        const ptc_ix *off, access_info *ai)
{
    if (is_local(s, buf))
        return;
    if (k->nouter > 0 && unit_in(off, k->nouter - 1))
        ai->outer_contig = true;
    int last = -1;
    if (G->reduction && G->nred > 0)
        last = k->nouter + G->ninner + G->nred - 1;
    else if (G->ninner > 0)
        last = k->nouter + G->ninner - 1;
    if (last >= 0 && unit_in(off, last))
        ai->inner_contig = true;
}

static void scan_accesses(const ptc_schedule *s, const ptc_kernel *k, access_info *ai)
{
    memset(ai, 0, sizeof *ai);
    ai->pointwise = true;
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        ai->pointwise &= !G->reduction;
        for (int m = 0; m < G->nmembers; m++) {
            const ptc_kmember *mem = &G->members[m];
            const ptc_lnode *n = s->prog->nodes[mem->node];
            for (int i = 0; i < mem->body.n; i++)
                if (mem->body.e[i].op == PTC_L_LOAD)
                    scan_offset(s, k, G, mem->body.e[i].buf, mem->body.e[i].idx[0], ai);
            for (int o = 0; o < 2; o++)
                if (mem->store[o] && n->out[o] >= 0)
                    scan_offset(s, k, G, n->out[o], mem->store[o], ai);
        }
    }
}

/* Elements per thread of a flat kernel's vectorised form (1: none). */
/* Does w divide the range for every value of its symbols? */
static bool divides(ptc_dim range, int w)
{
    if (ptc_dim_is_static(range))
        return range.value % w == 0;
    ptc_arena *tmp = ptc_arena_new();
    ptc_dim q;
    bool ok = ptc_dim_div_exact(tmp, range, ptc_dim_c(w), &q);
    ptc_arena_free(tmp);
    return ok;
}

static int choose_vec(const ptc_schedule *s, const ptc_kernel *k)
{
    if (k->nouter == 0)
        return 1;
    int last = k->nouter - 1, maxsize = 0;
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_kmember *mem = &k->groups[g].members[m];
            const ptc_lnode *n = s->prog->nodes[mem->node];
            for (int i = 0; i < mem->body.n; i++) {
                const ptc_lexpr *e = &mem->body.e[i];
                if (e->op == PTC_L_LOAD && !is_local(s, e->buf) && unit_in(e->idx[0], last)) {
                    int sz = (int)ptc_dtype_size(s->prog->bufs[e->buf]->dtype);
                    maxsize = sz > maxsize ? sz : maxsize;
                }
            }
            if (mem->store[0] && !is_local(s, n->out[0]) && unit_in(mem->store[0], last)) {
                int sz = (int)ptc_dtype_size(s->prog->bufs[n->out[0]]->dtype);
                maxsize = sz > maxsize ? sz : maxsize;
            }
        }
    if (maxsize == 0)
        return 1;
    int w = VEC_BYTES / maxsize;
    w = w > MAX_VEC ? MAX_VEC : w;
    while (w > 1 && !divides(k->outer[last], w))
        w /= 2;
    return w;
}

bool ptc_cuda_fits_i32(const ptc_lprog *prog, const ptc_kernel *k, ptc_cuda_size_fn value,
                       void *ctx)
{
    double outer = 1;
    for (int d = 0; d < k->nouter; d++)
        outer *= value(ctx, k->outer[d]);
    if (outer >= LARGE)
        return false;
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        double work = 1;
        for (int d = 0; d < G->ninner; d++)
            work *= value(ctx, G->inner[d]);
        for (int d = 0; G->reduction && d < G->nred; d++)
            work *= value(ctx, G->red[d]);
        if (work >= LARGE)
            return false;
    }
    for (int i = 0; i < k->nparams; i++)
        if (value(ctx, k->params[i]) >= LARGE)
            return false;
    for (int i = 0; i < k->nargs; i++) {
        const ptc_lbuf *b = prog->bufs[k->args[i]];
        double n = 1;
        for (int d = 0; d < b->ndim; d++)
            n *= value(ctx, b->shape[d]);
        if (b->padded) /* static: whole padded rows */
            n = (double)b->shape[0].value * (double)b->strides[0].value;
        if (n >= LARGE)
            return false;
    }
    return true;
}

/* A size at planning time: a static one's value, a symbolic one's least
 * (each symbol 1), so that a symbolic kernel gets 32-bit indices unless a
 * static size already rules them out, and its calls check the rule again. */
static double least_size(void *ctx, ptc_dim d)
{
    (void)ctx;
    return ptc_dim_is_static(d) ? (double)d.value : ptc_dim_hint_at(d, 1);
}

static bool fits_i32(const ptc_schedule *s, const ptc_kernel *k)
{
    return ptc_cuda_fits_i32(s->prog, k, least_size, NULL);
}

static int64_t local_bytes(const ptc_schedule *s, const ptc_kernel *k, int i)
{
    const ptc_lbuf *lb = s->prog->bufs[k->locals[i]];
    return (int64_t)ptc_dtype_size(lb->dtype) * ptc_kernel_local_elems(s->prog, k, i);
}

static int choose_team(const access_info *ai, double outer, double work, int sms)
{
    if (work <= TINY_WORK) /* pooling windows: a thread per output, the window in a loop */
        return 1;
    if (ai->outer_contig && !ai->inner_contig && outer >= MANY_OUTER)
        return 1;
    /* up to a warp, each thread with WARP_TEAM_WORK or more elements */
    int warp_team = pow2_floor(work / WARP_TEAM_WORK < WARP ? work / WARP_TEAM_WORK : WARP);
    if (outer >= (double)OUTER_PER_SM * sms)
        return warp_team;
    if (work < BLOCK_WORK) {
        /* too few iterations to fill the GPU with warps: a pointwise team
           grows, each thread keeping WARP_TEAM_WORK elements, until the
           teams fill a wave (a BatchNorm fold's weight kernel, 256 rows of
           1024 scaled by a per-row factor: 14 us a call with warps) */
        int t = warp_team;
        while (ai->pointwise && t >= WARP && t < MAX_BLOCK && work / (2 * t) >= WARP_TEAM_WORK &&
               outer * t < (double)sms * SM_THREADS)
            t *= 2;
        return t;
    }
    int t = pow2_floor(work / BLOCK_TEAM_WORK);
    return t < WARP ? WARP : t;
}

/* The ranges one group iterates: a pointwise group its inner ranges, a
 * reduction group without kept ranges its reduction ranges (NULL otherwise). */
static const ptc_dim *group_ranges(const ptc_kgroup *G, int *n)
{
    if (G->reduction) {
        *n = G->nred;
        return G->ninner == 0 ? G->red : NULL;
    }
    *n = G->ninner;
    return G->ninner > 0 ? G->inner : NULL;
}

/* Row mode: every group of the kernel runs over the same static ranges
 * (softmax, layer_norm, log_softmax, RMS norm), read contiguously, so that a
 * team can keep its share of the row in registers: each lane handles J
 * chunks of W consecutive elements, loads of read-only buffers are issued
 * once and reused by every group. Picks W (16-byte accesses where the
 * innermost range allows) and T (J <= 8 where the team can grow). */
static void plan_row(const ptc_schedule *s, const ptc_kernel *k, const access_info *ai, gplan *p)
{
    if (!ai->inner_contig || k->ngroups == 0)
        return;
    int nd = 0;
    const ptc_dim *r0 = group_ranges(&k->groups[0], &nd);
    if (!r0 || nd == 0)
        return;
    int64_t n = 1;
    for (int g = 0; g < k->ngroups; g++) {
        int ng;
        const ptc_dim *r = group_ranges(&k->groups[g], &ng);
        if (!r || ng != nd)
            return;
        for (int d = 0; d < nd; d++)
            if (!ptc_dim_is_static(r[d]) || !ptc_dim_eq(r[d], r0[d]))
                return;
    }
    for (int d = 0; d < nd; d++)
        n *= r0[d].value;
    if (n <= 1 || n > ROW_MAX)
        return;
    /* W from the widest element accessed contiguously in the last group variable */
    int last = k->nouter + nd - 1, maxsize = 0;
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_kmember *mem = &k->groups[g].members[m];
            for (int i = 0; i < mem->body.n; i++) {
                const ptc_lexpr *e = &mem->body.e[i];
                if (e->op == PTC_L_LOAD && !is_local(s, e->buf) && unit_in(e->idx[0], last)) {
                    int sz = (int)ptc_dtype_size(s->prog->bufs[e->buf]->dtype);
                    maxsize = sz > maxsize ? sz : maxsize;
                }
            }
        }
    int w = maxsize ? VEC_BYTES / maxsize : 1;
    w = w > MAX_VEC ? MAX_VEC : w;
    while (w > 1 && r0[nd - 1].value % w)
        w /= 2;
    int64_t nc = n / w;
    /* 16-bit elements come 8 to a chunk: a lane takes at most as many
       elements as a lane of 4-byte ones (widened to f32, they take as many
       registers), so bf16 layer_norm's team is a warp, as f32's, not 16
       lanes of 125 registers each */
    int scale = w > 4 ? w / 4 : 1;
    int t = 1;
    while (t < ROW_TEAM && (nc + t - 1) / t > ROW_CHUNKS / scale)
        t *= 2;
    int64_t j = (nc + t - 1) / t;
    if (j > ROW_MAX_CHUNKS / scale)
        return;
    p->row = true;
    p->row_n = (int)n;
    p->row_ndim = nd;
    p->row_j = (int)j;
    p->vec = w;
    p->team = t;
    p->min_blocks = env_int("PTC_CUDA_ROW_MIN_BLOCKS", 0, 32, 0);
    p->row_forward = env_int("PTC_CUDA_ROW_FORWARD", 0, 1, 0);
    int ahead = env_int("PTC_CUDA_ROW_AHEAD", 0, 2, 0);
    if (ahead == 2 || (ahead == 1 && scale > 1))
        p->row_ahead = env_int("PTC_CUDA_ROW_AHEAD_ROWS", 2, 64, ROW_AHEAD_ROWS);
}

/* The work of one outer iteration: the largest group's. */
static double work_at(const ptc_kernel *k, double scale)
{
    double work = 1;
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        double w = prod_at(G->inner, G->ninner, scale) *
                   (G->reduction ? prod_at(G->red, G->nred, scale) : 1);
        work = w > work ? w : work;
    }
    return work;
}

/* The rest of a team plan once T is chosen: reduction lanes per group,
 * where locals live, threads per block. */
static void plan_team(const ptc_schedule *s, const ptc_kernel *k, int T, gplan *p)
{
    p->team = T;
    int64_t smem_limit = env_int("PTC_CUDA_SMEM_LIMIT", 0, SMEM_LIMIT, SMEM_LIMIT);
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        if (!G->reduction) {
            p->red_lanes[g] = 1;
            continue;
        }
        double red = prod(G->red, G->nred);
        int tr;
        if (G->ninner == 0)
            tr = T;
        else {
            /* lanes of one reduction read consecutive elements only when the
             * reduction variable is the contiguous one */
            access_info gi = {0};
            for (int m = 0; m < G->nmembers; m++)
                for (int i = 0; i < G->members[m].body.n; i++) {
                    const ptc_lexpr *e = &G->members[m].body.e[i];
                    if (e->op == PTC_L_LOAD)
                        scan_offset(s, k, G, e->buf, e->idx[0], &gi);
                }
            tr = gi.inner_contig ? pow2_floor(red < WARP ? red : WARP) : 1;
            if (tr > T)
                tr = T;
        }
        p->red_lanes[g] = tr;
        if (tr > WARP) { /* the warps of one reduction meet in shared memory */
            int64_t need = (int64_t)RED_MEMBER_BYTES * G->nmembers;
            p->smem_red = p->smem_red > need ? p->smem_red : need;
        }
    }
    /* locals */
    int64_t team_bytes = 0;
    for (int i = 0; i < k->nlocal; i++) {
        team_bytes = (team_bytes + LOCAL_ALIGN - 1) & ~(int64_t)(LOCAL_ALIGN - 1);
        p->loc_off[i] = team_bytes;
        team_bytes += local_bytes(s, k, i);
    }
    team_bytes = (team_bytes + LOCAL_ALIGN - 1) & ~(int64_t)(LOCAL_ALIGN - 1);
    int tpb = T > WARP ? 1 : TEAM_BLOCK / T; /* bar.sync teams own their block */
    if (T == 1) {
        bool fits = team_bytes <= PRIVATE_BYTES && smem_limit > 0;
        for (int i = 0; i < k->nlocal; i++)
            p->loc[i] = fits ? LOC_PRIVATE : LOC_SCRATCH;
        if (!fits)
            p->scratch_team = team_bytes;
    } else {
        while (tpb > 1 && tpb * team_bytes + p->smem_red > smem_limit)
            tpb /= 2;
        bool fits = tpb * team_bytes + p->smem_red <= smem_limit || team_bytes == 0;
        for (int i = 0; i < k->nlocal; i++)
            p->loc[i] = fits ? LOC_SHARED : LOC_SCRATCH;
        if (fits) {
            p->smem_team = team_bytes;
        } else {
            p->scratch_team = team_bytes;
            tpb = T > WARP ? 1 : TEAM_BLOCK / T;
        }
    }
    p->block = T * tpb;
}

/* Does group G store buffer buf? */
static bool group_stores(const ptc_schedule *s, const ptc_kgroup *G, int buf)
{
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_lnode *n = s->prog->nodes[G->members[m].node];
        if (n->out[0] == buf || n->out[1] == buf)
            return true;
    }
    return false;
}

/* Does x name the same element for every outer iteration? */
static bool same_for_every_column(const ptc_kernel *k, const ptc_ix *x)
{
    for (int v = 0; v < k->nouter; v++) {
        bool nested;
        ptc_dim coeff = ptc_ix_coeff(x, v, &nested);
        if (nested || !ptc_dim_is_static(coeff) || coeff.value != 0)
            return false;
    }
    return true;
}

/* The 8-byte fields of a reduction state that meet in shared memory. */
static int state_fields(int reduce)
{
    if (reduce == PTC_RED_WELFORD)
        return RED_FIELDS;
    return reduce == PTC_RED_ARGMAX || reduce == PTC_RED_ARGMIN ? 2 : 1;
}

typedef struct column_info {
    int widest;  /* bytes of the widest element read contiguously across columns */
    int members; /* the most reduction members of one group */
    int fields;  /* the most state fields of one member */
} column_info;

/* Does kernel k read columns (column mode, the header says which loads)?
 * A load of a local must be of one its own group stores: the slices of a
 * column do not share locals, each keeps its own. Every thread runs a
 * reduction group's pointwise members, so they may store only locals. */
static bool reads_columns(const ptc_schedule *s, const ptc_kernel *k, column_info *ci)
{
    memset(ci, 0, sizeof *ci);
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        if (G->ninner > 0)
            return false;
        int nred = 0;
        for (int m = 0; G->reduction && m < G->nmembers; m++) {
            const ptc_kmember *mem = &G->members[m];
            const ptc_lnode *n = s->prog->nodes[mem->node];
            if (n->kind == PTC_LN_REDUCTION) {
                nred++;
                int f = state_fields(n->reduce);
                ci->fields = f > ci->fields ? f : ci->fields;
            } else if (!is_local(s, n->out[0])) {
                return false; /* a thread past the last column would store too */
            }
            for (int i = 0; i < mem->body.n; i++) {
                const ptc_lexpr *e = &mem->body.e[i];
                if (e->op != PTC_L_LOAD)
                    continue;
                if (is_local(s, e->buf)) {
                    if (!group_stores(s, G, e->buf))
                        return false;
                } else if (unit_in(e->idx[0], k->nouter - 1)) {
                    int sz = (int)ptc_dtype_size(s->prog->bufs[e->buf]->dtype);
                    ci->widest = sz > ci->widest ? sz : ci->widest;
                } else if (!same_for_every_column(k, e->idx[0])) {
                    return false;
                }
            }
        }
        ci->members = nred > ci->members ? nred : ci->members;
    }
    return ci->widest > 0 && ci->members > 0;
}

bool ptc_cuda_col_fits(double outer, double rows)
{
    return outer < MANY_OUTER && rows >= 2 * COL_ROWS_PER_THREAD;
}

/* Column mode (the header): C columns of at least a sector, widened to a
 * warp while the GPU keeps COL_TILES_PER_SM blocks an SM, and R slices that
 * leave each thread COL_ROWS_PER_THREAD rows or more, within a block and
 * the shared memory the partial states take; columns of few rows widen C
 * towards a warp until the block has FLAT_BLOCK threads (blocks of 32
 * threads would fill an SM's block slots at a quarter of its threads). */
/* A size variable (PTC_CUDA_TEAM, PTC_CUDA_COLUMN_TILE) set to a value that
 * is not a power of two: said once per process (*warned), the planned
 * size (`used`, this kernel's) applies. */
static void warn_not_power_of_two(const char *name, int value, int used, int *warned)
{
    if (__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED) == 0)
        fprintf(stderr,
                "ptc: warning: %s=%d is not a power of two; the planned size (%d here) is "
                "used\n",
                name, value, used);
}

static bool plan_col(const ptc_schedule *s, const ptc_kernel *k, int sms, gplan *p)
{
    column_info ci;
    if (k->nouter == 0 || !env_int("PTC_CUDA_SPLIT_COLUMNS", 0, 1, 1) || !reads_columns(s, k, &ci))
        return false;
    double outer = prod(k->outer, k->nouter), rows = work_at(k, SYM_HINT);
    if (!k->nparams && !ptc_cuda_col_fits(outer, rows))
        return false;
    int64_t private_bytes = 0;
    for (int i = 0; i < k->nlocal; i++)
        private_bytes += local_bytes(s, k, i);
    if (private_bytes > PRIVATE_BYTES)
        return false;
    int forced = env_int("PTC_CUDA_COLUMN_TILE", 0, WARP, 0), cols = 1;
    while (cols * ci.widest < SECTOR)
        cols *= 2;
    while (cols < WARP && outer / (cols * 2) >= (double)COL_TILES_PER_SM * sms)
        cols *= 2;
    double most = rows / COL_ROWS_PER_THREAD;
    int slices = pow2_floor(most < MAX_BLOCK / cols ? most : MAX_BLOCK / cols);
    while (cols < WARP && cols * slices < FLAT_BLOCK) /* short columns: wider tiles */
        cols *= 2;
    static int tile_warned;
    if (forced & (forced - 1))
        warn_not_power_of_two("PTC_CUDA_COLUMN_TILE", forced, cols, &tile_warned);
    if (forced && (forced & (forced - 1)) == 0) {
        cols = forced;
        slices = pow2_floor(most < MAX_BLOCK / cols ? most : MAX_BLOCK / cols);
    }
    int64_t smem_limit = env_int("PTC_CUDA_SMEM_LIMIT", 0, SMEM_LIMIT, SMEM_LIMIT);
    while (slices > 1 && (int64_t)ci.members * ci.fields * cols * slices * 8 > smem_limit)
        slices /= 2;
    if (slices < 2)
        return false;
    p->col = true;
    p->col_fields = ci.fields;
    p->team = slices;
    p->block = cols * slices;
    p->smem_red = (int64_t)ci.members * ci.fields * p->block * 8;
    for (int g = 0; g < k->ngroups; g++)
        p->red_lanes[g] = k->groups[g].reduction ? slices : 1;
    for (int i = 0; i < k->nlocal; i++)
        p->loc[i] = LOC_PRIVATE;
    return true;
}

/* Does kernel k have split rows' shape: group 0 reduces whole rows (no
 * kept ranges) by no Welford member, its pointwise members store only locals that it alone
 * reads (each element's values, made and used by one thread), and every
 * later group is per-row pointwise work (the epilogue), which only a row's
 * last block runs? */
static bool splits_rows(const ptc_schedule *s, const ptc_kernel *k, int *members)
{
    const ptc_kgroup *G = &k->groups[0];
    if (k->ngroups == 0 || !G->reduction || G->ninner > 0 || G->nred == 0)
        return false;
    *members = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_lnode *n = s->prog->nodes[G->members[m].node];
        if (n->kind == PTC_LN_REDUCTION && n->reduce == PTC_RED_WELFORD)
            return false; /* slower split (the header) */
        if (n->kind == PTC_LN_REDUCTION)
            ++*members;
        else if (!is_local(s, n->out[0]))
            return false;
    }
    for (int g = 1; g < k->ngroups; g++) {
        const ptc_kgroup *E = &k->groups[g];
        if (E->reduction || E->ninner > 0)
            return false;
        for (int m = 0; m < E->nmembers; m++)
            for (int i = 0; i < E->members[m].body.n; i++) {
                const ptc_lexpr *e = &E->members[m].body.e[i];
                if (e->op != PTC_L_LOAD || !is_local(s, e->buf))
                    continue;
                for (int r = 0; r < G->nmembers; r++) {
                    const ptc_lnode *n = s->prog->nodes[G->members[r].node];
                    if (n->kind != PTC_LN_REDUCTION && n->out[0] == e->buf)
                        return false;
                }
            }
    }
    return *members > 0;
}

/* Split rows (the header): a kernel over static sizes whose team is a
 * block, with too few rows to fill a wave, gets S blocks per row, as many
 * as fill one wave of the device's SMS (so the plan is the device's: the
 * SM count is part of the target, hence of the key), each thread folding
 * SPLIT_THREAD_WORK elements or more, S at most the block (the last block
 * combines the S partial states a thread each). */
static void plan_split(const ptc_schedule *s, const ptc_kernel *k, int sms, gplan *p)
{
    int members;
    if (!env_int("PTC_CUDA_SPLIT_ROWS", 0, 1, 1) || p->team != p->block || p->team <= WARP ||
        p->scratch_team > 0 || !splits_rows(s, k, &members))
        return;
    double rows = prod(k->outer, k->nouter), n = prod(k->groups[0].red, k->groups[0].nred);
    if (rows * 4 > PTC_CUDA_SPLIT_COUNTERS || (p->vec > 1 && n < SPLIT_VEC_MIN_ROW))
        return;
    double wave = (double)sms * (SM_THREADS / p->block);
    double most = n / ((double)p->team * SPLIT_THREAD_WORK);
    double split = floor(wave / rows);
    split = split < most ? split : floor(most);
    split = split < p->team ? split : p->team;
    if (split < 2)
        return;
    p->split = (int)split;
    p->split_len = ((int64_t)ceil(n / split) + p->vec - 1) / p->vec * p->vec;
    p->split_members = members;
    /* two block combines, each unrolled (31 Welford merges for 1024
       threads), leave BatchNorm's statistics 32 registers and 668 bytes of
       spills in ptxas; in a loop, 47 registers and none */
    p->warps_loop = true;
}

/* Does load offset x move with variable v (in a div / mod atom too)? */
static bool moves_with(const ptc_ix *x, int v)
{
    bool nested;
    ptc_dim k = ptc_ix_coeff(x, v, &nested);
    return nested || !ptc_dim_is_static(k) || k.value != 0;
}

/* The largest element of a load of G's members that moves with variable v,
 * in bytes; 0 where none does, -1 where G cannot be vectorised along v: a
 * pointwise member, or a load that moves with v other than with stride 1 in
 * a kernel argument (a local, a gather, a strided read). */
static int red_vec_bytes(const ptc_schedule *s, const ptc_kgroup *G, int v)
{
    int most = 0;
    for (int m = 0; m < G->nmembers; m++) {
        const ptc_kmember *mem = &G->members[m];
        if (s->prog->nodes[mem->node]->kind != PTC_LN_REDUCTION)
            return -1;
        for (int i = 0; i < mem->body.n; i++) {
            const ptc_lexpr *e = &mem->body.e[i];
            if (e->op != PTC_L_LOAD || !moves_with(e->idx[0], v))
                continue;
            if (is_local(s, e->buf) || ptc_ix_uses_val(e->idx[0]) || !unit_in(e->idx[0], v))
                return -1;
            int size = (int)ptc_dtype_size(s->prog->bufs[e->buf]->dtype);
            most = size > most ? size : most;
        }
    }
    return most;
}

/* Do W consecutive elements of G's innermost reduction range v stay in one
 * run, every load that moves with v starting each at a multiple of W? */
static bool red_vec_fits(const ptc_schedule *s, const ptc_kgroup *G, int v, int w)
{
    if (!divides(G->red[G->nred - 1], w))
        return false;
    for (int m = 0; m < G->nmembers; m++)
        for (int i = 0; i < G->members[m].body.n; i++) {
            const ptc_lexpr *e = &G->members[m].body.e[i];
            if (e->op == PTC_L_LOAD && moves_with(e->idx[0], v) && !g_aligned_w(e->idx[0], v, w))
                return false;
        }
    return true;
}

/* W for plan_red_vec (1: none). */
static int red_vec_width(const ptc_schedule *s, const ptc_kernel *k)
{
    int most = 0;
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        if (!G->reduction)
            continue;
        int bytes = G->nred ? red_vec_bytes(s, G, k->nouter + G->ninner + G->nred - 1) : -1;
        if (bytes < 0)
            return 1;
        most = bytes > most ? bytes : most;
    }
    if (most == 0)
        return 1;
    int w = VEC_BYTES / most > MAX_VEC ? MAX_VEC : VEC_BYTES / most;
    for (; w > 1; w /= 2) {
        bool fits = true;
        for (int g = 0; g < k->ngroups && fits; g++) {
            const ptc_kgroup *G = &k->groups[g];
            fits = !G->reduction || red_vec_fits(s, G, k->nouter + G->ninner + G->nred - 1, w);
        }
        if (fits)
            break;
    }
    return w;
}

/* The vectorised form of a reduction kernel outside row and column mode
 * (reduce.c's red_loop): each thread loads W consecutive elements of the
 * innermost reduction range of each reduction group as one 16-byte vector
 * (8 bf16, 4 f32), where every member of those groups is a reduction whose
 * loads along that range are contiguous reads of kernel arguments at
 * offsets W divides, W divides the range, and the launcher finds the
 * arguments' bases aligned (else it runs the scalar entry). A split row's
 * length rounds up to a multiple of W (plan_split, which runs after).
 * PTC_CUDA_RED_VECTOR=0 turns it off. */
static void plan_red_vec(const ptc_schedule *s, const ptc_kernel *k, gplan *p)
{
    if (!env_int("PTC_CUDA_RED_VECTOR", 0, 1, 1))
        return;
    p->vec = red_vec_width(s, k);
    if (p->vec > 1)
        p->red_unroll = env_int("PTC_CUDA_RED_VECTOR_UNROLL", 1, 8, RED_VEC_UNROLL);
}

/* Does every store of kernel k go to an f16 / bf16 buffer? */
static bool stores_only_halves(const ptc_schedule *s, const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_kmember *mem = &k->groups[g].members[m];
            const ptc_lnode *n = s->prog->nodes[mem->node];
            for (int o = 0; o < 2; o++) {
                if (!mem->store[o] || n->out[o] < 0 || is_local(s, n->out[o]))
                    continue;
                ptc_dtype dt = s->prog->bufs[n->out[o]]->dtype;
                if (dt != PTC_F16 && dt != PTC_BF16)
                    return false;
            }
        }
    return true;
}

static void plan_init(ptc_arena *a, const ptc_schedule *s, const ptc_kernel *k, bool wide_index,
                      gplan *p)
{
    memset(p, 0, sizeof *p);
    p->flat = ptc_kernel_is_flat(k);
    p->i32 = !wide_index && fits_i32(s, k);
    p->red_lanes = PTC_NEWN(a, int, k->ngroups + 1);
    p->loc = PTC_NEWN(a, uint8_t, k->nlocal + 1);
    p->loc_off = PTC_NEWN(a, int64_t, k->nlocal + 1);
    p->valign = PTC_NEWN(a, uint8_t, k->nargs + 1);
    p->vec = 1;
    int erfc = env_int("PTC_CUDA_ERFC", 0, 2, 1);
    p->erfc_sum = erfc == 2 || (erfc == 1 && stores_only_halves(s, k));
    p->packed_add = env_int("PTC_CUDA_PACKED_ADD", 0, 1, 1);
    p->warps_loop = env_int("PTC_CUDA_WARPS_LOOP", 0, 1, 0);
}

/* The distinct teams the kernel gets with its symbols short, tiny and long;
 * returns how many. */
static int team_choices(const ptc_kernel *k, const access_info *ai, int sms, int *teams)
{
    int n = 0;
    for (size_t i = 0; i < sizeof SYM_SCALES / sizeof *SYM_SCALES; i++) {
        double scale = SYM_SCALES[i];
        int t = choose_team(ai, prod_at(k->outer, k->nouter, scale), work_at(k, scale), sms);
        bool seen = false;
        for (int j = 0; j < n; j++)
            seen |= teams[j] == t;
        if (!seen && n < PTC_CUDA_MAX_FORMS)
            teams[n++] = t;
    }
    return n;
}

int g_plan(ptc_arena *a, const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *tgt,
           bool wide_index, gplan *forms)
{
    gplan *p = &forms[0];
    plan_init(a, s, k, wide_index, p);
    int sms = tgt && tgt->sms > 0 ? tgt->sms : PTC_CUDA_DEFAULT_SMS;
    double outer = prod(k->outer, k->nouter);
    if (p->flat) {
        p->team = 1;
        p->vec = choose_vec(s, k);
        p->block = outer / p->vec >= FLAT_BIG_BLOCK ? FLAT_BLOCK_BIG : FLAT_BLOCK;
        for (int i = 0; i < k->nlocal; i++)
            p->loc[i] = LOC_NONE;
        for (int g = 0; g < k->ngroups; g++)
            p->red_lanes[g] = 1;
        return 1;
    }
    int forced = env_int("PTC_CUDA_TEAM", 1, MAX_BLOCK, 0);
    if (!forced && !k->nparams && plan_col(s, k, sms, p))
        return 1;
    access_info ai;
    scan_accesses(s, k, &ai);
    p->outer_contig = ai.outer_contig;
    p->inner_contig = ai.inner_contig;
    p->pointwise = ai.pointwise;
    int T = choose_team(&ai, outer, work_at(k, SYM_HINT), sms);
    int teams[PTC_CUDA_MAX_FORMS], nforms = 1;
    static int team_warned;
    if (forced & (forced - 1))
        warn_not_power_of_two("PTC_CUDA_TEAM", forced, T, &team_warned);
    if (forced && (forced & (forced - 1)) == 0) {
        T = forced;
    } else if (T > 1 || !ai.outer_contig) {
        plan_row(s, k, &ai, p);
        if (p->row)
            T = p->team;
    }
    if (!p->row && !forced && k->nparams) {
        nforms = team_choices(k, &ai, sms, teams);
        T = teams[0];
    }
    plan_team(s, k, T, p);
    if (nforms == 1 && !p->row)
        plan_red_vec(s, k, p);
    if (nforms == 1 && !p->row && !forced && !k->nparams)
        plan_split(s, k, sms, p);
    for (int f = 1; f < nforms; f++) {
        plan_init(a, s, k, wide_index, &forms[f]);
        forms[f].outer_contig = ai.outer_contig;
        forms[f].inner_contig = ai.inner_contig;
        forms[f].pointwise = ai.pointwise;
        plan_team(s, k, teams[f], &forms[f]);
    }
    /* symbolic sizes: column mode as one more form, for the calls it fits */
    if (k->nparams && !forced && nforms < PTC_CUDA_MAX_FORMS) {
        plan_init(a, s, k, wide_index, &forms[nforms]);
        if (plan_col(s, k, sms, &forms[nforms]))
            nforms++;
    }
    return nforms;
}

int ptc_cuda_combo_block(const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *t)
{
    ptc_arena *a = ptc_arena_new();
    gplan forms[PTC_CUDA_MAX_FORMS];
    int n = g_plan(a, s, k, t, false, forms);
    int block = n != 1 || forms[0].scratch_team > 0 || forms[0].split ? -1
                : forms[0].flat                                       ? 0
                                                                      : forms[0].block;
    ptc_arena_free(a);
    return block;
}

int ptc_cuda_pick(const ptc_cuda_code *code, double outer, double work, int sms)
{
    bool col = ptc_cuda_col_fits(outer, work);
    for (int f = 0; f < code->nforms; f++)
        if (code->forms[f].col && col)
            return f;
    access_info ai = {code->outer_contig, code->inner_contig, code->pointwise};
    int want = choose_team(&ai, outer, work, sms), best = 0;
    /* nearest in log2, the larger team on a tie; column mode only where it fits */
    double best_d = 1e30;
    for (int f = 0; f < code->nforms; f++) {
        if (code->forms[f].col)
            continue;
        int t = code->forms[f].team;
        double d = t > want ? (double)t / want : (double)want / t;
        if (d < best_d || (d == best_d && t > code->forms[best].team)) {
            best = f;
            best_d = d;
        }
    }
    return best;
}
