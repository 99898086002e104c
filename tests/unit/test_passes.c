/* Decomposition and the prims clean-ups: torch-level graphs become prims
 * only, with provenance, locations and explicit broadcasting / promotion;
 * DCE, CSE and constant folding do what they say and keep graphs valid. */
#include "passes/passes.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static ptc_module *parse(const char *text)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "test", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    return m;
}

static int count_op(const ptc_graph *g, ptc_op op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == op;
    return n;
}

START_TEST(decompose_to_prims)
{
    ptc_module *m = parse(
        "# ptc ir v1\n"
        "graph g(%x: f32[4,8] cpu, %i: i32[4,8] cpu, %w: f32[6,8] cpu, %b: f32[6] cpu) {\n"
        "  %a = add(%x, %i, alpha=2) : f32[4,8]          @ \"m.py\":3:5 \"x + 2 * i\" [blk]\n"
        "  %s = softmax(%a, 1) : f32[4,8]\n"
        "  %l = linear(%s, %w, %b) : f32[4,6]\n"
        "  %n = layer_norm(%l, [6]) : f32[4,6]\n"
        "  %v = var(%n, [1], keepdim=true) : f32[4,1]\n"
        "  %c = cat([%n, %v], 1) : f32[4,7]\n"
        "  %e = gelu(%c) : f32[4,7]\n"
        "  return (%e)\n}\n");
    ptc_error err;
    ptc_graph *p = ptc_decompose(m->graphs[0], &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_simplify(p, &err), 0);
    ck_assert_msg(ptc_ops_verify(p, PTC_STAGE_PRIM, &err) == 0, "%s", err.msg);
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_node *n = p->nodes[i];
        ck_assert(ptc_op_schema(n->op)->stage != PTC_STAGE_TORCH);
        ck_assert_msg(n->nprov >= 1, "node without provenance: %s", ptc_op_name(n->op));
        ck_assert_ptr_nonnull(ptc_graph_find_value(m->graphs[0], n->prov[0]));
    }
    /* promotion is explicit: the i32 operand is converted, the bias broadcast */
    ck_assert_int_ge(count_op(p, PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE), 1);
    ck_assert_int_ge(count_op(p, PTC_OP_PRIMS_BROADCAST_IN_DIM), 1);
    ck_assert_int_eq(count_op(p, PTC_OP_MM), 1);
    ck_assert_int_eq(count_op(p, PTC_OP_PRIMS_VAR_MEAN), 2);
    /* locations and module paths travel with the nodes of %a */
    bool located = false;
    for (int i = 0; i < p->nnodes; i++)
        if (!strcmp(p->nodes[i]->prov[0], "a"))
            located |= p->nodes[i]->loc.line == 3 && p->nodes[i]->module_path &&
                       !strcmp(p->nodes[i]->module_path, "blk");
    ck_assert(located);
    /* the printed prims graph parses back */
    ptc_buf b = {0};
    ptc_print_graph(&b, p);
    ptc_module *again = ptc_parse_module(b.data, b.len, "prims", &err);
    ck_assert_msg(again != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_ops_verify(again->graphs[0], PTC_STAGE_PRIM, &err), 0);
    ptc_module_free(again);
    ptc_buf_free(&b);
    ptc_graph_free(p);
    ptc_module_free(m);
}
END_TEST

START_TEST(dce_cse_fold)
{
    ptc_module *m = parse(
        "# ptc ir v1\n"
        "graph g(%x: f32[4] cpu) {\n"
        "  %0 = prims.exp(%x) : f32[4]\n"
        "  %1 = prims.exp(%x) : f32[4]\n"                         /* CSE with %0 */
        "  %2 = prims.add(%0, %1) : f32[4]\n"
        "  %3 = prims.full([], 2.0, dtype=f32, device=cpu) : f32[]\n"
        "  %4 = prims.broadcast_in_dim(%3, [4], []) : f32[4]\n"   /* folds to a full */
        "  %5 = prims.full([4], 3.0, dtype=f32, device=cpu) : f32[4]\n"
        "  %6 = prims.mul(%4, %5) : f32[4]\n"                     /* folds to full 6 */
        "  %7 = prims.convert_element_type(%6, f64) : f64[4]\n"   /* full 6 in f64 */
        "  %8 = prims.convert_element_type(%2, f32) : f32[4]\n"   /* identity */
        "  %9 = prims.log(%x) : f32[4]\n"                         /* dead */
        "  %10 = prims.convert_element_type(%8, f64) : f64[4]\n"
        "  %11 = prims.add(%10, %7) : f64[4]\n"
        "  return (%11)\n}\n");
    ptc_graph *g = m->graphs[0];
    ptc_error err;
    ck_assert_int_eq(ptc_pass_cse(g), 1);
    ck_assert_int_ge(ptc_pass_fold(g, &err), 4);
    ck_assert_int_ge(ptc_pass_dce(g), 5);
    ck_assert_int_eq(ptc_ops_verify(g, PTC_STAGE_PRIM, &err), 0);
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_EXP), 1);
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_LOG), 0);
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_MUL), 0);
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_BROADCAST_IN_DIM), 0);
    /* the f64 constant is 6 */
    const ptc_node *add = g->outputs[0]->def;
    const ptc_node *k = add->args[1].v->def;
    ck_assert_int_eq(k->op, PTC_OP_PRIMS_FULL);
    ck_assert(ptc_node_arg(k, "fill_value")->f == 6.0);
    /* still computes the same thing */
    ptc_tensor in, out, ref;
    int64_t four = 4;
    ck_assert_int_eq(ptc_tensor_alloc(&in, PTC_F32, 1, &four, &err), 0);
    ptc_tensor_fill_random(&in, 3);
    ck_assert_int_eq(ptc_interp_run(g, &in, 1, &out, NULL, &err), 0);
    ptc_module *orig = parse(
        "# ptc ir v1\ngraph g(%x: f32[4] cpu) {\n"
        "  %0 = prims.exp(%x) : f32[4]\n  %2 = prims.add(%0, %0) : f32[4]\n"
        "  %10 = prims.convert_element_type(%2, f64) : f64[4]\n"
        "  %5 = prims.full([4], 6.0, dtype=f64, device=cpu) : f64[4]\n"
        "  %11 = prims.add(%10, %5) : f64[4]\n  return (%11)\n}\n");
    ck_assert_int_eq(ptc_interp_run(orig->graphs[0], &in, 1, &ref, NULL, &err), 0);
    for (int64_t i = 0; i < 4; i++)
        ck_assert(ptc_tensor_get_f64(&out, &i) == ptc_tensor_get_f64(&ref, &i));
    ptc_tensor_release(&in);
    ptc_tensor_release(&out);
    ptc_tensor_release(&ref);
    ptc_module_free(orig);
    ptc_module_free(m);
}
END_TEST

static int count_mask_args(const ptc_graph *g)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == PTC_OP_SDPA &&
            ptc_node_arg(g->nodes[i], "attn_mask")->kind == PTC_ARG_VALUE)
            n++;
    return n;
}

/* Integer ranges: comparisons that every element answers alike fold, and an
 * attention mask that folds to True (arange(L) >= 0, as Hugging Face builds
 * it under compilation) or to 0.0 is dropped; a False mask, undecided
 * comparisons and values that wrap in their dtype stay. */
static const char RANGES[] =
    "# ptc ir v1\n"
    "graph g(%q: f32[2,4,16,8] cpu, %k: f32[2,4,16,8] cpu, %v: f32[2,4,16,8] cpu) {\n"
    "  %0 = prims.iota(length=16, start=0, step=1, dtype=i64, device=cpu) : i64[16]\n"
    "  %1 = prims.full(shape=[16], fill_value=0, dtype=i64, device=cpu) : i64[16]\n"
    "  %2 = prims.add(%0, %1) : i64[16]\n"
    "  %3 = prims.reshape(%2, shape=[1, 1, 16, 1]) : i64[1,1,16,1]\n"
    "  %4 = prims.full(shape=[1, 1, 16, 1], fill_value=0, dtype=i64, device=cpu) : i64[1,1,16,1]\n"
    "  %5 = prims.ge(%3, %4) : bool[1,1,16,1]\n" /* all True: the mask goes */
    "  %6 = prims.broadcast_in_dim(%5, shape=[2, 1, 16, 16], broadcast_dimensions=[0, 1, 2, 3]) "
    ": bool[2,1,16,16]\n"
    "  %7 = scaled_dot_product_attention(%q, %k, %v, %6, scale=0.125) : f32[2,4,16,8]\n"
    "  %8 = prims.full(shape=[16], fill_value=5, dtype=i64, device=cpu) : i64[16]\n"
    "  %9 = prims.ge(%0, %8) : bool[16]\n"   /* undecided */
    "  %10 = prims.lt(%0, %1) : bool[16]\n"  /* all False */
    "  %11 = prims.sub(%0, %8) : i64[16]\n"  /* [-5, 10] */
    "  %12 = prims.gt(%11, %8) : bool[16]\n" /* undecided */
    "  %13 = prims.ne(%11, %1) : bool[16]\n" /* undecided */
    "  %14 = prims.iota(length=100, start=100, step=1, dtype=i8, device=cpu) : i8[100]\n"
    "  %15 = prims.full(shape=[100], fill_value=0, dtype=i8, device=cpu) : i8[100]\n"
    "  %16 = prims.ge(%14, %15) : bool[100]\n" /* i8 wraps past 127: stays */
    "  %17 = prims.full(shape=[2, 1, 16, 16], fill_value=false, dtype=bool, device=cpu) "
    ": bool[2,1,16,16]\n"
    "  %18 = scaled_dot_product_attention(%q, %k, %v, %17) : f32[2,4,16,8]\n" /* a real mask */
    "  %19 = prims.full(shape=[16, 16], fill_value=0.0, dtype=f32, device=cpu) : f32[16,16]\n"
    "  %20 = scaled_dot_product_attention(%q, %k, %v, %19) : f32[2,4,16,8]\n" /* adds 0: goes */
    "  return (%7, %9, %10, %12, %13, %16, %18, %20)\n}\n";

static bool same_values(const ptc_tensor *a, const ptc_tensor *b)
{
    if (a->ndim != b->ndim || a->dtype != b->dtype)
        return false;
    int64_t n = ptc_tensor_numel(a), idx[PTC_MAX_DIMS];
    for (int64_t f = 0; f < n; f++) {
        int64_t r = f;
        for (int d = a->ndim - 1; d >= 0; d--) {
            idx[d] = r % a->sizes[d];
            r /= a->sizes[d];
        }
        double x = ptc_tensor_get_f64(a, idx), y = ptc_tensor_get_f64(b, idx);
        if (!(x == y || (isnan(x) && isnan(y)) || fabs(x - y) <= 1e-6 * fabs(y)))
            return false;
    }
    return true;
}

START_TEST(range_fold)
{
    ptc_module *m = parse(RANGES), *orig = parse(RANGES);
    ptc_graph *g = m->graphs[0];
    ptc_error err;
    ck_assert_int_eq(count_mask_args(g), 3);
    ck_assert_int_eq(ptc_simplify(g, &err), 0);
    ck_assert_int_eq(ptc_ops_verify(g, PTC_STAGE_PRIM, &err), 0);
    ck_assert_int_eq(count_mask_args(g), 1); /* the False one */
    ck_assert_int_eq(g->outputs[0]->def->op, PTC_OP_SDPA);
    ck_assert_int_eq(g->outputs[1]->def->op, PTC_OP_PRIMS_GE);
    ck_assert_int_eq(g->outputs[2]->def->op, PTC_OP_PRIMS_FULL);
    ck_assert(!ptc_node_arg(g->outputs[2]->def, "fill_value")->b);
    ck_assert_int_eq(g->outputs[3]->def->op, PTC_OP_PRIMS_GT);
    ck_assert_int_eq(g->outputs[4]->def->op, PTC_OP_PRIMS_NE);
    ck_assert_int_eq(g->outputs[5]->def->op, PTC_OP_PRIMS_GE);
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_IOTA), 2);
    /* the same results as the graph before folding */
    ptc_tensor in[3], out[8], ref[8];
    int64_t shape[4] = {2, 4, 16, 8};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ptc_tensor_alloc(&in[i], PTC_F32, 4, shape, &err), 0);
        ptc_tensor_fill_random(&in[i], 11 + (uint64_t)i);
    }
    ck_assert_msg(ptc_interp_run(g, in, 3, out, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(ptc_interp_run(orig->graphs[0], in, 3, ref, NULL, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(same_values(&out[i], &ref[i]), "output %d", i);
        ptc_tensor_release(&out[i]);
        ptc_tensor_release(&ref[i]);
    }
    for (int i = 0; i < 3; i++)
        ptc_tensor_release(&in[i]);
    ptc_module_free(orig);
    ptc_module_free(m);
}
END_TEST

/* Attention's boolean masks become additive in the graph (torch makes them
 * so inside its attention, launching where and scalar_tensor per call): a
 * real mask is a where of 0 and -inf in the query's dtype; one that folds
 * to True (Hugging Face's arange(L) >= 0) still goes away. */
static const char BOOL_MASKS[] =
    "# ptc ir v1\n"
    "graph g(%q: f32[2,4,16,8] cpu, %k: f32[2,4,16,8] cpu, %v: f32[2,4,16,8] cpu,"
    " %m: bool[2,1,16,16] cpu) {\n"
    "  %0 = scaled_dot_product_attention(%q, %k, %v, %m) : f32[2,4,16,8]\n"
    "  %1 = prims.iota(length=16, start=0, step=1, dtype=i64, device=cpu) : i64[16]\n"
    "  %2 = prims.full(shape=[16], fill_value=0, dtype=i64, device=cpu) : i64[16]\n"
    "  %3 = prims.ge(%1, %2) : bool[16]\n"
    "  %4 = prims.broadcast_in_dim(%3, shape=[2, 1, 16, 16], broadcast_dimensions=[3]) "
    ": bool[2,1,16,16]\n"
    "  %5 = scaled_dot_product_attention(%q, %k, %v, %4, scale=0.125) : f32[2,4,16,8]\n"
    "  return (%0, %5)\n}\n";

START_TEST(boolean_attention_masks_become_additive)
{
    ptc_module *m = parse(BOOL_MASKS);
    ptc_error err;
    ptc_graph *p = ptc_decompose(m->graphs[0], &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_simplify(p, &err), 0);
    ck_assert_int_eq(ptc_ops_verify(p, PTC_STAGE_PRIM, &err), 0);
    ck_assert_int_eq(count_mask_args(p), 1);
    const ptc_value *mask = ptc_node_arg(p->outputs[0]->def, "attn_mask")->v;
    ck_assert_int_eq(mask->type.dtype, PTC_F32);
    ck_assert_int_eq(mask->def->op, PTC_OP_PRIMS_WHERE);
    ck_assert_int_eq(ptc_node_arg(p->outputs[1]->def, "attn_mask")->kind, PTC_ARG_NONE);
    /* eager's results, a fully masked row (zeros) included */
    ptc_tensor in[4], out[2], ref[2];
    int64_t shape[4] = {2, 4, 16, 8}, mshape[4] = {2, 1, 16, 16};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ptc_tensor_alloc(&in[i], PTC_F32, 4, shape, &err), 0);
        ptc_tensor_fill_random(&in[i], 21 + (uint64_t)i);
    }
    ck_assert_int_eq(ptc_tensor_alloc(&in[3], PTC_BOOL, 4, mshape, &err), 0);
    ptc_tensor_fill_random(&in[3], 5);
    for (int64_t s = 0; s < 16; s++)
        ptc_tensor_set_f64(&in[3], (int64_t[]){1, 0, 3, s}, 0);
    ck_assert_msg(ptc_interp_run(p, in, 4, out, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(ptc_interp_run(m->graphs[0], in, 4, ref, NULL, &err) == 0, "%s", err.msg);
    for (int64_t h = 0; h < 4; h++)
        ck_assert(ptc_tensor_get_f64(&out[0], (int64_t[]){1, h, 3, 5}) == 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(same_values(&out[i], &ref[i]), "output %d", i);
        ptc_tensor_release(&out[i]);
        ptc_tensor_release(&ref[i]);
    }
    for (int i = 0; i < 4; i++)
        ptc_tensor_release(&in[i]);
    ptc_graph_free(p);
    ptc_module_free(m);
}
END_TEST

/* A tied weight's gradient, the output layer's plus the embedding's
 * (a scatter into zeros), is one scatter into the first: no zero-filled
 * buffer and no scatter result beside the sum, both as large as the weight. */
static const char TIED_GRADIENT[] =
    "# ptc ir v1\n"
    "graph g(%w: f32[10,4] cpu, %i: i64[6,4] cpu, %s: f32[6,4] cpu) {\n"
    "  %0 = prims.full(shape=[10, 4], fill_value=0.0, dtype=f32, device=cpu) : f32[10,4]\n"
    "  %1 = prims.scatter_add(%0, 0, %i, %s) : f32[10,4]\n"
    "  %2 = prims.add(%w, %1) : f32[10,4]\n"
    "  %3 = prims.add(%1, %w) : f32[10,4]\n"
    "  return (%2, %3)\n}\n";

START_TEST(sums_with_a_scatter_into_zeros_scatter_into_the_other)
{
    ptc_module *m = parse(TIED_GRADIENT), *orig = parse(TIED_GRADIENT);
    ptc_graph *g = m->graphs[0];
    ptc_error err;
    ck_assert_int_eq(ptc_simplify(g, &err), 0);
    ck_assert_int_eq(ptc_ops_verify(g, PTC_STAGE_PRIM, &err), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(g->outputs[k]->def->op, PTC_OP_PRIMS_SCATTER_ADD);
        ck_assert_int_eq(g->outputs[k]->def->args[0].v->input_index, 0); /* into %w */
    }
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_FULL), 0);
    ck_assert_int_eq(count_op(g, PTC_OP_PRIMS_ADD), 0);
    /* the same sums as before (rows hit twice: the order of two adds) */
    ptc_tensor in[3], out[2], ref[2];
    int64_t wshape[2] = {10, 4}, ishape[2] = {6, 4};
    ck_assert_int_eq(ptc_tensor_alloc(&in[0], PTC_F32, 2, wshape, &err), 0);
    ck_assert_int_eq(ptc_tensor_alloc(&in[1], PTC_I64, 2, ishape, &err), 0);
    ck_assert_int_eq(ptc_tensor_alloc(&in[2], PTC_F32, 2, ishape, &err), 0);
    ptc_tensor_fill_random(&in[0], 3);
    ptc_tensor_fill_random(&in[2], 4);
    for (int64_t r = 0; r < 6; r++)
        for (int64_t c = 0; c < 4; c++)
            ptc_tensor_set_f64(&in[1], (int64_t[]){r, c}, (double)((r * 7 + c) % 5));
    ck_assert_msg(ptc_interp_run(g, in, 3, out, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(ptc_interp_run(orig->graphs[0], in, 3, ref, NULL, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
        for (int64_t r = 0; r < 10; r++)
            for (int64_t c = 0; c < 4; c++) {
                double x = ptc_tensor_get_f64(&out[k], (int64_t[]){r, c});
                double y = ptc_tensor_get_f64(&ref[k], (int64_t[]){r, c});
                ck_assert_msg(fabs(x - y) <= 1e-5 * (1 + fabs(y)), "%d [%lld,%lld]: %g vs %g", k,
                              (long long)r, (long long)c, x, y);
            }
        ptc_tensor_release(&out[k]);
        ptc_tensor_release(&ref[k]);
    }
    for (int i = 0; i < 3; i++)
        ptc_tensor_release(&in[i]);
    ptc_module_free(orig);
    ptc_module_free(m);
}
END_TEST

START_TEST(decompose_symbolic_and_errors)
{
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[s0,6] cpu) {\n"
                          "  %0 = mean(%x, [0]) : f32[6]\n"
                          "  %1 = roll(%x, [2], [0]) : f32[s0,6]\n"
                          "  %2 = view(%1, [6, s0]) : f32[6,s0]\n"
                          "  return (%0, %2)\n}\n");
    ptc_error err;
    ptc_graph *p = ptc_decompose(m->graphs[0], &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_ops_verify(p, PTC_STAGE_PRIM, &err), 0);
    /* a symbolic count: mean comes from var_mean */
    ck_assert_int_eq(count_op(p, PTC_OP_PRIMS_VAR_MEAN), 1);
    ptc_graph_free(p);
    ptc_module_free(m);
}
END_TEST

/* Fills t with values in [lo, lo + 1) from a small LCG. */
static void fill(ptc_tensor *t, double lo, uint32_t *seed)
{
    int64_t idx[PTC_MAX_DIMS] = {0};
    for (int64_t e = 0; e < ptc_tensor_numel(t); e++) {
        int64_t r = e;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = r % t->sizes[d];
            r /= t->sizes[d];
        }
        *seed = *seed * 1664525u + 1013904223u;
        ptc_tensor_set_f64(t, idx, lo + (double)(*seed >> 8) / (double)(1u << 24));
    }
}

/* The largest difference between g and h's first outputs on the same
 * random inputs (the reference interpreter). */
static double max_difference(const ptc_graph *g, const ptc_graph *h)
{
    ptc_tensor in[8], a, b;
    ptc_error err;
    uint32_t seed = 7;
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_ttype *ty = &g->inputs[i]->type;
        int64_t sizes[PTC_MAX_DIMS];
        for (int d = 0; d < ty->ndim; d++)
            sizes[d] = ty->shape[d].value;
        ck_assert_int_eq(ptc_tensor_alloc(&in[i], ty->dtype, ty->ndim, sizes, &err), 0);
        fill(&in[i], -0.5, &seed);
    }
    ck_assert_msg(ptc_interp_run(g, in, g->ninputs, &a, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(ptc_interp_run(h, in, h->ninputs, &b, NULL, &err) == 0, "%s", err.msg);
    double worst = 0;
    int64_t idx[PTC_MAX_DIMS] = {0};
    for (int64_t e = 0; e < ptc_tensor_numel(&a); e++) {
        int64_t r = e;
        for (int d = a.ndim - 1; d >= 0; d--) {
            idx[d] = r % a.sizes[d];
            r /= a.sizes[d];
        }
        worst = fmax(worst, fabs(ptc_tensor_get_f64(&a, idx) - ptc_tensor_get_f64(&b, idx)));
    }
    for (int i = 0; i < g->ninputs; i++)
        ptc_tensor_release(&in[i]);
    ptc_tensor_release(&a);
    ptc_tensor_release(&b);
    return worst;
}

START_TEST(eval_batch_norm_folds_into_the_convolution)
{
    /* %c's BatchNorm folds; %d's raw output is read twice, so its scale stays */
    ptc_module *m = parse(
        "# ptc ir v1\n"
        "graph g(%x: f32[2,3,6,6] cpu, %w: f32[4,3,3,3] cpu, %mean: f32[4] cpu, %var: f32[4] cpu,"
        " %gamma: f32[4] cpu, %beta: f32[4] cpu, %w2: f32[4,4,1,1] cpu) {\n"
        "  %c = conv2d(%x, %w, padding=[1, 1]) : f32[2,4,6,6]\n"
        "  %n = batch_norm(%c, %gamma, %beta, %mean, %var, training=false, momentum=0.1, eps=1e-05)"
        " : f32[2,4,6,6]\n"
        "  %r = relu(%n) : f32[2,4,6,6]\n"
        "  %d = conv2d(%r, %w2) : f32[2,4,6,6]\n"
        "  %v = view(%gamma, [4, 1, 1]) : f32[4,1,1]\n"
        "  %s = mul(%d, %v) : f32[2,4,6,6]\n"
        "  %o = add(%s, %d) : f32[2,4,6,6]\n"
        "  return (%o)\n}\n");
    ptc_error err;
    ptc_graph *p = ptc_decompose(m->graphs[0], &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_graph *unfolded = ptc_graph_clone(p, NULL);
    ck_assert_int_eq(ptc_pass_fold_conv_affine(p, &err), 1);
    ck_assert_int_eq(ptc_simplify(p, &err), 0);
    ck_assert_msg(ptc_ops_verify(p, PTC_STAGE_PRIM, &err) == 0, "%s", err.msg);
    /* nothing over the activations but the relu and %d's scale and add */
    int over_activations = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const ptc_node *n = p->nodes[i];
        over_activations += n->outs[0]->type.ndim == 4 && n->outs[0]->type.shape[0].value == 2 &&
                            n->op != PTC_OP_CONVOLUTION && !(ptc_op_flags(n->op) & PTC_F_VIEW) &&
                            n->op != PTC_OP_PRIMS_FULL;
    }
    ck_assert_int_eq(over_activations, 4); /* relu: le + where; mul; add */
    ck_assert_double_le(max_difference(unfolded, p), 1e-5);
    ptc_graph_free(unfolded);
    ptc_graph_free(p);
    ptc_module_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("passes");
    TCase *tc = tcase_create("passes");
    tcase_add_test(tc, decompose_to_prims);
    tcase_add_test(tc, dce_cse_fold);
    tcase_add_test(tc, range_fold);
    tcase_add_test(tc, boolean_attention_masks_become_additive);
    tcase_add_test(tc, sums_with_a_scatter_into_zeros_scatter_into_the_other);
    tcase_add_test(tc, decompose_symbolic_and_errors);
    tcase_add_test(tc, eval_batch_norm_folds_into_the_convolution);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
