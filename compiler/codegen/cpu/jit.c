/* Compiling kernels for the host and linking them into the process.
 *
 * LLVM is set up once per process: a target machine for the host CPU and its
 * features, and one ORC LLJIT whose main library resolves libm and libc from
 * the process. Each kernel is its own module, named by the hash of its cache
 * key: emitted (emit.c), verified, optimised with a short pipeline (PIPELINE
 * below: the emitter already wrote vector code), compiled to an
 * object, stored in the disk cache and linked. A registry maps symbols to
 * loaded kernels with reference counts, so identical kernels of different
 * programs share one copy of the code, and the last release removes it from
 * the JIT through its resource tracker. The kernels of a schedule that are
 * neither loaded nor cached compile in parallel in forked compile workers
 * (worker.c: a crash inside LLVM fails the compile, not the process), each
 * kernel its own LLVM context; the objects come back through pipes and are
 * linked here. With PTC_COMPILE_WORKER=0, or where fork fails, they compile
 * in this process on OpenMP threads instead, each with its own target
 * machine. One lock serialises everything else (the registry, the JIT, the
 * shared target machine).
 */
#include "codegen/cpu/cpu.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <omp.h>
#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "codegen_hash.h" /* PTC_CODEGEN_HASH, generated at configure time */
/* Part of every cache key: the emitter's sources, hashed at configure time. */
#define CODEGEN_VERSION "cpu-1-" PTC_CODEGEN_HASH

/* The emitter writes vector code, loop nests and hoistable index math
 * itself, so the optimiser only has to inline the body into its wrapper (the
 * noalias parameters become scopes), promote allocas, fold, hoist loop
 * invariants and remove redundant loads: a fifth of the time of O2 for the
 * same machine code on these kernels. */
#define PIPELINE                                                                \
    "always-inline,function(sroa,early-cse<memssa>,instcombine,simplifycfg,"    \
    "loop-mssa(licm),gvn,instcombine,simplifycfg)"

typedef struct kentry {
    char sym[48];
    LLVMOrcResourceTrackerRef rt;
    ptc_kernel_fn fn;
    int refs;
    struct kentry *next;
} kentry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool tried, ok;
    char why[512];
    LLVMTargetMachineRef tm;
    LLVMTargetRef target;
    char *triple, *cpu, *features;
    char desc[4096];
    int lanes;
    LLVMOrcLLJITRef jit;
    LLVMOrcJITDylibRef jd;
    kentry *entries;
} G;

static void take_error(LLVMErrorRef e, char *buf, size_t size)
{
    char *msg = LLVMGetErrorMessage(e);
    snprintf(buf, size, "%s", msg);
    LLVMDisposeErrorMessage(msg);
}

static int choose_lanes(const char *features)
{
    const char *env = getenv("PTC_CPU_LANES");
    if (env && atoi(env) >= 1 && atoi(env) <= 16 && (atoi(env) & (atoi(env) - 1)) == 0)
        return atoi(env);
    if (strstr(features, "+avx512f"))
        return 16;
    if (strstr(features, "+avx2") || strstr(features, "+avx,"))
        return 8;
    return 4;
}

/* Sets up LLVM once; false (with G.why) if the host cannot be targeted. */
static bool init_locked(void)
{
    if (G.tried)
        return G.ok;
    G.tried = true;
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
        snprintf(G.why, sizeof G.why, "LLVM has no native target for this host");
        return false;
    }
    G.triple = LLVMGetDefaultTargetTriple();
    G.cpu = LLVMGetHostCPUName();
    G.features = LLVMGetHostCPUFeatures();
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(G.triple, &target, &msg)) {
        snprintf(G.why, sizeof G.why, "LLVM target %s: %s", G.triple, msg);
        LLVMDisposeMessage(msg);
        return false;
    }
    G.target = target;
    G.tm = LLVMCreateTargetMachine(target, G.triple, G.cpu, G.features, LLVMCodeGenLevelDefault,
                                   LLVMRelocPIC, LLVMCodeModelSmall);
    G.lanes = choose_lanes(G.features);
    snprintf(G.desc, sizeof G.desc, "%s %s lanes=%d %s", G.triple, G.cpu, G.lanes, G.features);
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMErrorRef e = LLVMOrcCreateLLJIT(&G.jit, builder);
    if (e) {
        take_error(e, G.why, sizeof G.why);
        return false;
    }
    G.jd = LLVMOrcLLJITGetMainJITDylib(G.jit);
    LLVMOrcDefinitionGeneratorRef gen;
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(G.jit),
                                                             NULL, NULL);
    if (e) {
        take_error(e, G.why, sizeof G.why);
        return false;
    }
    LLVMOrcJITDylibAddGenerator(G.jd, gen);
    G.ok = true;
    return true;
}

const char *ptc_cpu_target(void)
{
    pthread_mutex_lock(&lock);
    bool ok = init_locked();
    pthread_mutex_unlock(&lock);
    return ok ? G.desc : "unavailable";
}

int ptc_cpu_lanes(void)
{
    pthread_mutex_lock(&lock);
    bool ok = init_locked();
    pthread_mutex_unlock(&lock);
    return ok ? G.lanes : 1;
}

/* ---- compiling one kernel ------------------------------------------------------- */

typedef struct built {
    uint8_t *obj;
    size_t objlen;
    char *text; /* LLVM IR when asked for */
} built;

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int build_kernel(LLVMTargetMachineRef tm, const ptc_schedule *s, const ptc_kernel *k,
                        const char *sym, bool want_obj, bool want_text, bool wrong, built *out,
                        ptc_error *err)
{
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(sym, ctx);
    LLVMSetTarget(mod, G.triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, dl);
    LLVMDisposeTargetData(dl);
    cg c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.mod = mod;
    c.b = LLVMCreateBuilderInContext(ctx);
    c.s = s;
    c.k = k;
    c.lanes = G.lanes;
    c.inject_wrong = wrong;
    c.bufptr = calloc((size_t)s->prog->nbufs + 1, sizeof *c.bufptr);
    c.param = calloc((size_t)k->nparams + 1, sizeof *c.param);
    c.i1 = LLVMInt1TypeInContext(ctx);
    c.i8 = LLVMInt8TypeInContext(ctx);
    c.i16 = LLVMInt16TypeInContext(ctx);
    c.i32 = LLVMInt32TypeInContext(ctx);
    c.i64 = LLVMInt64TypeInContext(ctx);
    c.f16 = LLVMHalfTypeInContext(ctx);
    c.f32 = LLVMFloatTypeInContext(ctx);
    c.f64 = LLVMDoubleTypeInContext(ctx);
    c.ptr = LLVMPointerTypeInContext(ctx, 0);
    c.void_ = LLVMVoidTypeInContext(ctx);
    double t0 = cpu_ms();
    int rc = cg_emit_kernel(&c, sym, err);
    double t1 = cpu_ms(), t2 = t1, t3 = t1;
    char *msg = NULL;
    if (rc == 0 && LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        rc = ptc_errorf(err, PTC_ERR_INTERNAL, "codegen", "kernel %d %s: LLVM verifier: %.600s",
                        k->id, k->name, msg);
    }
    if (msg)
        LLVMDisposeMessage(msg);
    if (rc == 0) {
        LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
        LLVMPassBuilderOptionsSetLoopVectorization(po, 0);
        LLVMPassBuilderOptionsSetSLPVectorization(po, 0);
        LLVMPassBuilderOptionsSetLoopUnrolling(po, 0);
        LLVMErrorRef e = LLVMRunPasses(mod, PIPELINE, tm, po);
        LLVMDisposePassBuilderOptions(po);
        t2 = cpu_ms();
        if (e) {
            char why[512];
            take_error(e, why, sizeof why);
            rc = ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: LLVM passes: %s",
                            k->id, k->name, why);
        }
    }
    if (rc == 0 && want_text) {
        char *t = LLVMPrintModuleToString(mod);
        out->text = strdup(t);
        LLVMDisposeMessage(t);
    }
    if (rc == 0 && want_obj) {
        LLVMMemoryBufferRef mb;
        msg = NULL;
        if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &mb)) {
            rc = ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: LLVM codegen: %s",
                            k->id, k->name, msg ? msg : "?");
            if (msg)
                LLVMDisposeMessage(msg);
        } else {
            t3 = cpu_ms();
            out->objlen = LLVMGetBufferSize(mb);
            out->obj = malloc(out->objlen ? out->objlen : 1);
            memcpy(out->obj, LLVMGetBufferStart(mb), out->objlen);
            LLVMDisposeMemoryBuffer(mb);
        }
    }
    if (want_obj)
        ptc_log(PTC_LOG_PERF, PTC_LOG_DEBUG, "kernel %d %s: cpu time: emit %.2f ms, passes %.2f ms, object %.2f ms",
                k->id, k->name, t1 - t0, t2 - t1, t3 - t2);
    free(c.bufptr);
    free(c.param);
    LLVMDisposeBuilder(c.b);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    return rc;
}

/* ---- the JIT registry ------------------------------------------------------------- */

static kentry *find_entry(const char *sym)
{
    for (kentry *e = G.entries; e; e = e->next)
        if (strcmp(e->sym, sym) == 0)
            return e;
    return NULL;
}

/* Links an object; NULL with err when LLVM refuses it. */
static kentry *link_object(const char *sym, const uint8_t *obj, size_t len, char *why, size_t wsz)
{
    LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(G.jd);
    LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)obj, len, sym);
    LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(G.jit, rt, mb);
    LLVMOrcExecutorAddress addr = 0;
    if (!e)
        e = LLVMOrcLLJITLookup(G.jit, &addr, sym);
    if (e || !addr) {
        if (e)
            take_error(e, why, wsz);
        else
            snprintf(why, wsz, "symbol %s not found", sym);
        LLVMErrorRef r = LLVMOrcResourceTrackerRemove(rt);
        if (r)
            LLVMConsumeError(r);
        LLVMOrcReleaseResourceTracker(rt);
        return NULL;
    }
    kentry *k = calloc(1, sizeof *k);
    snprintf(k->sym, sizeof k->sym, "%s", sym);
    k->rt = rt;
    k->fn = (ptc_kernel_fn)(uintptr_t)addr;
    k->next = G.entries;
    G.entries = k;
    return k;
}

static void release_locked(kentry *e)
{
    if (--e->refs > 0)
        return;
    for (kentry **p = &G.entries; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    LLVMErrorRef r = LLVMOrcResourceTrackerRemove(e->rt);
    if (r)
        LLVMConsumeError(r);
    LLVMOrcReleaseResourceTracker(e->rt);
    free(e);
}

void ptc_cpu_kernel_release(ptc_cpu_kernel *k)
{
    if (!k->entry)
        return;
    pthread_mutex_lock(&lock);
    release_locked(k->entry);
    pthread_mutex_unlock(&lock);
    k->entry = NULL;
    k->fn = NULL;
}

/* ---- compiling a schedule --------------------------------------------------------- */

static void make_key(const ptc_schedule *s, const ptc_kernel *k, bool wrong, ptc_buf *key,
                     char *sym, size_t symsz)
{
    ptc_buf_printf(key, "ptc %s codegen %s target %s%s\n", PTC_VERSION, CODEGEN_VERSION, G.desc,
                   wrong ? " PTC_INJECT wrong" : "");
    ptc_kernel_print_key(key, s, k);
    uint64_t h1 = ptc_hash_bytes(PTC_HASH_INIT, key->data, key->len);
    uint64_t h2 = ptc_hash_bytes(0x84222325cbf29ce4ULL, key->data, key->len);
    snprintf(sym, symsz, "ptc_k%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
}

static char *with_header(const ptc_kernel *k, const char *text)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "; ptc kernel %d %s", k->id, k->name);
    if (k->nprov > 0) {
        ptc_buf_puts(&b, "  <-");
        for (int i = 0; i < k->nprov; i++)
            ptc_buf_printf(&b, "%s %%%s", i ? "," : "", k->prov[i]);
    }
    ptc_buf_printf(&b, "\n%s", text);
    return b.data;
}

/* One kernel's way through the compile. */
typedef struct job {
    const ptc_kernel *k;
    ptc_buf key;
    char sym[48];
    kentry *e;          /* already loaded in this process */
    uint8_t *obj;       /* from the disk cache or just compiled */
    size_t objlen;
    bool from_disk, build, wrong;
    ptc_inject_kind plant; /* a PTC_INJECT crash or hang, carried out where LLVM runs */
    char *text;
    int rc;
    ptc_error err;
} job;

static LLVMTargetMachineRef thread_tm(void)
{
    return LLVMCreateTargetMachine(G.target, G.triple, G.cpu, G.features, LLVMCodeGenLevelDefault,
                                   LLVMRelocPIC, LLVMCodeModelSmall);
}

/* One job's LLVM work, in a compile worker or in process. */
static void build_one(LLVMTargetMachineRef tm, const ptc_schedule *s, job *j, bool want_text)
{
    if (j->plant)
        ptc_inject_act(j->plant); /* the planted crash or hang is LLVM's */
    built bl = {0};
    j->rc = build_kernel(tm, s, j->k, j->sym, j->build, want_text, j->wrong, &bl, &j->err);
    if (j->rc == 0 && j->build) {
        j->obj = bl.obj;
        j->objlen = bl.objlen;
    }
    if (j->rc == 0 && want_text)
        j->text = with_header(j->k, bl.text);
    free(bl.text);
}

static bool wants_llvm(const job *j, bool want_text)
{
    return j->build || want_text;
}

/* In process: OpenMP threads, each with its own target machine. */
static void build_in_process(const ptc_schedule *s, job *jobs, int n, bool want_text, int nt)
{
#pragma omp parallel num_threads(nt > 0 ? nt : 1)
    {
        LLVMTargetMachineRef tm = thread_tm();
#pragma omp for schedule(dynamic)
        for (int i = 0; i < n; i++)
            if (wants_llvm(&jobs[i], want_text))
                build_one(tm, s, &jobs[i], want_text);
        LLVMDisposeTargetMachine(tm);
    }
}

typedef struct worker_ctx {
    const ptc_schedule *s;
    job **todo;
    bool want_text;
    LLVMTargetMachineRef tm; /* the child's own, made on its first item */
} worker_ctx;

/* In a compile worker: item -> u64 object length, object, text. */
static int build_in_child(void *arg, int item, ptc_buf *out, ptc_error *err)
{
    worker_ctx *w = arg;
    job *j = w->todo[item];
    if (!w->tm)
        w->tm = thread_tm();
    build_one(w->tm, w->s, j, w->want_text);
    if (j->rc) {
        *err = j->err;
        return -1;
    }
    uint64_t len = j->objlen;
    ptc_buf_putn(out, (const char *)&len, sizeof len);
    if (j->obj) /* none when only the text was asked for */
        ptc_buf_putn(out, (const char *)j->obj, j->objlen);
    if (j->text)
        ptc_buf_puts(out, j->text);
    return 0;
}

/* Takes a worker's result for job j. */
static void take_result(job *j, ptc_worker_result *r)
{
    uint64_t len = 0;
    if (r->rc == 0 && (r->out.len < sizeof len ||
                       (memcpy(&len, r->out.data, sizeof len), len > r->out.len - sizeof len)))
        r->rc = ptc_errorf(&r->err, PTC_ERR_INTERNAL, "codegen",
                           "a compile worker's result is malformed");
    if (r->rc) {
        j->rc = -1;
        j->err = r->err;
        if (r->died) /* the worker's own words: say which kernel it was building */
            ptc_errorf(&j->err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: %s", j->k->id,
                       j->k->name, r->err.msg);
        return;
    }
    const char *p = r->out.data + sizeof len;
    if (j->build) {
        j->obj = malloc(len ? len : 1);
        memcpy(j->obj, p, len);
        j->objlen = len;
    }
    size_t tlen = r->out.len - sizeof len - len;
    if (tlen) {
        j->text = malloc(tlen + 1);
        memcpy(j->text, p + len, tlen);
        j->text[tlen] = 0;
    }
}

/* Builds the jobs that need an object or text, in parallel. 0 when the
 * compile workers ran (each job's rc says how it went); -1 when none
 * could be forked. */
static int build_in_workers(const ptc_schedule *s, job *jobs, int n, bool want_text, int nt)
{
    job **todo = calloc((size_t)n + 1, sizeof *todo);
    int ntodo = 0;
    for (int i = 0; i < n; i++)
        if (wants_llvm(&jobs[i], want_text))
            todo[ntodo++] = &jobs[i];
    worker_ctx w = {.s = s, .todo = todo, .want_text = want_text};
    ptc_worker_result *res = calloc((size_t)ntodo + 1, sizeof *res);
    int rc = ptc_worker_run(ntodo, nt, build_in_child, &w, res) == 0 ? 0 : -1;
    for (int i = 0; i < ntodo; i++) {
        if (rc == 0)
            take_result(todo[i], &res[i]);
        ptc_buf_free(&res[i].out);
    }
    free(res);
    free(todo);
    return rc;
}

static void build_jobs(const ptc_schedule *s, job *jobs, int n, bool want_text)
{
    int todo = 0;
    for (int i = 0; i < n; i++)
        todo += wants_llvm(&jobs[i], want_text);
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt > todo)
        nt = todo;
    if (todo == 0)
        return;
    if (ptc_worker_enabled() && build_in_workers(s, jobs, n, want_text, nt) == 0)
        return;
    build_in_process(s, jobs, n, want_text, nt);
}

/* Links a job's object; a cached object that fails to link is rebuilt. */
static int link_job(const ptc_schedule *s, const ptc_codegen_opts *o, job *j, ptc_error *err)
{
    for (int attempt = 0; !j->e && attempt < 2; attempt++) {
        if (!j->obj) {
            j->build = true;
            j->from_disk = false;
            build_jobs(s, j, 1, false);
            if (j->rc) {
                *err = j->err;
                return -1;
            }
            if (!(o && o->no_cache))
                ptc_cache_store(j->key.data, j->key.len, j->obj, j->objlen);
        }
        char why[512] = "";
        j->e = link_object(j->sym, j->obj, j->objlen, why, sizeof why);
        free(j->obj);
        j->obj = NULL;
        if (!j->e && !j->from_disk)
            return ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: JIT link: %s", j->k->id,
                              j->k->name, why);
        if (!j->e)
            ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO,
                    "cached object for %s failed to link (%s): recompiling", j->sym, why);
    }
    ptc_log(PTC_LOG_CACHE, PTC_LOG_DEBUG, "%s kernel %d %s", j->from_disk ? "hit" : "miss",
            j->k->id, j->sym);
    return 0;
}

int ptc_cpu_compile(const ptc_schedule *s, const ptc_codegen_opts *o, ptc_cpu_kernel *out,
                    char **texts, ptc_error *err)
{
    pthread_mutex_lock(&lock);
    int n = s->nkernels, rc = 0;
    if (!init_locked()) {
        pthread_mutex_unlock(&lock);
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "CPU backend unavailable: %s", G.why);
    }
    job *jobs = calloc((size_t)n + 1, sizeof *jobs);
    memset(out, 0, sizeof *out * (size_t)n);
    bool want_text = o && o->want_text && texts;
    bool use_cache = !(o && o->no_cache);
    bool worker = ptc_worker_enabled();
    /* loaded in this process, or in the disk cache */
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        j->k = s->kernels[i];
        /* Asked before the cache: a planted crash or error happens on every
         * compile, and a wrong kernel is cached apart from the right one. */
        ptc_inject_defer(worker);
        ptc_inject_kind ik = ptc_kernel_inject(s, j->k, "codegen", err);
        ptc_inject_defer(false);
        if (ik == PTC_INJECT_ERROR) {
            rc = -1;
            n = i; /* only these jobs have anything to free */
            break;
        }
        j->wrong = ik == PTC_INJECT_WRONG;
        if (ik == PTC_INJECT_CRASH || ik == PTC_INJECT_HANG)
            j->plant = ik; /* built, never loaded, so that it happens every compile */
        make_key(s, j->k, j->wrong, &j->key, j->sym, sizeof j->sym);
        j->e = j->plant ? NULL : find_entry(j->sym);
        if (!j->e && use_cache && !j->plant)
            j->from_disk = ptc_cache_load(j->key.data, j->key.len, &j->obj, &j->objlen) == 1;
        j->build = !j->e && !j->from_disk;
        for (int q = 0; q < i && j->build && !j->plant; q++) /* identical kernels build once */
            if (strcmp(jobs[q].sym, j->sym) == 0)
                j->build = false;
    }
    double t0 = ptc_now_ms();
    if (rc == 0)
        build_jobs(s, jobs, n, want_text);
    if (o && o->metrics)
        ptc_metrics_add(o->metrics, "llvm", ptc_now_ms() - t0, true);
    for (int i = 0; i < n && rc == 0; i++) {
        job *j = &jobs[i];
        if (j->rc) {
            *err = j->err;
            rc = -1;
            break;
        }
        if (j->build && j->obj && use_cache)
            ptc_cache_store(j->key.data, j->key.len, j->obj, j->objlen);
        if (!j->e) /* an identical kernel earlier in this program */
            j->e = find_entry(j->sym);
        bool was_loaded = j->e != NULL;
        rc = link_job(s, o, j, err);
        if (rc)
            break;
        j->e->refs++;
        out[i] = (ptc_cpu_kernel){.fn = j->e->fn, .entry = j->e, .cached = was_loaded || j->from_disk};
        if (texts)
            texts[i] = j->text, j->text = NULL;
    }
    if (rc)
        for (int i = 0; i < n; i++)
            if (out[i].entry) {
                release_locked(out[i].entry);
                out[i] = (ptc_cpu_kernel){0}; /* the program releases them again */
            }
    for (int i = 0; i < n; i++) {
        ptc_buf_free(&jobs[i].key);
        free(jobs[i].obj);
        free(jobs[i].text);
    }
    free(jobs);
    pthread_mutex_unlock(&lock);
    return rc;
}
