/* Kernels to PTX through LLVM's NVPTX backend.
 *
 * Each kernel becomes one LLVM module holding its entry and, for flat
 * kernels that allow it, a vectorised second entry, or, where its team
 * depends on symbolic sizes, one entry per planned form (plan.c). The module is
 * verified, optimised with a short pipeline (the emitter writes the loop
 * nests itself; what remains is promoting accumulators to registers,
 * folding index arithmetic and hoisting invariants) and printed as PTX for
 * the target (sm_80 ... sm_90, PTX ISA 7.8, the most LLVM 16 writes). The
 * PTX goes to the disk cache under a key made of the kernel's loop IR, its
 * launch plan, the target and the emitter's sources, so a warm start
 * generates nothing. No GPU is needed here: loading is the runtime's.
 *
 * LLVM's global initialisation happens once; every compile has its own
 * context and target machine, so kernels of a schedule compile in parallel.
 * In a compile worker (worker.c; PTC_COMPILE_WORKER=0 turns it off), a
 * program's PTX is printed by one forked child for all its kernels that
 * miss the cache (ptc_cuda_codegen_all: one fork per compile, from the
 * compiling thread before the loading threads start; the child only runs
 * LLVM, never the CUDA driver), so that a crash inside LLVM fails the
 * compile and not the program. A kernel generated alone (ptc_cuda_codegen)
 * gets a worker of its own, and so it does, whatever the setting, when the
 * process lacks the address space LLVM would need, since LLVM running out of
 * memory aborts the process it runs in.
 */
#include "codegen/cuda/gpu.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef PTC_CUDA_CODEGEN_HASH
#define PTC_CUDA_CODEGEN_HASH "dev"
#endif
#define CODEGEN_VERSION "cuda-1-" PTC_CUDA_CODEGEN_HASH

#define PIPELINE                                                                                   \
    "function(sroa,early-cse<memssa>,instcombine,simplifycfg,"                                     \
    "loop-mssa(licm),gvn,instcombine,simplifycfg,adce)"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool init_ok;

static void init_llvm(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    init_ok = true;
}

const char *ptc_cuda_arch_name(int sm)
{
    switch (sm) {
    case 70:
        return "sm_70";
    case 75:
        return "sm_75";
    case 80:
        return "sm_80";
    case 86:
        return "sm_86";
    case 87:
        return "sm_87";
    case 89:
        return "sm_89";
    case 90:
        return "sm_90";
    default:
        return NULL;
    }
}

static LLVMTargetMachineRef target_machine(int sm, ptc_error *err)
{
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple("nvptx64-nvidia-cuda", &target, &msg)) {
        ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "LLVM has no NVPTX target: %s",
                   msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    return LLVMCreateTargetMachine(target, "nvptx64-nvidia-cuda", ptc_cuda_arch_name(sm), "+ptx78",
                                   LLVMCodeGenLevelDefault, LLVMRelocDefault, LLVMCodeModelDefault);
}

/* ---- one module -------------------------------------------------------------------------- */

static void init_types(gcg *c)
{
    LLVMContextRef ctx = c->ctx;
    c->i1 = LLVMInt1TypeInContext(ctx);
    c->i8 = LLVMInt8TypeInContext(ctx);
    c->i16 = LLVMInt16TypeInContext(ctx);
    c->i32 = LLVMInt32TypeInContext(ctx);
    c->i64 = LLVMInt64TypeInContext(ctx);
    c->f16 = LLVMHalfTypeInContext(ctx);
    c->f32 = LLVMFloatTypeInContext(ctx);
    c->f64 = LLVMDoubleTypeInContext(ctx);
    c->ptr = LLVMPointerTypeInContext(ctx, 0);
    c->gptr = LLVMPointerTypeInContext(ctx, 1);
    c->sptr = LLVMPointerTypeInContext(ctx, 3);
    c->void_ = LLVMVoidTypeInContext(ctx);
    c->ix = c->plan->i32 ? c->i32 : c->i64;
}

static char *take_message(char *m)
{
    char *s = strdup(m ? m : "?");
    if (m)
        LLVMDisposeMessage(m);
    return s;
}

/* Emits, verifies, optimises and prints the module; *ptx is malloc'd and
 * starts with a comment line "// ptc valign A0 A1 ..." giving the alignment
 * the vectorised entry assumes for each argument. */
/* The module's entries: form 0's (and its vectorised one), then the others. */
typedef struct ptx_job {
    const ptc_schedule *s;
    const ptc_kernel *k;
    const gplan *plans; /* [nforms] */
    int nforms;
    const ptc_cuda_target *t;
    const char *ventry;
    const ptc_cuda_form *forms; /* [nforms]: entry names */
} ptx_job;

static int build_ptx(const ptx_job *j, char **ptx, ptc_error *err)
{
    const ptc_schedule *s = j->s;
    const ptc_kernel *k = j->k;
    const gplan *plan = &j->plans[0];
    const ptc_cuda_target *t = j->t;
    const char *entry = j->forms[0].entry, *ventry = j->ventry;
    LLVMTargetMachineRef tm = target_machine(t->sm, err);
    if (!tm)
        return -1;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(entry, ctx);
    LLVMSetTarget(mod, "nvptx64-nvidia-cuda");
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, dl);
    LLVMDisposeTargetData(dl);
    gcg c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.mod = mod;
    c.b = LLVMCreateBuilderInContext(ctx);
    c.s = s;
    c.k = k;
    c.plan = plan;
    c.sm = t->sm;
    init_types(&c);
    c.bufptr = calloc((size_t)s->prog->nbufs + 1, sizeof *c.bufptr);
    c.bufspace = calloc((size_t)s->prog->nbufs + 1, sizeof *c.bufspace);
    c.bufalign = calloc((size_t)s->prog->nbufs + 1, 1);
    c.written = calloc((size_t)s->prog->nbufs + 1, sizeof *c.written);
    c.param = calloc((size_t)k->nparams + 1, sizeof *c.param);
    c.smem = LLVMAddGlobalInAddressSpace(mod, LLVMArrayType(c.i8, 0), "ptc_smem", 3);
    LLVMSetLinkage(c.smem, LLVMExternalLinkage);
    LLVMSetAlignment(c.smem, 16);
    g_emit_kernel(&c, entry, false);
    if (plan->vec > 1) {
        memset(c.bufptr, 0, sizeof *c.bufptr * (size_t)s->prog->nbufs);
        memset(c.vars, 0, sizeof c.vars);
        g_emit_kernel(&c, ventry, true);
    }
    for (int f = 1; f < j->nforms; f++) {
        memset(c.bufptr, 0, sizeof *c.bufptr * (size_t)s->prog->nbufs);
        memset(c.vars, 0, sizeof c.vars);
        c.plan = &j->plans[f];
        g_emit_kernel(&c, j->forms[f].entry, false);
    }
    int rc = 0;
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        char *m = take_message(msg);
        msg = NULL;
        rc = ptc_errorf(err, PTC_ERR_INTERNAL, "codegen", "kernel %d %s: LLVM verifier: %.600s",
                        k->id, k->name, m);
        free(m);
    }
    if (msg)
        LLVMDisposeMessage(msg);
    if (rc == 0) {
        LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
        LLVMErrorRef e = LLVMRunPasses(mod, PIPELINE, tm, po);
        LLVMDisposePassBuilderOptions(po);
        if (e) {
            char *m = LLVMGetErrorMessage(e);
            rc = ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: LLVM passes: %s", k->id,
                            k->name, m);
            LLVMDisposeErrorMessage(m);
        }
    }
    if (rc == 0) {
        LLVMMemoryBufferRef mb;
        msg = NULL;
        if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &mb)) {
            char *m = take_message(msg);
            rc = ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: NVPTX: %s", k->id,
                            k->name, m);
            free(m);
        } else {
            ptc_buf b = {0};
            ptc_buf_puts(&b, "// ptc valign");
            for (int i = 0; i < k->nargs; i++)
                ptc_buf_printf(&b, " %d", c.bufalign[k->args[i]]);
            ptc_buf_putc(&b, '\n');
            ptc_buf_putn(&b, LLVMGetBufferStart(mb), LLVMGetBufferSize(mb));
            *ptx = b.data;
            LLVMDisposeMemoryBuffer(mb);
        }
    }
    free(c.bufptr);
    free(c.bufspace);
    free(c.bufalign);
    free(c.written);
    free(c.param);
    LLVMDisposeBuilder(c.b);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return rc;
}

/* ---- in a compile worker ---------------------------------------------------------------- */

static int build_in_child(void *arg, int item, ptc_buf *out, ptc_error *err)
{
    (void)item;
    const ptx_job *j = arg;
    char *ptx = NULL;
    if (build_ptx(j, &ptx, err))
        return -1;
    ptc_buf_puts(out, ptx);
    free(ptx);
    return 0;
}

/* Takes job j's PTX from its compile worker's result r. */
static int take_ptx(const ptx_job *j, ptc_worker_result *r, char **ptx, ptc_error *err)
{
    if (r->rc == 0) {
        ptc_buf_putc(&r->out, 0);
        *ptx = r->out.data;
        return 0;
    }
    ptc_buf_free(&r->out);
    *err = r->err;
    if (r->died)
        ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: %s", j->k->id, j->k->name,
                   r->err.msg);
    return -1;
}

/* build_ptx in one compile worker; 1 when none could be started. */
static int build_in_worker(const ptx_job *j, char **ptx, ptc_error *err)
{
    ptc_worker_result r;
    if (ptc_worker_run(1, 1, build_in_child, (void *)j, &r) != 0)
        return 1;
    return take_ptx(j, &r, ptx, err);
}

/* PTX generations running in this process now (their threads' room adds up). */
static int in_process;

/* build_ptx in a compile worker where there is one, or where this process
 * lacks the room LLVM would need (codegen.h: running out of memory inside
 * LLVM ends the process); else in this thread. The child only runs LLVM: it
 * never touches the CUDA context this thread may have current. */
static int build_isolated(const ptx_job *j, char **ptx, ptc_error *err)
{
    int running = __atomic_add_fetch(&in_process, 1, __ATOMIC_ACQ_REL);
    size_t room = (size_t)running * ptc_llvm_room(j->k);
    bool tight = !ptc_llvm_have_room(room);
    if (tight)
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "less than %zu MiB of address space left for LLVM: generating the PTX of kernel "
                "%d in a worker",
                room >> 20, j->k->id);
    int rc = ptc_worker_enabled() || tight ? build_in_worker(j, ptx, err) : 1;
    if (rc == 1 && tight)
        rc = ptc_errorf(err, PTC_ERR_COMPILE, "codegen",
                        "out of memory: LLVM needs about %zu MiB to generate the PTX of kernel %d "
                        "%s, and no compile worker could be started",
                        ptc_llvm_room(j->k) >> 20, j->k->id, j->k->name);
    else if (rc == 1)
        rc = build_ptx(j, ptx, err);
    __atomic_sub_fetch(&in_process, 1, __ATOMIC_ACQ_REL);
    return rc;
}

/* ---- the public entry --------------------------------------------------------------------- */

static void plan_text(ptc_buf *b, const ptc_kernel *k, const gplan *p)
{
    ptc_buf_printf(
        b, "plan team %d block %d vec %d i32 %d smem %lld+%lld scratch %lld row %d %d %d red",
        p->team, p->block, p->vec, p->i32, (long long)p->smem_team, (long long)p->smem_red,
        (long long)p->scratch_team, p->row, p->row_n, p->row_j);
    for (int g = 0; g < k->ngroups; g++)
        ptc_buf_printf(b, " %d", p->red_lanes[g]);
    ptc_buf_puts(b, " loc");
    for (int i = 0; i < k->nlocal; i++)
        ptc_buf_printf(b, " %d@%lld", p->loc[i], (long long)p->loc_off[i]);
    ptc_buf_putc(b, '\n');
}

static char *with_header(const ptc_kernel *k, const char *ptx)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "; ptc kernel %d %s", k->id, k->name);
    if (k->nprov > 0) {
        ptc_buf_puts(&b, "  <-");
        for (int i = 0; i < k->nprov; i++)
            ptc_buf_printf(&b, "%s %%%s", i ? "," : "", k->prov[i]);
    }
    ptc_buf_printf(&b, "\n%s", ptx);
    return b.data;
}

/* Reads the "// ptc valign" line; false when it is missing or malformed
 * (a foreign or truncated cache file). */
static bool parse_valign(const char *ptx, int nargs, uint8_t *valign)
{
    const char *p = ptx;
    if (strncmp(p, "// ptc valign", 13) != 0)
        return false;
    p += 13;
    for (int i = 0; i < nargs; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 16)
            return false;
        valign[i] = (uint8_t)v;
        p = end;
    }
    return *p == '\n';
}

/* A kernel's code short of its PTX: planned, named, looked up in the cache. */
typedef struct gen {
    ptc_cuda_code *out;
    ptc_arena *a; /* the plans' */
    gplan plans[PTC_CUDA_MAX_FORMS];
    ptx_job job;
    ptc_buf key;
    bool use_cache;
    const char *dir;
} gen;

/* Everything but LLVM's part: g->out->ptx is set where the cache had it. */
static int gen_begin(const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *t,
                     const ptc_codegen_opts *o, ptc_cuda_code *out, gen *g, ptc_error *err)
{
    memset(out, 0, sizeof *out);
    memset(g, 0, sizeof *g);
    pthread_once(&init_once, init_llvm);
    if (!init_ok || !ptc_cuda_arch_name(t->sm))
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen",
                          "CUDA target sm_%d is not supported (LLVM 16 NVPTX: sm_70 .. sm_90)",
                          t->sm);
    g->out = out;
    g->a = ptc_arena_new();
    gplan *plans = g->plans;
    int nforms = g_plan(g->a, s, k, t, plans);
    const gplan plan = plans[0];
    /* the symbol names the fused ops (for profilers) and is part of the key */
    char label[28];
    const char *nm = k->name;
    if (nm[0] == 'k' && strchr(nm, '_'))
        nm = strchr(nm, '_') + 1;
    int nl = 0;
    for (; nm[nl] && nl < (int)sizeof label - 1; nl++)
        label[nl] =
            (char)((nm[nl] >= 'a' && nm[nl] <= 'z') || (nm[nl] >= '0' && nm[nl] <= '9') ? nm[nl]
                                                                                        : '_');
    label[nl] = 0;
    ptc_buf *key = &g->key;
    ptc_buf_printf(key, "ptc %s codegen %s target %s ptx78 label %s\n", PTC_VERSION,
                   CODEGEN_VERSION, ptc_cuda_arch_name(t->sm), label);
    for (int f = 0; f < nforms; f++)
        plan_text(key, k, &plans[f]);
    ptc_kernel_print_key(key, s, k);
    uint64_t h1 = ptc_hash_bytes(PTC_HASH_INIT, key->data, key->len);
    uint64_t h2 = ptc_hash_bytes(0x84222325cbf29ce4ULL, key->data, key->len);
    snprintf(out->entry, sizeof out->entry, "ptc_%s_%016llx%08llx", label, (unsigned long long)h1,
             (unsigned long long)(h2 & 0xffffffffu));
    if (plan.vec > 1)
        snprintf(out->ventry, sizeof out->ventry, "%s_v", out->entry);
    out->launch.team = plan.team;
    out->launch.block = plan.block;
    out->launch.vec = plan.vec;
    out->launch.vec_rows = plan.row;
    out->launch.smem = (int)((plan.block / plan.team) * plan.smem_team + plan.smem_red);
    out->launch.scratch_team = plan.scratch_team;
    out->launch.valign = calloc((size_t)k->nargs + 1, 1);
    out->nforms = nforms;
    out->outer_contig = plan.outer_contig;
    out->inner_contig = plan.inner_contig;
    for (int f = 0; f < nforms; f++) {
        ptc_cuda_form *fm = &out->forms[f];
        if (f == 0)
            snprintf(fm->entry, sizeof fm->entry, "%s", out->entry);
        else
            snprintf(fm->entry, sizeof fm->entry, "%s_t%d", out->entry, plans[f].team);
        fm->team = plans[f].team;
        fm->block = plans[f].block;
        fm->smem = (int)((plans[f].block / plans[f].team) * plans[f].smem_team + plans[f].smem_red);
        fm->scratch_team = plans[f].scratch_team;
    }
    uint8_t *cached = NULL;
    size_t len = 0;
    g->use_cache = !(o && o->no_cache);
    g->dir = o ? o->kernel_dir : NULL;
    g->job = (ptx_job){s, k, plans, nforms, t, out->ventry, out->forms};
    if (g->use_cache && ptc_cache_load_in(g->dir, key->data, key->len, &cached, &len) && len > 0 &&
        memchr(cached, 0, len) == NULL) {
        out->ptx = malloc(len + 1);
        memcpy(out->ptx, cached, len);
        out->ptx[len] = 0;
        out->cached = parse_valign(out->ptx, k->nargs, out->launch.valign);
        if (!out->cached) {
            free(out->ptx);
            out->ptx = NULL;
        }
    }
    free(cached);
    return 0;
}

/* Takes the PTX LLVM made (rc 0), caches it and frees g; -1 frees out too. */
static int gen_end(gen *g, int rc, char **text, ptc_error *err)
{
    ptc_cuda_code *out = g->out;
    const ptc_kernel *k = g->job.k;
    if (rc == 0 && !parse_valign(out->ptx, k->nargs, out->launch.valign))
        rc = ptc_errorf(err, PTC_ERR_INTERNAL, "codegen", "kernel %d: PTX without its valign line",
                        k->id);
    if (rc == 0 && !out->cached && g->use_cache)
        ptc_cache_store_in(g->dir, g->key.data, g->key.len, (const uint8_t *)out->ptx,
                           strlen(out->ptx));
    ptc_arena_free(g->a);
    if (rc) {
        ptc_buf_free(&g->key);
        ptc_cuda_code_free(out);
        return -1;
    }
    out->key = g->key.data;
    if (text)
        *text = with_header(k, out->ptx);
    return 0;
}

int ptc_cuda_codegen(const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *t,
                     const ptc_codegen_opts *o, ptc_cuda_code *out, char **text, ptc_error *err)
{
    gen g;
    if (gen_begin(s, k, t, o, out, &g, err))
        return -1;
    int rc = 0;
    if (!out->ptx) {
        double t0 = ptc_now_ms();
        rc = build_isolated(&g.job, &out->ptx, err);
        if (o && o->metrics)
            ptc_metrics_add(o->metrics, "llvm_compile_ms", ptc_now_ms() - t0, true);
    }
    return gen_end(&g, rc, text, err);
}

/* In the compile worker: item i of the jobs -> its PTX. */
static int build_item_in_child(void *arg, int item, ptc_buf *out, ptc_error *err)
{
    return build_in_child((void *)((const ptx_job **)arg)[item], 0, out, err);
}

/* The PTX of jobs[0..n) in one compile worker, into ptx[m] and rc[m]. */
static void build_all_in_worker(const ptx_job **jobs, int n, int nthreads, char ***ptx, int *rc,
                                ptc_error *errs)
{
    ptc_worker_result *res = calloc((size_t)n + 1, sizeof *res);
    bool forked = ptc_worker_run(n, nthreads, build_item_in_child, (void *)jobs, res) == 0;
    for (int m = 0; m < n; m++) /* no fork: in this process, one by one */
        rc[m] = forked ? take_ptx(jobs[m], &res[m], ptx[m], &errs[m])
                       : build_isolated(jobs[m], ptx[m], &errs[m]);
    free(res);
}

int ptc_cuda_codegen_all(const ptc_schedule *s, const int *ks, int n, const ptc_cuda_target *t,
                         const ptc_codegen_opts *o, ptc_cuda_code *const *outs, int nthreads,
                         ptc_error *err)
{
    gen *g = calloc((size_t)n + 1, sizeof *g);
    const ptx_job **jobs = calloc((size_t)n + 1, sizeof *jobs);
    char ***ptx = calloc((size_t)n + 1, sizeof *ptx);
    int *miss = calloc((size_t)n + 1, sizeof *miss), *rc = calloc((size_t)n + 1, sizeof *rc);
    ptc_error *errs = calloc((size_t)n + 1, sizeof *errs);
    int nmiss = 0, begun = 0, failed = 0;
    for (; begun < n && !failed; begun++) {
        failed = gen_begin(s, s->kernels[ks[begun]], t, o, outs[begun], &g[begun], err) != 0;
        if (!failed && !outs[begun]->ptx)
            miss[nmiss] = begun, jobs[nmiss] = &g[begun].job, ptx[nmiss++] = &outs[begun]->ptx;
    }
    begun -= failed; /* the one that failed has nothing to end */
    double t0 = ptc_now_ms();
    if (!failed && nmiss > 0) {
        int *mrc = calloc((size_t)nmiss, sizeof *mrc);
        ptc_error *merr = calloc((size_t)nmiss, sizeof *merr);
        build_all_in_worker(jobs, nmiss, nthreads, ptx, mrc, merr);
        for (int m = 0; m < nmiss; m++)
            rc[miss[m]] = mrc[m], errs[miss[m]] = merr[m];
        free(mrc);
        free(merr);
    }
    if (o && o->metrics && nmiss > 0)
        ptc_metrics_add(o->metrics, "llvm_compile_ms", ptc_now_ms() - t0, true);
    for (int i = 0; i < begun; i++) {
        ptc_error e = errs[i];
        if (gen_end(&g[i], rc[i], NULL, &e) && !failed)
            failed = 1, *err = e;
    }
    free(g), free(jobs), free(ptx), free(miss), free(rc), free(errs);
    return failed ? -1 : 0;
}

void ptc_cuda_code_free(ptc_cuda_code *c)
{
    free(c->ptx);
    free(c->key);
    free(c->launch.valign);
    memset(c, 0, sizeof *c);
}
