/* ptminify's parts, one at a time: PTC_INJECT parsing and actions, the
 * allclose comparison, repro folders, message masking and signatures, ddmin
 * on synthetic predicates, the graph surgery (removed nodes become inputs fed
 * with recorded values, leaves become outputs, dead code and shrinking), and
 * children that crash, hang, fail and run out of memory without taking the
 * test down.
 */
#include "tools/minifier/minify.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Under AddressSanitizer children get no address-space limit (see child.c):
 * the out-of-memory case cannot happen there. */
#ifdef __SANITIZE_ADDRESS__
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static ptc_module *parse(const char *src)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "# ptc ir v1\n%s", src);
    ptc_error err;
    ptc_module *m = ptc_parse_module(b.data, b.len, "test.ptir", &err);
    if (!m)
        ck_abort_msg("parse: %s", err.msg);
    ptc_buf_free(&b);
    return m;
}

static ptc_tensor filled(ptc_dtype dt, int ndim, const int64_t *sizes, uint64_t seed)
{
    ptc_tensor t;
    ptc_error err;
    ck_assert_int_eq(ptc_tensor_alloc(&t, dt, ndim, sizes, &err), 0);
    ptc_tensor_fill_random(&t, seed);
    return t;
}

static double at(const ptc_tensor *t, int64_t flat)
{
    int64_t idx[PTC_MAX_DIMS] = {0};
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = flat % t->sizes[d];
        flat /= t->sizes[d];
    }
    return ptc_tensor_get_f64(t, idx);
}

/* ---- fault injection -------------------------------------------------------------- */

START_TEST(test_inject_parse)
{
    ptc_error err;
    ck_assert_int_eq(ptc_inject_configure("codegen:relu:crash,runtime:*:wrong@3", &err), 0);
    ck_assert_str_eq(ptc_inject_spec(), "codegen:relu:crash,runtime:*:wrong@3");
    static const char *const bad[] = {
        "codegen:relu",      /* no kind */
        "interp:relu:crash", /* the oracle */
        "codegen:frobnicate:error",
        "codegen:relu:explode",
        "runtime:relu:wrong@0",
        "runtime:relu:wrong@x",
        "lower::error",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(ptc_inject_configure(bad[i], &err), -1);
        ck_assert_int_eq(err.cls, PTC_ERR_PARSE);
        ck_assert_ptr_nonnull(strstr(err.msg, "PTC_INJECT"));
    }
    ck_assert_int_eq(ptc_inject_configure("interp:relu:crash", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "oracle"));
    ck_assert_int_eq(ptc_inject_configure(NULL, &err), 0);
    ck_assert_str_eq(ptc_inject_spec(), "");
}
END_TEST

START_TEST(test_inject_actions)
{
    ptc_error err;
    ck_assert_int_eq(ptc_inject_configure("lower:exp:error,runtime:add:wrong@2", &err), 0);
    char where[32] = "";
    ptc_inject_track(where, sizeof where);
    ck_assert_int_eq(ptc_inject_hit("lower", PTC_OP_RELU, &err), PTC_INJECT_NONE);
    ck_assert_str_eq(where, "lower");
    ck_assert_int_eq(ptc_inject_hit("codegen", PTC_OP_EXP, &err), PTC_INJECT_NONE);
    ck_assert_str_eq(where, "codegen");
    ck_assert_int_eq(ptc_inject_hit("lower", PTC_OP_EXP, &err), PTC_INJECT_ERROR);
    ck_assert_int_eq(err.cls, PTC_ERR_INJECTED);
    ck_assert_str_eq(err.stage, "lower");
    ck_assert_ptr_nonnull(strstr(err.msg, "exp"));
    /* @2: only the second matching query fires. */
    ck_assert_int_eq(ptc_inject_hit("runtime", PTC_OP_ADD, &err), PTC_INJECT_NONE);
    ck_assert_int_eq(ptc_inject_hit("runtime", PTC_OP_ADD, &err), PTC_INJECT_WRONG);
    ck_assert_int_eq(ptc_inject_hit("runtime", PTC_OP_ADD, &err), PTC_INJECT_NONE);
    ptc_inject_track(NULL, 0);
    ptc_inject_configure(NULL, &err);
}
END_TEST

START_TEST(test_inject_crash_and_perturb)
{
    ptc_error err;
    ck_assert_int_eq(ptc_inject_configure("prims:softmax:crash", &err), 0);
    pid_t pid = fork();
    if (pid == 0) {
        ptc_inject_hit("prims", PTC_OP_SOFTMAX, &err);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    ptc_inject_configure(NULL, &err);
    /* Perturbed values are out of any tolerance. */
    int64_t sizes[1] = {64};
    ptc_tensor a = filled(PTC_F32, 1, sizes, 7), b = filled(PTC_F32, 1, sizes, 7);
    ptc_inject_perturb(&b);
    ptc_mismatch m = {0};
    ck_assert(!ptc_tensor_close(&b, &a, 1e-2, 1e-2, &m));
    ck_assert_int_eq(m.nbad, 64);
    ptc_tensor i = filled(PTC_I64, 1, sizes, 3), j = filled(PTC_I64, 1, sizes, 3);
    ptc_inject_perturb(&j);
    ck_assert(!ptc_tensor_close(&j, &i, -1, -1, &m));
    ck_assert_int_eq(m.nbad, 64);
    ptc_tensor_release(&a);
    ptc_tensor_release(&b);
    ptc_tensor_release(&i);
    ptc_tensor_release(&j);
}
END_TEST

/* ---- comparison ------------------------------------------------------------------- */

START_TEST(test_tensor_close)
{
    int64_t sizes[1] = {4};
    ptc_tensor a = filled(PTC_F32, 1, sizes, 1), b = filled(PTC_F32, 1, sizes, 1);
    int64_t i0[1] = {0}, i2[1] = {2};
    ptc_mismatch m = {0};
    ck_assert(ptc_tensor_close(&a, &b, -1, -1, &m));
    ptc_tensor_set_f64(&a, i0, NAN);
    ptc_tensor_set_f64(&b, i0, NAN);
    ck_assert(ptc_tensor_close(&a, &b, -1, -1, &m)); /* NaN equals NaN */
    ptc_tensor_set_f64(&a, i2, 1.0);
    ptc_tensor_set_f64(&b, i2, 1.00005);
    ck_assert(ptc_tensor_close(&a, &b, -1, -1, &m)); /* within rtol 1e-4 */
    ck_assert(!ptc_tensor_close(&a, &b, 1e-6, 1e-6, &m));
    ck_assert_int_eq(m.index, 2);
    ptc_tensor_set_f64(&a, i2, INFINITY);
    ptc_tensor_set_f64(&b, i2, -INFINITY);
    ck_assert(!ptc_tensor_close(&a, &b, 1, 1, &m));
    char buf[512];
    m.output = 3;
    ptc_mismatch_format(&m, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "output 3: 1 of 4 elements differ, worst at [2]"));
    int64_t other[2] = {2, 2};
    ptc_tensor c = filled(PTC_F32, 2, other, 1);
    ck_assert(!ptc_tensor_close(&a, &c, -1, -1, &m));
    ck_assert_str_eq(m.what, "shape [4] vs [2,2]");
    ptc_tensor_release(&a);
    ptc_tensor_release(&b);
    ptc_tensor_release(&c);
}
END_TEST

/* ---- repro folders ------------------------------------------------------------------- */

START_TEST(test_repro_write)
{
    ptc_module *mod = parse("graph g(%x: f32[2,3] cpu) {\n  %0 = relu(%x) : f32[2,3]\n"
                            "  return (%0)\n}\n");
    char dir[] = "/tmp/ptc_test_repro_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("PTC_REPRO", dir, 1);
    ptc_error err;
    ck_assert_int_eq(ptc_inject_configure("codegen:relu:error", &err), 0);
    int64_t sizes[2] = {2, 3};
    ptc_tensor x = filled(PTC_F32, 2, sizes, 5);
    ptc_repro_info info = {"error", "codegen", "InjectedError", "boom \"quoted\"", "cpu", 0, 0};
    char path[1024];
    ck_assert_int_eq(ptc_repro_write(NULL, mod->graphs[0], &x, 1, &info, path, sizeof path, &err),
                     0);
    ck_assert_ptr_nonnull(strstr(path, dir));
    char file[1100];
    snprintf(file, sizeof file, "%s/repro.json", path);
    size_t len;
    char *text = ptc_read_file(file, &len, &err);
    ck_assert_ptr_nonnull(text);
    ptc_arena *a = ptc_arena_new();
    ptc_json *j = ptc_json_parse(a, text, len, file, &err);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(ptc_json_str(j, "kind", ""), "error");
    ck_assert_str_eq(ptc_json_str(j, "stage", ""), "codegen");
    ck_assert_str_eq(ptc_json_str(j, "message", ""), "boom \"quoted\"");
    ck_assert_str_eq(ptc_json_str(j, "inject", ""), "codegen:relu:error");
    ck_assert_str_eq(ptc_json_str(j, "inputs", ""), "inputs.bin");
    snprintf(file, sizeof file, "%s/inputs.bin", path);
    ptc_tensorfile tf;
    ck_assert_int_eq(ptc_tensorfile_read(file, &tf, &err), 0);
    ck_assert_int_eq(tf.n, 1);
    ck_assert_str_eq(tf.names[0], "x");
    ck_assert(ptc_tensor_close(&tf.tensors[0], &x, 0, 0, NULL));
    snprintf(file, sizeof file, "%s/graph.ptir", path);
    ptc_module *back = ptc_parse_file(file, &err);
    ck_assert_ptr_nonnull(back);
    /* The same failure again gets the folder it has; another failure a
     * folder of its own; a bad kind is refused. */
    char path2[1024];
    ck_assert_int_eq(
        ptc_repro_write(NULL, mod->graphs[0], NULL, 0, &info, path2, sizeof path2, &err), 0);
    ck_assert_str_eq(path, path2);
    info.stage = "lower";
    ck_assert_int_eq(
        ptc_repro_write(NULL, mod->graphs[0], NULL, 0, &info, path2, sizeof path2, &err), 0);
    ck_assert_str_ne(path, path2);
    info.kind = "weird";
    ck_assert_int_eq(ptc_repro_write(NULL, mod->graphs[0], NULL, 0, &info, NULL, 0, &err), -1);
    ptc_inject_configure(NULL, &err);
    unsetenv("PTC_REPRO");
    ptc_tensorfile_free(&tf);
    ptc_module_free(back);
    ptc_module_free(mod);
    ptc_arena_free(a);
    free(text);
    ptc_tensor_release(&x);
}
END_TEST

/* repro.py spells a pointwise prim torch.<its loop op's name> (the PW_PRIM
 * rows of ir/pointwise.def), but for those with a spelling of their own. */
START_TEST(test_repro_py_prim_spellings)
{
    ptc_module *mod = parse("graph g(%x: f32[3] cpu, %y: f32[3] cpu, %i: i64[3] cpu) {\n"
                "  %0 = prims.atan2(%x, %y) : f32[3]\n"
                "  %1 = prims.div(%0, %y) : f32[3]\n"
                "  %2 = prims.rsqrt(%1) : f32[3]\n"
                "  %3 = prims.bitwise_xor(%i, %i) : i64[3]\n"
                "  %4 = prims.gt(%2, %x) : bool[3]\n"
                "  %5 = prims.where(%4, %x, %y) : f32[3]\n"
                "  return (%3, %5)\n}\n");
    ck_assert_ptr_nonnull(mod);
    mf_signature sig = {.kind = MF_ERROR};
    mf_result r = {.kind = MF_ERROR};
    mf_options o = {0};
    ptc_buf b = {0};
    ptc_error err;
    ck_assert_int_eq(mf_emit_python(mod->graphs[0], &sig, &r, &o, &b, &err), 0);
    static const char *const calls[] = {"torch.atan2(", "_prim_div(", "torch.rsqrt(",
                                        "torch.bitwise_xor(", "torch.gt(", "torch.where("};
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++)
        ck_assert_msg(strstr(b.data, calls[i]), "repro.py lacks %s:\n%s", calls[i], b.data);
    ptc_buf_free(&b);
    ptc_module_free(mod);
}
END_TEST

/* ---- masking and signatures ---------------------------------------------------------- */

START_TEST(test_mask)
{
    char out[256];
    mf_mask("node %37 at 0x7ffd12ab: shape [1,64,8,8] vs f32[2] eps 1e-05 -3.5", out, sizeof out);
    ck_assert_str_eq(out, "node %# at 0x#: shape [#,#,#,#] vs f32[#] eps # -#");
    mf_mask("layer1.0.conv1 and x_3 keep their digits; 12abc", out, sizeof out);
    ck_assert_str_eq(out, "layer1.0.conv1 and x_3 keep their digits; #abc");
}
END_TEST

START_TEST(test_check_parse)
{
    mf_check c;
    ptc_error err;
    ck_assert_int_eq(mf_check_parse("crash", &c, &err), 0);
    ck_assert_int_eq(c.kind, MF_CRASH);
    ck_assert_int_eq(mf_check_parse("error:Inject.*relu", &c, &err), 0);
    ck_assert_str_eq(c.regex, "Inject.*relu");
    ck_assert_int_eq(mf_check_parse("accuracy:1e-3:1e-6", &c, &err), 0);
    ck_assert(c.rtol == 1e-3 && c.atol == 1e-6);
    ck_assert_int_eq(mf_check_parse("accuracy", &c, &err), 0);
    ck_assert(c.rtol < 0 && c.atol < 0);
    static const char *const bad[] = {"segfault", "error:(", "accuracy:x", "accuracy:1:2:3",
                                      "accuracy:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_int_eq(mf_check_parse(bad[i], &c, &err), -1);
}
END_TEST

static mf_result error_result(int cls, const char *stage, const char *msg)
{
    mf_result r = {.kind = MF_ERROR, .errclass = cls};
    snprintf(r.stage, sizeof r.stage, "%s", stage);
    snprintf(r.message, sizeof r.message, "%s", msg);
    return r;
}

START_TEST(test_signature)
{
    mf_check any = {.any = true, .rtol = -1, .atol = -1};
    mf_signature sig;
    ptc_error err;
    mf_result r0 = error_result(PTC_ERR_COMPILE, "codegen", "kernel 12: bad index %37 [4,8]");
    ck_assert(mf_check_accepts(&any, &r0));
    ck_assert_int_eq(mf_signature_pin(&sig, &r0, &any, &err), 0);
    mf_result same = error_result(PTC_ERR_COMPILE, "codegen", "kernel 0: bad index %3 [1,1]");
    ck_assert(mf_signature_match(&sig, &same));
    mf_result drift = error_result(PTC_ERR_META, "codegen", "kernel 0: bad index %3 [1,1]");
    ck_assert(!mf_signature_match(&sig, &drift)); /* another class */
    mf_result moved = error_result(PTC_ERR_COMPILE, "lower", "kernel 0: bad index %3 [1,1]");
    ck_assert(!mf_signature_match(&sig, &moved)); /* another stage */
    mf_result other = error_result(PTC_ERR_COMPILE, "codegen", "kernel 0: bad type f16");
    ck_assert(!mf_signature_match(&sig, &other)); /* another message */
    mf_result crash = {.kind = MF_CRASH, .signal = SIGSEGV};
    ck_assert(!mf_signature_match(&sig, &crash));
    char buf[512];
    mf_signature_format(&sig, buf, sizeof buf);
    ck_assert_str_eq(buf, "error CompileError in codegen: kernel #: bad index %# [#,#]");
    mf_signature_free(&sig);
    /* With error:REGEX the regex replaces the message pattern. */
    mf_check re;
    ck_assert_int_eq(mf_check_parse("error:CompileError: kernel [0-9]+", &re, &err), 0);
    ck_assert(mf_check_accepts(&re, &r0));
    ck_assert_int_eq(mf_signature_pin(&sig, &r0, &re, &err), 0);
    ck_assert(mf_signature_match(&sig, &other));
    mf_signature_free(&sig);
    /* Crashes pin the signal and the stage; accuracy only the kind. */
    mf_result c0 = {.kind = MF_CRASH, .signal = SIGSEGV};
    snprintf(c0.stage, sizeof c0.stage, "runtime");
    mf_signature_pin(&sig, &c0, &any, &err);
    mf_result c1 = c0;
    c1.signal = SIGABRT;
    ck_assert(mf_signature_match(&sig, &c0));
    ck_assert(!mf_signature_match(&sig, &c1));
    mf_check crash_check;
    mf_check_parse("crash", &crash_check, &err);
    mf_result hang = {.kind = MF_HANG};
    ck_assert(mf_check_accepts(&crash_check, &hang));
    ck_assert(!mf_check_accepts(&crash_check, &r0));
}
END_TEST

/* ---- ddmin ---------------------------------------------------------------------------- */

typedef struct culprit_ctx {
    int culprits[4], nculprits;
    int tests;
} culprit_ctx;

/* Fails iff every culprit survives the removal of the chunk. */
static int culprit_test(void *ctx, const int *items, int nitems, const mf_chunk *chunks,
                        int nchunks)
{
    culprit_ctx *c = ctx;
    for (int k = 0; k < nchunks; k++) {
        c->tests++;
        bool fails = true;
        for (int u = 0; u < c->nculprits; u++) {
            bool kept = false;
            for (int i = 0; i < nitems; i++)
                if (items[i] == c->culprits[u])
                    kept = i < chunks[k].begin || i >= chunks[k].end;
            fails &= kept;
        }
        if (fails)
            return k;
    }
    return -1;
}

START_TEST(test_ddmin)
{
    int items[200], n = 200;
    for (int i = 0; i < n; i++)
        items[i] = i;
    culprit_ctx one = {{137}, 1, 0};
    mf_ddmin(items, &n, 1, culprit_test, &one);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(items[0], 137);
    ck_assert_int_le(one.tests, 20); /* halving: about 2 log2(200) */
    n = 200;
    for (int i = 0; i < n; i++)
        items[i] = i;
    culprit_ctx two = {{13, 177}, 2, 0};
    mf_ddmin(items, &n, 1, culprit_test, &two);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(items[0], 13);
    ck_assert_int_eq(items[1], 177);
    /* min_items keeps a floor. */
    n = 10;
    for (int i = 0; i < n; i++)
        items[i] = i;
    culprit_ctx none = {{0}, 0, 0};
    mf_ddmin(items, &n, 3, culprit_test, &none);
    ck_assert_int_eq(n, 3);
}
END_TEST

/* ---- graph surgery ---------------------------------------------------------------------- */

static const char *chain = "graph g(%x: f32[4,8] cpu, %w: f32[8] cpu, %unused: f32[3] cpu) {\n"
                           "  %0 = mul(%x, %w) : f32[4,8]\n"
                           "  %1 = tanh(%0) : f32[4,8]\n"
                           "  %2 = add(%1, %0) : f32[4,8]\n"
                           "  %3 = exp(%2) : f32[4,8]\n"
                           "  %4 = neg(%0) : f32[4,8]\n"
                           "  %5 = sum(%3, [1]) : f32[4]\n"
                           "  return (%5, %4)\n"
                           "}\n";

typedef struct fixture {
    ptc_module *mod;
    ptc_tensor inputs[3];
    mf m;
} fixture;

static int keep_all(void *ctx, const ptc_node *n, const ptc_tensor *outs)
{
    ptc_tensor *rec = ctx;
    for (int i = 0; i < n->nout; i++) {
        rec[n->outs[i]->id] = outs[i];
        ptc_tensor_retain(&rec[n->outs[i]->id]);
    }
    return 0;
}

static void setup_fixture(fixture *f, const char *src)
{
    memset(f, 0, sizeof *f);
    f->mod = parse(src);
    ptc_graph *g = f->mod->graphs[0];
    for (int i = 0; i < g->ninputs; i++) {
        int64_t sizes[PTC_MAX_DIMS];
        ptc_error err;
        ck_assert_int_eq(ptc_eval_shape(&g->inputs[i]->type, NULL, sizes, &err), 0);
        f->inputs[i] = filled(g->inputs[i]->type.dtype, g->inputs[i]->type.ndim, sizes, 11 + i);
    }
    mf *m = &f->m;
    m->g = g;
    m->inputs = f->inputs;
    m->nnodes = g->nnodes;
    m->nvalues = g->nvalues;
    m->recorded = calloc((size_t)g->nvalues, sizeof *m->recorded);
    ptc_tensor outs[4];
    ptc_run_opts ro = {.on_node = keep_all, .ctx = m->recorded};
    ptc_error err;
    ck_assert_int_eq(ptc_interp_run(g, f->inputs, g->ninputs, outs, &ro, &err), 0);
    for (int i = 0; i < g->noutputs; i++)
        ptc_tensor_release(&outs[i]);
    mf_cand_init(m, &m->best);
}

static void free_fixture(fixture *f)
{
    for (int v = 0; v < f->m.nvalues; v++)
        ptc_tensor_release(&f->m.recorded[v]);
    free(f->m.recorded);
    mf_cand_free(&f->m.best);
    for (int i = 0; i < f->mod->graphs[0]->ninputs; i++)
        ptc_tensor_release(&f->inputs[i]);
    ptc_module_free(f->mod);
}

static const char *out_names(const mf_case *c, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < c->g->noutputs; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? "," : "", c->g->outputs[i]->name);
    return buf;
}

START_TEST(test_surgery_remove_nodes)
{
    fixture f;
    setup_fixture(&f, chain);
    mf *m = &f.m;
    mf_case c;
    ptc_error err;
    /* The original builds to itself. */
    ck_assert_int_eq(mf_cand_build(m, &m->best, &c, &err), 0);
    ck_assert_int_eq(c.g->nnodes, 6);
    ck_assert_int_eq(c.g->ninputs, 3);
    ck_assert_ptr_nonnull(c.want);
    mf_case_free(&c);
    /* Removing %0 (mul) and %1 (tanh): their values become inputs with their
     * recorded data; nothing else changes. */
    mf_cand cand = {0};
    mf_cand_copy(m, &cand, &m->best);
    int pos[2] = {0, 1};
    mf_cand_remove_nodes(m, &cand, pos, 2);
    ck_assert_int_eq(mf_cand_build(m, &cand, &c, &err), 0);
    ck_assert_int_eq(c.g->nnodes, 4);
    ck_assert_int_eq(c.g->ninputs, 5); /* x, w, unused, then %1 and %0 in order of use */
    ck_assert_str_eq(c.g->inputs[3]->name, "1");
    ck_assert_str_eq(c.g->inputs[4]->name, "0");
    const ptc_value *v0 = ptc_graph_find_value(m->g, "0");
    ck_assert(ptc_tensor_close(&c.inputs[4], &m->recorded[v0->id], 0, 0, NULL));
    char names[128];
    ck_assert_str_eq(out_names(&c, names, sizeof names), "5,4");
    /* The interpreter on the candidate gives the recorded outputs. */
    ptc_tensor outs[4];
    ck_assert_int_eq(ptc_interp_run(c.g, c.inputs, c.ninputs, outs, NULL, &err), 0);
    ck_assert(ptc_tensor_close(&outs[0], &c.want[0], 0, 0, NULL));
    ptc_tensor_release(&outs[0]);
    ptc_tensor_release(&outs[1]);
    mf_case_free(&c);
    /* Removing %5 (sum): %3 loses its only user and becomes an output. */
    int last = 5;
    mf_cand_remove_nodes(m, &cand, &last, 1);
    ck_assert_int_eq(mf_cand_build(m, &cand, &c, &err), 0);
    ck_assert_str_eq(out_names(&c, names, sizeof names), "4,3");
    mf_case_free(&c);
    mf_cand_free(&cand);
    free_fixture(&f);
}
END_TEST

START_TEST(test_surgery_outputs_dead_code_inputs)
{
    fixture f;
    setup_fixture(&f, chain);
    mf *m = &f.m;
    mf_case c;
    ptc_error err;
    mf_cand cand = {0};
    mf_cand_copy(m, &cand, &m->best);
    /* Dropping output %5 drops the chain feeding only it: sum, exp, add, tanh. */
    const ptc_value *v5 = ptc_graph_find_value(m->g, "5");
    mf_cand_remove_outputs(m, &cand, &v5->id, 1);
    ck_assert_int_eq(mf_cand_nodes(m, &cand), 2);
    ck_assert_int_eq(mf_cand_build(m, &cand, &c, &err), 0);
    ck_assert_int_eq(c.g->nnodes, 2);
    mf_case_free(&c);
    /* %unused is used by nothing. */
    int idx[3];
    ck_assert_int_eq(mf_cand_unused_inputs(m, &cand, idx), 1);
    ck_assert_int_eq(idx[0], 2);
    cand.drop[2] = true;
    ck_assert_int_eq(mf_cand_build(m, &cand, &c, &err), 0);
    ck_assert_int_eq(c.g->ninputs, 2);
    mf_case_free(&c);
    ck_assert_int_eq(mf_cand_dead_nodes(m, &cand, idx), 0);
    mf_cand_free(&cand);
    free_fixture(&f);
}
END_TEST

START_TEST(test_surgery_shrink)
{
    fixture f;
    setup_fixture(&f, chain);
    mf *m = &f.m;
    mf_case c;
    ptc_error err;
    mf_cand cand = {0};
    mf_cand_copy(m, &cand, &m->best);
    /* Shrinking %x to [2,8]: every type is inferred again; the data is the
     * leading block of the original. */
    const ptc_value *x = m->g->inputs[0];
    int64_t *sizes = &cand.sizes[(size_t)x->id * PTC_MAX_DIMS];
    sizes[0] = 2, sizes[1] = 8;
    ck_assert_int_eq(mf_cand_build(m, &cand, &c, &err), 0);
    ck_assert_int_eq(c.g->outputs[0]->type.shape[0].value, 2);
    ck_assert_ptr_null(c.want); /* the recorded outputs no longer apply */
    ck_assert(at(&c.inputs[0], 9) == at(&f.inputs[0], 9));
    mf_case_free(&c);
    /* Shrinking %x's inner dim breaks the broadcast with %w: not a graph. */
    sizes[0] = 4, sizes[1] = 3;
    ck_assert_int_eq(mf_cand_build(m, &cand, &c, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_META);
    mf_cand_free(&cand);
    free_fixture(&f);
}
END_TEST

/* ---- children ------------------------------------------------------------------------ */

static void exec_segv(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    ptc_error err;
    ptc_inject_configure("codegen:relu:crash", &err);
    ptc_inject_hit("codegen", PTC_OP_RELU, &err);
}

static void exec_hang(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    for (;;)
        pause();
}

static void exec_abort(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    PTC_ASSERT(c != NULL && "the compiler broke an invariant");
}

static void exec_oom(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    ptc_arena *a = ptc_arena_new();
    ptc_arena_alloc(a, (size_t)1 << 30); /* over the limit: aborts with "out of memory" */
}

static void exec_exit(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    exit(3);
}

START_TEST(test_children)
{
    mf_limits lim = {.timeout_s = 0.5, .mem_mb = 512, .jobs = 2};
    ptc_error err;
    mf_pool *p = mf_pool_new(&lim, &err);
    ck_assert_ptr_nonnull(p);
    mf_exec_opts o = {0};
    mf_case c = {0};
    mf_result r;
    struct {
        mf_exec_fn fn;
        int kind, signal;
        const char *stage, *detail;
    } cases[] = {
        {exec_segv, MF_CRASH, SIGSEGV, "codegen", ""},
        {exec_hang, MF_HANG, 0, "", ""},
        {exec_abort, MF_CRASH, SIGABRT, "", "assertion failed"},
        {exec_oom, MF_OOM, 0, "", ""},
        {exec_exit, MF_CRASH, 0, "", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (SANITIZED && cases[i].kind == MF_OOM)
            continue;
        ck_assert_int_ge(mf_pool_start(p, i == 4 ? &c : NULL, cases[i].fn, &o), 0);
        ck_assert_int_ge(mf_pool_wait(p, &r), 0);
        ck_assert_int_eq(r.kind, cases[i].kind);
        ck_assert_int_eq(r.signal, cases[i].signal);
        ck_assert_str_eq(r.stage, cases[i].stage);
        ck_assert_ptr_nonnull(strstr(r.message, cases[i].detail));
    }
    ck_assert_int_eq(r.exit_status, 3);
    /* Two at once: both come back. */
    mf_pool_start(p, NULL, exec_hang, &o);
    mf_pool_start(p, NULL, exec_segv, &o);
    int kinds = 0;
    for (int k = 0; k < 2; k++) {
        ck_assert_int_ge(mf_pool_wait(p, &r), 0);
        kinds |= 1 << r.kind;
    }
    ck_assert_int_eq(kinds, (1 << MF_HANG) | (1 << MF_CRASH));
    ck_assert_int_eq(mf_pool_running(p), 0);
    mf_pool_free(p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("minify");
    TCase *t = tcase_create("inject");
    tcase_add_test(t, test_inject_parse);
    tcase_add_test(t, test_repro_py_prim_spellings);
    tcase_add_test(t, test_inject_actions);
    tcase_add_test(t, test_inject_crash_and_perturb);
    tcase_add_test(t, test_tensor_close);
    tcase_add_test(t, test_repro_write);
    suite_add_tcase(s, t);
    TCase *g = tcase_create("signature");
    tcase_add_test(g, test_mask);
    tcase_add_test(g, test_check_parse);
    tcase_add_test(g, test_signature);
    tcase_add_test(g, test_ddmin);
    suite_add_tcase(s, g);
    TCase *u = tcase_create("surgery");
    tcase_add_test(u, test_surgery_remove_nodes);
    tcase_add_test(u, test_surgery_outputs_dead_code_inputs);
    tcase_add_test(u, test_surgery_shrink);
    tcase_add_test(u, test_children);
    suite_add_tcase(s, u);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
