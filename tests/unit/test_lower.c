/* Loop IR, scheduler and memory plan: index simplification (static and
 * symbolic), the loop verifier, the fusion goldens of tests/lower/ (.ptir files)
 * (each file says how many kernels its graph must become), and the memory
 * planner and its checker. */
#include "lower/lower.h"
#include "passes/passes.h"

#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "address_limit.h"

static char *ixs(const ptc_ix *x)
{
    static char out[512];
    ptc_buf b = {0};
    const char *names[] = {"x0", "x1", "x2", "x3"};
    ptc_ix_print(&b, x, names, 4);
    snprintf(out, sizeof out, "%s", b.data);
    ptc_buf_free(&b);
    return out;
}

/* ---- index expressions -------------------------------------------------------------- */

START_TEST(ix_reshape_roundtrip_static)
{
    ptc_arena *a = ptc_arena_new();
    /* [4, 16] viewed flat and back: (16*x0 + x1) // 16 == x0, % 16 == x1 */
    const ptc_ix *x0 = ptc_ix_var(a, 0, ptc_dim_c(4)), *x1 = ptc_ix_var(a, 1, ptc_dim_c(16));
    const ptc_ix *flat = ptc_ix_madd(a, x0, ptc_dim_c(16), x1);
    ck_assert_str_eq(ixs(ptc_ix_floordiv(a, flat, ptc_dim_c(16))), "x0");
    ck_assert_str_eq(ixs(ptc_ix_mod(a, flat, ptc_dim_c(16))), "x1");
    /* 16*(f//16) + f%16 folds back to f */
    const ptc_ix *f = ptc_ix_var(a, 2, ptc_dim_c(64));
    const ptc_ix *back = ptc_ix_madd(a, ptc_ix_floordiv(a, f, ptc_dim_c(16)), ptc_dim_c(16),
                                     ptc_ix_mod(a, f, ptc_dim_c(16)));
    ck_assert(ptc_ix_eq(back, f));
    /* a split dim: (196*x1 + 14*x2 + x3) // 784 == x1 // 4 when the rest < 196 */
    const ptc_ix *y1 = ptc_ix_var(a, 1, ptc_dim_c(32)), *y2 = ptc_ix_var(a, 2, ptc_dim_c(14)),
                 *y3 = ptc_ix_var(a, 3, ptc_dim_c(14));
    const ptc_ix *e = ptc_ix_madd(a, y1, ptc_dim_c(196), ptc_ix_madd(a, y2, ptc_dim_c(14), y3));
    ck_assert_str_eq(ixs(ptc_ix_floordiv(a, e, ptc_dim_c(784))), "(x1)//4");
    ck_assert_str_eq(ixs(ptc_ix_mod(a, e, ptc_dim_c(196))), "14*x2 + x3");
    /* no false simplification: x1 // 4 stays when x1 reaches 4 */
    ck_assert_str_eq(ixs(ptc_ix_floordiv(a, x1, ptc_dim_c(4))), "(x1)//4");
    ptc_arena_free(a);
}
END_TEST

START_TEST(ix_symbolic)
{
    ptc_arena *a = ptc_arena_new();
    ptc_dim s0 = ptc_dim_symbol(a, "s0"), s1 = ptc_dim_symbol(a, "s1");
    const ptc_ix *x0 = ptc_ix_var(a, 0, s0), *x1 = ptc_ix_var(a, 1, s1);
    const ptc_ix *flat = ptc_ix_madd(a, x0, s1, x1); /* s1*x0 + x1 */
    ck_assert_str_eq(ixs(ptc_ix_floordiv(a, flat, s1)), "x0");
    ck_assert_str_eq(ixs(ptc_ix_mod(a, flat, s1)), "x1");
    /* [s0, s1, 4] flattened and divided by 4*s1 */
    const ptc_ix *x2 = ptc_ix_var(a, 2, ptc_dim_c(4));
    ptc_dim s1x4 = ptc_dim_mul(a, s1, ptc_dim_c(4));
    const ptc_ix *f3 = ptc_ix_madd(a, x0, s1x4, ptc_ix_madd(a, x1, ptc_dim_c(4), x2));
    ck_assert_str_eq(ixs(ptc_ix_floordiv(a, f3, s1x4)), "x0");
    ck_assert_str_eq(ixs(ptc_ix_mod(a, ptc_ix_floordiv(a, f3, ptc_dim_c(4)), s1)), "x1");
    /* a divisor the remainder can reach is kept */
    ck_assert_str_eq(ixs(ptc_ix_floordiv(a, flat, s0)), "(s1*x0 + x1)//s0");
    /* substitution re-simplifies */
    const ptc_ix *vars[2] = {ptc_ix_int(a, 2), NULL};
    ck_assert_str_eq(ixs(ptc_ix_subst(a, flat, vars, 2, NULL, 0)), "x1 + 2*s1");
    ptc_arena_free(a);
}
END_TEST

/* A flatten of [n, 4, 6] unflattens its element y as y%6, (y//6)%4, y//24:
 * the load of the same layout folds back to y, for a static and a symbolic
 * n, and (y//e)//d has one normal form, y//(e*d). */
START_TEST(ix_flatten_folds_back)
{
    ptc_arena *a = ptc_arena_new();
    ptc_dim sizes[2] = {ptc_dim_c(120), ptc_dim_mul(a, ptc_dim_symbol(a, "s0"), ptc_dim_c(24))};
    for (int i = 0; i < 2; i++) {
        const ptc_ix *y = ptc_ix_var(a, 0, sizes[i]);
        const ptc_ix *by6 = ptc_ix_floordiv(a, y, ptc_dim_c(6));
        ck_assert(
            ptc_ix_eq(ptc_ix_floordiv(a, by6, ptc_dim_c(4)), ptc_ix_floordiv(a, y, ptc_dim_c(24))));
        const ptc_ix *back = ptc_ix_madd(a, ptc_ix_floordiv(a, y, ptc_dim_c(24)), ptc_dim_c(24),
                                         ptc_ix_madd(a, ptc_ix_mod(a, by6, ptc_dim_c(4)),
                                                     ptc_dim_c(6), ptc_ix_mod(a, y, ptc_dim_c(6))));
        ck_assert_str_eq(ixs(back), "x0");
    }
    /* a symbolic inner size: (y//s1)//s2 == y//(s1*s2), and the fold */
    ptc_dim s1 = ptc_dim_symbol(a, "s1"), s2 = ptc_dim_symbol(a, "s2");
    const ptc_ix *y = ptc_ix_var(a, 0, ptc_dim_mul(a, s1, ptc_dim_mul(a, s2, ptc_dim_c(3))));
    const ptc_ix *by1 = ptc_ix_floordiv(a, y, s1);
    const ptc_ix *back =
        ptc_ix_madd(a, ptc_ix_floordiv(a, by1, s2), ptc_dim_mul(a, s1, s2),
                    ptc_ix_madd(a, ptc_ix_mod(a, by1, s2), s1, ptc_ix_mod(a, y, s1)));
    ck_assert_str_eq(ixs(back), "x0");
    ptc_arena_free(a);
}
END_TEST

START_TEST(dim_div_exact)
{
    ptc_arena *a = ptc_arena_new();
    ptc_dim s0 = ptc_dim_symbol(a, "s0"), s1 = ptc_dim_symbol(a, "s1"), q;
    ptc_dim x = ptc_dim_add(a, ptc_dim_mul(a, ptc_dim_mul(a, s0, s1), ptc_dim_c(6)),
                            ptc_dim_mul(a, s1, ptc_dim_c(4))); /* 6*s0*s1 + 4*s1 */
    ck_assert(ptc_dim_div_exact(a, x, ptc_dim_mul(a, s1, ptc_dim_c(2)), &q));
    ck_assert(ptc_dim_eq(q, ptc_dim_add(a, ptc_dim_mul(a, s0, ptc_dim_c(3)), ptc_dim_c(2))));
    ck_assert(!ptc_dim_div_exact(a, x, s0, &q));
    ck_assert(!ptc_dim_div_exact(a, ptc_dim_add(a, x, ptc_dim_c(1)), s1, &q));
    ck_assert(ptc_dim_nonneg(x));
    ck_assert(!ptc_dim_nonneg(ptc_dim_sub(a, s0, ptc_dim_c(1))));
    ptc_arena_free(a);
}
END_TEST

/* ---- loop verifier ----------------------------------------------------------------- */

START_TEST(verifier_catches)
{
    ptc_arena *a = ptc_arena_new();
    ptc_lprog *p = ptc_lprog_new(a);
    ptc_dim shape[1] = {ptc_dim_c(8)};
    ptc_lbuf *in = ptc_lprog_add_buf(p, PTC_F32, 1, shape, PTC_LB_INPUT);
    in->input = 0;
    ptc_lnode *n = ptc_lprog_add_node(p, PTC_LN_POINTWISE);
    ptc_lbuf *out = ptc_lprog_add_buf(p, PTC_F32, 1, shape, PTC_LB_OUTPUT);
    out->def = n->id;
    out->output = 0;
    n->out[0] = out->id;
    n->ndim = 1;
    n->ranges[0] = shape[0];
    const ptc_ix *idx[1] = {ptc_ix_var(a, 1, shape[0])}; /* variable 1 does not exist */
    n->value = ptc_lbody_load(a, &n->body, in->id, PTC_F32, 1, idx);
    p->noutputs = 1;
    p->outputs = &out->id;
    ptc_error err;
    ck_assert_int_eq(ptc_lprog_verify(p, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of the node's ranges"));
    idx[0] = ptc_ix_var(a, 0, shape[0]);
    n->body.n = 0;
    n->value = ptc_lbody_load(a, &n->body, in->id, PTC_F32, 1, idx);
    ck_assert_int_eq(ptc_lprog_verify(p, &err), 0);
    /* a dtype mismatch inside the body */
    int k = ptc_lbody_const_i(a, &n->body, 1, PTC_I32);
    n->value = ptc_lbody_binary(a, &n->body, PTC_L_ADD, PTC_F32, n->value, k);
    ck_assert_int_eq(ptc_lprog_verify(p, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "dtype"));
    ptc_arena_free(a);
}
END_TEST

/* ---- memory plan --------------------------------------------------------------------- */

START_TEST(memplan_reuse_and_check)
{
    /* a chain: b0 (step 0..1), b1 (1..2), b2 (2..3), b3 (3..4): b2 can reuse b0 */
    int64_t bytes[4] = {4096, 4096, 4096, 4096}, off[4];
    int first[4] = {0, 1, 2, 3}, last[4] = {1, 2, 3, 4};
    bool in[4] = {true, true, true, true};
    ptc_error err;
    int64_t total = ptc_mplan_place(4, bytes, first, last, in, off);
    ck_assert_int_eq(total, 8192);
    ck_assert_int_eq(ptc_mplan_check(4, bytes, first, last, in, off, total, &err), 0);
    ck_assert_int_eq(off[0], off[2]);
    /* the checker rejects two live buffers on the same bytes */
    off[1] = off[0];
    ck_assert_int_eq(ptc_mplan_check(4, bytes, first, last, in, off, total, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "overlap"));
    /* and a buffer outside the arena */
    ptc_mplan_place(4, bytes, first, last, in, off);
    ck_assert_int_eq(ptc_mplan_check(4, bytes, first, last, in, off, 4096, &err), -1);
}
END_TEST

/* Of two buffers of one size, the longer-lived sits lower: BERT's backward
 * kept its tied weight's gradient (live to the end) above the logits'
 * gradient (dead early), and the two 1024-byte buffers that came after
 * the logits' found 960 bytes under the weight's: one went above it
 * (4,992 bytes; 4,032 now, the sum of what is live at once). */
START_TEST(memplan_puts_the_longer_lived_of_equal_sizes_lower)
{
    int64_t bytes[4] = {1984, 1984, 1024, 1024}, off[4];
    int first[4] = {1, 5, 6, 6}, last[4] = {5, 20, 7, 7};
    bool in[4] = {true, true, true, true};
    ptc_error err;
    int64_t total = ptc_mplan_place(4, bytes, first, last, in, off);
    ck_assert_int_eq(ptc_mplan_check(4, bytes, first, last, in, off, total, &err), 0);
    ck_assert_int_eq(off[1], 0);
    ck_assert_int_eq(total, 1984 + 2 * 1024);
}
END_TEST

/* A backward in small: 10 steps; the saved tensors (1000 bytes outside the
 * arena) are let go at step 4; a 64-byte temporary lives in steps 0..2, a
 * 960-byte one in steps 6..8. One arena (960 bytes, held from the start)
 * peaks at 1000 + 960; two segments at 1000 + 64 (early) and 960 (late). */
START_TEST(memplan_segments_allocate_late_temporaries_late)
{
    int64_t bytes[2] = {64, 960}, off[2], seg_bytes[PTC_MPLAN_MAX_SEGMENTS];
    int first[2] = {0, 6}, last[2] = {2, 8}, seg_of[2];
    bool in[2] = {true, true};
    int64_t outside[10];
    for (int t = 0; t < 10; t++)
        outside[t] = t <= 4 ? 1000 : 0;
    int n = ptc_mplan_segment(2, bytes, first, last, in, 10, outside, seg_of, off, seg_bytes);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(seg_of[0], 0);
    ck_assert_int_eq(seg_of[1], 1);
    ck_assert_int_eq(seg_bytes[0], 64);
    ck_assert_int_eq(seg_bytes[1], 960);
    ck_assert_int_eq(off[0], 0);
    ck_assert_int_eq(off[1], 0);
    int seg_first[2], seg_last[2];
    ptc_mplan_segment_spans(2, first, last, in, n, seg_of, seg_first, seg_last);
    ck_assert_int_eq(seg_first[1], 6);
    ck_assert_int_eq(seg_last[0], 2);
}
END_TEST

/* Where nothing outside the arena falls along the run, splitting it saves
 * nothing: one arena, placed as ptc_mplan_place places it. */
START_TEST(memplan_keeps_one_arena_where_segments_save_nothing)
{
    int64_t bytes[3] = {512, 256, 512}, off[3], want[3], seg_bytes[PTC_MPLAN_MAX_SEGMENTS];
    int first[3] = {0, 1, 3}, last[3] = {2, 4, 5}, seg_of[3];
    bool in[3] = {true, true, true};
    int64_t outside[6] = {100, 100, 100, 100, 100, 100};
    int n = ptc_mplan_segment(3, bytes, first, last, in, 6, outside, seg_of, off, seg_bytes);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(seg_bytes[0], ptc_mplan_place(3, bytes, first, last, in, want));
    for (int b = 0; b < 3; b++) {
        ck_assert_int_eq(off[b], want[b]);
        ck_assert_int_eq(seg_of[b], 0);
    }
}
END_TEST

/* ---- fusion goldens -------------------------------------------------------------------- */

typedef struct expect {
    int kernels, externs, addmm, refused_recompute;
    int64_t arena;
} expect;

static void parse_expect(const char *text, expect *e)
{
    e->kernels = e->externs = e->addmm = e->refused_recompute = -1;
    e->arena = -1;
    const char *p = strstr(text, "# expect:");
    ck_assert_msg(p != NULL, "golden without '# expect:'");
    p += 9;
    while (*p && *p != '\n') {
        char key[32];
        long long v;
        int used;
        if (sscanf(p, " %31[a-z_] %lld%n", key, &v, &used) != 2)
            break;
        if (!strcmp(key, "kernels"))
            e->kernels = (int)v;
        else if (!strcmp(key, "externs"))
            e->externs = (int)v;
        else if (!strcmp(key, "addmm"))
            e->addmm = (int)v;
        else if (!strcmp(key, "arena"))
            e->arena = v;
        else if (!strcmp(key, "refused_recompute"))
            e->refused_recompute = (int)v;
        else
            ck_abort_msg("unknown expectation '%s'", key);
        p += used;
        while (*p == ',' || *p == ' ')
            p++;
    }
}

static void check_golden(const char *path)
{
    ptc_error err;
    size_t len;
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_msg(text != NULL, "%s: %s", path, err.msg);
    expect e;
    parse_expect(text, &e);
    ptc_module *m = ptc_parse_module(text, len, path, &err);
    ck_assert_msg(m != NULL, "%s: %s", path, err.msg);
    ptc_graph *prims = ptc_decompose(m->graphs[0], &err);
    ck_assert_msg(prims != NULL, "%s: %s", path, err.msg);
    ck_assert_int_eq(ptc_simplify(prims, &err), 0);
    ck_assert_msg(ptc_ops_verify(prims, PTC_STAGE_PRIM, &err) == 0, "%s: %s", path, err.msg);
    ptc_arena *a = ptc_arena_new();
    ptc_lprog *lp = ptc_lower(a, prims, &err);
    ck_assert_msg(lp != NULL, "%s: %s", path, err.msg);
    ptc_sched_opts so = {.nthreads = 2};
    ptc_schedule *s = ptc_schedule_build(a, lp, &so, &err);
    ck_assert_msg(s != NULL, "%s: %s", path, err.msg);
    int nx = 0, naddmm = 0;
    for (int i = 0; i < s->nsteps; i++) {
        if (s->steps[i].kind != PTC_STEP_EXTERN)
            continue;
        nx++;
        naddmm += lp->nodes[s->steps[i].index]->xnode->op == PTC_OP_ADDMM;
    }
    if (e.kernels >= 0)
        ck_assert_msg(s->nkernels == e.kernels, "%s: %d kernels, expected %d", path, s->nkernels,
                      e.kernels);
    if (e.externs >= 0)
        ck_assert_msg(nx == e.externs, "%s: %d externs, expected %d", path, nx, e.externs);
    if (e.addmm >= 0)
        ck_assert_msg(naddmm == e.addmm, "%s: %d addmm externs, expected %d", path, naddmm,
                      e.addmm);
    if (e.arena >= 0)
        ck_assert_msg(s->plan.arena_bytes == e.arena, "%s: arena %lld bytes, expected %lld", path,
                      (long long)s->plan.arena_bytes, (long long)e.arena);
    if (e.refused_recompute >= 0)
        ck_assert_msg(s->nrefused_recompute == e.refused_recompute,
                      "%s: %d fusions refused for recompute, expected %d", path,
                      s->nrefused_recompute, e.refused_recompute);
    /* every buffer line and member line of the printed stages has provenance */
    ptc_buf b = {0};
    ptc_schedule_print(&b, s);
    ck_assert_ptr_nonnull(strstr(b.data, "kernel 0 "));
    for (char *line = strtok(b.data, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "    member "))
            ck_assert_msg(strstr(line, "  <- %") != NULL, "%s: member without provenance: %s",
                          path, line);
    ptc_buf_free(&b);
    ptc_arena_free(a);
    ptc_graph_free(prims);
    ptc_module_free(m);
    free(text);
}

START_TEST(fusion_goldens)
{
    const char *src = getenv("PTC_SOURCE_DIR");
    ck_assert_msg(src != NULL, "PTC_SOURCE_DIR is not set");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/lower", src);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".ptir") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        check_golden(path);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 10);
}
END_TEST

/* The memory plan of a graph with a chain of temporaries reuses bytes. */
START_TEST(plan_of_a_chain)
{
    const char *text = "# ptc ir v1\n"
                       "graph g(%x: f32[64,128] cpu) {\n"
                       "  %0 = softmax(%x, 0) : f32[64,128]\n"
                       "  %1 = softmax(%0, 1) : f32[64,128]\n"
                       "  %2 = softmax(%1, 0) : f32[64,128]\n"
                       "  %3 = softmax(%2, 1) : f32[64,128]\n"
                       "  return (%3)\n}\n";
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "chain", &err);
    ck_assert_ptr_nonnull(m);
    ptc_graph *prims = ptc_decompose(m->graphs[0], &err);
    ptc_simplify(prims, &err);
    ptc_arena *a = ptc_arena_new();
    ptc_schedule *s = ptc_schedule_build(a, ptc_lower(a, prims, &err), NULL, &err);
    ck_assert_ptr_nonnull(s);
    int64_t sum = 0;
    for (int b = 0; b < s->plan.nbufs; b++)
        if (s->plan.in_arena[b])
            sum += s->plan.nbytes[b];
    ck_assert_int_gt(sum, 0);
    ck_assert_int_lt(s->plan.arena_bytes, sum); /* something was reused */
    ck_assert_int_eq(ptc_mplan_check(s->plan.nbufs, s->plan.nbytes, s->plan.first, s->plan.last,
                                     s->plan.in_arena, s->plan.offset, s->plan.arena_bytes, &err),
                     0);
    ptc_arena_free(a);
    ptc_graph_free(prims);
    ptc_module_free(m);
}
END_TEST

/* The loop program of a graph's text (its module and prims kept for the
 * caller to free). */
static ptc_lprog *lower_text(ptc_arena *a, const char *text, ptc_module **m, ptc_graph **prims)
{
    ptc_error err;
    *m = ptc_parse_module(text, strlen(text), "g", &err);
    ck_assert_msg(*m != NULL, "%s", err.msg);
    *prims = ptc_decompose((*m)->graphs[0], &err);
    ck_assert_int_eq(ptc_simplify(*prims, &err), 0);
    ptc_lprog *lp = ptc_lower(a, *prims, &err);
    ck_assert_msg(lp != NULL, "%s", err.msg);
    return lp;
}

/* ptc_lprog_last_reads, one pass over the bodies, finds for every buffer
 * the step of its last reader that a scan of all nodes per buffer finds
 * (how the scheduler and the memory plan used to ask, quadratic in the
 * nodes: a resnet50 backward's kernels stage took 220 ms, now 26). */
START_TEST(last_reads_match_a_scan_per_buffer)
{
    const char *text = "# ptc ir v1\n"
                       "graph g(%x: f32[8,16] cpu, %w: f32[16,16] cpu) {\n"
                       "  %0 = softmax(%x, 1) : f32[8,16]\n"
                       "  %1 = mm(%0, %w) : f32[8,16]\n"
                       "  %2 = add(%1, %x) : f32[8,16]\n"
                       "  %3 = mul(%2, %0) : f32[8,16]\n"
                       "  %4 = mm(%3, %w) : f32[8,16]\n"
                       "  return (%4, %2)\n}\n";
    ptc_module *m;
    ptc_graph *prims;
    ptc_arena *a = ptc_arena_new();
    ptc_lprog *lp = lower_text(a, text, &m, &prims);
    int step_of[256], last[256];
    ck_assert_int_lt(lp->nnodes, 256);
    ck_assert_int_lt(lp->nbufs, 256);
    for (int r = 0; r < lp->nnodes; r++)
        step_of[r] = (r * 7) % 5; /* any steps, not in order */
    for (int b = 0; b < lp->nbufs; b++)
        last[b] = -1;
    ptc_lprog_last_reads(lp, step_of, last);
    int reads = 0;
    for (int b = 0; b < lp->nbufs; b++) {
        int want = -1;
        for (int r = 0; r < lp->nnodes; r++)
            if (lp->nodes[r] && ptc_lnode_reads(lp->nodes[r], b) && step_of[r] > want)
                want = step_of[r];
        ck_assert_int_eq(last[b], want);
        reads += want >= 0;
    }
    ck_assert_int_ge(reads, 4); /* x, w and the values between are read */
    ptc_arena_free(a);
    ptc_graph_free(prims);
    ptc_module_free(m);
}
END_TEST

/* A chain of n mixed pointwise ops (the mix of bench/compile_scaling.py),
 * each add with its own constant. */
static char *chain_text(int n)
{
    static const char *const ops[] = {"sin(%s)",  "mul(%s, %%x)", "add(%s, %g)",
                                      "tanh(%s)", "abs(%s)",      "sub(%s, %%x)"};
    ptc_buf b = {0};
    ptc_buf_puts(&b, "# ptc ir v1\ngraph chain(%x: f32[16] cpu) {\n");
    char prev[16] = "%x", op[64];
    for (int i = 0; i < n; i++) {
        snprintf(op, sizeof op, ops[i % 6], prev, 0.5 + i / 65536.0);
        ptc_buf_printf(&b, "  %%%d = %s : f32[16]\n", i, op);
        snprintf(prev, sizeof prev, "%%%d", i);
    }
    ptc_buf_printf(&b, "  return (%s)\n}\n", prev);
    return b.data;
}

/* Bytes the kernels stage allocates for a chain of n ops; checks that no
 * kernel holds more than PTC_KERNEL_MAX_ENTRIES body entries. */
/* tests/lower/combined_column_sums.ptir: kernel 1 reads the first column
 * sum for the last time while kernel 2, independent of it, writes the
 * second, and step by step the plan lets the two share bytes. As one
 * combination (one parallel region, one CUDA grid) both live through it and
 * sit apart; a combination over a plan not merged so is refused. */
START_TEST(combined_temporaries_never_share_bytes)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/lower/combined_column_sums.ptir",
             getenv("PTC_SOURCE_DIR"));
    size_t len;
    ptc_error err;
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_msg(text != NULL, "%s: %s", path, err.msg);
    ptc_arena *a = ptc_arena_new();
    ptc_module *m;
    ptc_graph *prims;
    ptc_schedule *s = ptc_schedule_build(a, lower_text(a, text, &m, &prims), NULL, &err);
    free(text);
    ck_assert_ptr_nonnull(s);
    ptc_mplan *mp = &s->plan;
    int sums[2], n = 0;
    for (int b = 0; b < mp->nbufs; b++)
        if (mp->in_arena[b] && n < 2)
            sums[n++] = b;
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(s->nsteps, 4);
    /* alone, the second sum takes the first's bytes */
    ck_assert_int_eq(mp->last[sums[0]] + 1, mp->first[sums[1]]);
    ck_assert_int_eq(mp->offset[sums[0]], mp->offset[sums[1]]);
    int first[2] = {mp->first[sums[0]], mp->first[sums[1]]};
    int last[2] = {mp->last[sums[0]], mp->last[sums[1]]};
    ck_assert_int_eq(ptc_schedule_combine(s, NULL, false), 0); /* alone, as before */
    ck_assert_int_eq(ptc_schedule_combine(s, NULL, true), 1);
    ck_assert_int_eq(s->combos[0].first, 1);
    ck_assert_int_eq(s->combos[0].n, 2);
    ck_assert_int_eq(ptc_schedule_verify(s, &err), 0);
    ck_assert_int_ge(mp->offset[sums[1]], mp->offset[sums[0]] + mp->nbytes[sums[0]]);
    ck_assert_int_eq(mp->arena_bytes, mp->nbytes[sums[0]] + mp->nbytes[sums[1]]);
    /* the plan as it was, under the combination: refused */
    for (int i = 0; i < 2; i++)
        mp->first[sums[i]] = first[i], mp->last[sums[i]] = last[i];
    ck_assert_int_ne(ptc_schedule_verify(s, &err), 0);
    ck_assert_msg(strstr(err.msg, "live through it") != NULL, "%s", err.msg);
    ptc_arena_free(a);
    ptc_graph_free(prims);
    ptc_module_free(m);
}
END_TEST

static size_t chain_schedule_bytes(int n)
{
    char *text = chain_text(n);
    ptc_error err;
    ptc_module *m;
    ptc_graph *prims;
    ptc_arena *a = ptc_arena_new();
    ptc_lprog *lp = lower_text(a, text, &m, &prims);
    size_t before = ptc_arena_bytes(a);
    ptc_sched_opts so = {.nthreads = 2};
    ptc_schedule *s = ptc_schedule_build(a, lp, &so, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    size_t bytes = ptc_arena_bytes(a) - before;
    int entries = 0;
    for (int k = 0; k < s->nkernels; k++) {
        int in_kernel = 0;
        for (int g = 0; g < s->kernels[k]->ngroups; g++)
            for (int i = 0; i < s->kernels[k]->groups[g].nmembers; i++)
                in_kernel += s->kernels[k]->groups[g].members[i].body.n;
        ck_assert_msg(in_kernel <= PTC_KERNEL_MAX_ENTRIES, "%d ops: kernel %d holds %d entries", n,
                      k, in_kernel);
        entries += in_kernel;
    }
    ck_assert_int_ge(entries, n); /* every op is in some kernel */
    ptc_arena_free(a);
    ptc_graph_free(prims);
    ptc_module_free(m);
    free(text);
    return bytes;
}

/* Fusing a long pointwise chain costs work linear in its length: the kernels
 * stage's allocations (which count every body copied while inlining, and
 * grew with the square of the chain) double when the chain doubles, and no
 * kernel outgrows the cap. Counted in bytes, not timed, so a loaded machine
 * cannot make it flaky. */
START_TEST(long_chain_schedules_in_linear_work)
{
    size_t small = chain_schedule_bytes(1000), large = chain_schedule_bytes(2000);
    ck_assert_msg(large < small * 5 / 2, "kernels stage: %zu bytes for 1,000 ops, %zu for 2,000",
                  small, large);
    /* about 7 KB an op when a consumer takes its only producer's body over;
     * copying it instead costs 39 KB an op at the kernel size cap */
    ck_assert_msg(large / 2000 < 16384, "kernels stage: %zu bytes an op", large / 2000);
}
END_TEST

/* Running out of memory while lowering a long graph is an error: lowering
 * stops at the first node after its arena failed (ir.h), where it used to go
 * on through the process's 64 MiB reserve and abort ("out of memory (arena
 * block)"; a 100,000-node chain under ptc.compile with a 4 GB limit). ASan's
 * shadow memory cannot live under an address-space limit. */
START_TEST(lowering_out_of_memory_is_an_error)
{
#ifndef __SANITIZE_ADDRESS__
    char *text = chain_text(30000);
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "chain", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    ptc_graph *prims = ptc_decompose(m->graphs[0], &err);
    ck_assert_int_eq(ptc_simplify(prims, &err), 0);
    ptc_arena *a = ptc_arena_new(); /* the reserve is taken here */
    ck_assert_ptr_nonnull(ptc_lower(a, prims, &err));
    size_t needs = ptc_arena_bytes(a);
    ck_assert_msg(needs > (96u << 20), "lowering takes only %zu bytes: no test", needs);
    ptc_arena_free(a);
    a = ptc_arena_new();
    struct rlimit old;
    limit_address_space(8 << 20, &old);
    ptc_lprog *lp = ptc_lower(a, prims, &err);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &old), 0);
    ck_assert_ptr_null(lp);
    ck_assert(ptc_arena_failed(a));
    ck_assert_str_eq(err.msg, "out of memory");
    ptc_arena_free(a);
    ptc_graph_free(prims);
    ptc_module_free(m);
    free(text);
#endif
}
END_TEST

/* ir/pointwise.def's rows, as ops.def makes them ops, are what they say: its
 * torch-level rows are pointwise torch ops of one or two operands built from
 * pointwise prims that have rows, each prim row lowers to a loop op taking as
 * many operands as the prim has tensors, and the pointwise ops that ops.def
 * keeps rows of its own for are those decomposed on their own. */
static int tensor_params(ptc_op op)
{
    const ptc_schema *s = ptc_op_schema(op);
    int n = 0;
    for (int i = 0; i < s->nparams; i++)
        n += s->params[i].kind == PTC_PK_TENSOR || s->params[i].kind == PTC_PK_TENSOR_SCALAR;
    return n;
}

START_TEST(pointwise_table_matches_ops)
{
    static int lop[PTC_OP_COUNT];
    static bool row[PTC_OP_COUNT];
    for (int op = 0; op < PTC_OP_COUNT; op++)
        lop[op] = -1;
#define PW_PRIM(id, l, lname, cost, kind, ref, bools, fold, emit) lop[PTC_OP_##id] = PTC_L_##l, row[PTC_OP_##id] = true;
#include "ir/pointwise.def"
    static const ptc_op uses[] = {
#define AS(p) PTC_OP_##p,
#define RAW(p) AS(p)
#define COMPARE(p) AS(p)
#define BITWISE(p) AS(p)
#define LOGICAL(p) AS(p)
#define FORMULA(fn)
#define PW_UNARY(id, name, params, meta, eager, how, bind, sig, ref) how
#define PW_BINARY(id, name, params, meta, eager, how, bind, sig, ref) how
#include "ir/pointwise.def"
    };
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
        ck_assert_msg(lop[uses[i]] >= 0, "%s is used by a row but has no PW_PRIM row",
                      ptc_op_name(uses[i]));
    static const struct {
        ptc_op op;
        int tensors;
    } torch_rows[] = {
#define PW_UNARY(id, name, params, meta, eager, how, bind, sig, ref) {PTC_OP_##id, 1},
#define PW_BINARY(id, name, params, meta, eager, how, bind, sig, ref) {PTC_OP_##id, 2},
#include "ir/pointwise.def"
    };
    for (size_t i = 0; i < sizeof torch_rows / sizeof *torch_rows; i++) {
        ptc_op op = torch_rows[i].op;
        ck_assert_msg(ptc_op_schema(op)->stage == PTC_STAGE_TORCH &&
                          (ptc_op_flags(op) & PTC_F_POINTWISE) &&
                          tensor_params(op) == torch_rows[i].tensors,
                      "%s: not a torch-level pointwise op of %d operands", ptc_op_name(op),
                      torch_rows[i].tensors);
        row[op] = true;
    }
    for (int op = 0; op < PTC_OP_COUNT; op++) {
        if (lop[op] >= 0)
            ck_assert_msg(ptc_op_schema(op)->stage == PTC_STAGE_PRIM &&
                              ptc_lop_arity(lop[op]) == tensor_params(op),
                          "%s lowers to %s", ptc_op_name(op), ptc_lop_name(lop[op]));
        bool own = op == PTC_OP_WHERE || op == PTC_OP_CLAMP || op == PTC_OP_MASKED_FILL ||
                   op == PTC_OP_DROPOUT || op == PTC_OP_TO || op == PTC_OP_TRIU ||
                   op == PTC_OP_TRIL || op == PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE ||
                   op == PTC_OP_PRIMS_DEVICE_PUT;
        if ((ptc_op_flags(op) & PTC_F_POINTWISE) && !own)
            ck_assert_msg(row[op], "%s is pointwise but has no row in ir/pointwise.def",
                          ptc_op_name(op));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lower");
    TCase *tc = tcase_create("lower");
    tcase_add_test(tc, ix_reshape_roundtrip_static);
    tcase_add_test(tc, ix_symbolic);
    tcase_add_test(tc, ix_flatten_folds_back);
    tcase_add_test(tc, dim_div_exact);
    tcase_add_test(tc, verifier_catches);
    tcase_add_test(tc, memplan_reuse_and_check);
    tcase_add_test(tc, memplan_puts_the_longer_lived_of_equal_sizes_lower);
    tcase_add_test(tc, memplan_segments_allocate_late_temporaries_late);
    tcase_add_test(tc, memplan_keeps_one_arena_where_segments_save_nothing);
    tcase_add_test(tc, fusion_goldens);
    tcase_add_test(tc, plan_of_a_chain);
    tcase_add_test(tc, last_reads_match_a_scan_per_buffer);
    tcase_add_test(tc, combined_temporaries_never_share_bytes);
    tcase_add_test(tc, long_chain_schedules_in_linear_work);
    tcase_add_test(tc, lowering_out_of_memory_is_an_error);
    tcase_add_test(tc, pointwise_table_matches_ops);
    tcase_set_timeout(tc, 60); /* the sanitizer build on a loaded machine */
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
