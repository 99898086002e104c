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
 * the JIT through its resource tracker. One lock serialises all of it: the
 * target machine is not thread-safe, and compiles are rare.
 */
#include "codegen/cpu/cpu.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#ifndef PTC_CODEGEN_HASH
#define PTC_CODEGEN_HASH "dev"
#endif
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

static int build_kernel(const ptc_schedule *s, const ptc_kernel *k, const char *sym, bool want_obj,
                        bool want_text, built *out, ptc_error *err)
{
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(sym, ctx);
    LLVMSetTarget(mod, G.triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(G.tm);
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
        LLVMErrorRef e = LLVMRunPasses(mod, PIPELINE, G.tm, po);
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
        if (LLVMTargetMachineEmitToMemoryBuffer(G.tm, mod, LLVMObjectFile, &msg, &mb)) {
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

static void make_key(const ptc_schedule *s, const ptc_kernel *k, ptc_buf *key, char *sym,
                     size_t symsz)
{
    ptc_buf_printf(key, "ptc %s codegen %s target %s\n", PTC_VERSION, CODEGEN_VERSION, G.desc);
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

static int compile_one(const ptc_schedule *s, const ptc_kernel *k, const ptc_codegen_opts *o,
                       ptc_cpu_kernel *out, char **text, ptc_error *err)
{
    ptc_buf key = {0};
    char sym[48];
    make_key(s, k, &key, sym, sizeof sym);
    built bl = {0};
    int rc = 0;
    bool want_text = o && o->want_text && text;
    if (want_text) {
        rc = build_kernel(s, k, sym, false, true, &bl, err);
        if (rc == 0)
            *text = with_header(k, bl.text);
        free(bl.text);
        bl.text = NULL;
    }
    kentry *e = rc == 0 ? find_entry(sym) : NULL;
    bool cached = e != NULL;
    for (int attempt = 0; rc == 0 && !e && attempt < 2; attempt++) {
        uint8_t *obj = NULL;
        size_t len = 0;
        bool from_disk = attempt == 0 && !(o && o->no_cache) && ptc_cache_load(key.data, key.len, &obj, &len);
        if (!from_disk) {
            double t0 = ptc_now_ms();
            rc = build_kernel(s, k, sym, true, false, &bl, err);
            if (o && o->metrics)
                ptc_metrics_add(o->metrics, "llvm_compile_ms", ptc_now_ms() - t0, true);
            if (rc)
                break;
            obj = bl.obj;
            len = bl.objlen;
            bl.obj = NULL;
            if (!(o && o->no_cache))
                ptc_cache_store(key.data, key.len, obj, len);
        }
        char why[512] = "";
        e = link_object(sym, obj, len, why, sizeof why);
        free(obj);
        if (!e && !from_disk)
            rc = ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d %s: JIT link: %s", k->id,
                            k->name, why);
        else if (!e)
            ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "cached object for %s failed to link (%s): recompiling",
                    sym, why);
        cached = from_disk;
        ptc_log(PTC_LOG_CACHE, PTC_LOG_DEBUG, "%s kernel %d %s", from_disk ? "hit" : "miss", k->id,
                sym);
    }
    ptc_buf_free(&key);
    if (rc)
        return rc;
    e->refs++;
    out->fn = e->fn;
    out->entry = e;
    out->cached = cached;
    return 0;
}

int ptc_cpu_compile(const ptc_schedule *s, const ptc_codegen_opts *o, ptc_cpu_kernel *out,
                    char **texts, ptc_error *err)
{
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (!init_locked())
        rc = ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "CPU backend unavailable: %s", G.why);
    int k = 0;
    for (; rc == 0 && k < s->nkernels; k++) {
        out[k] = (ptc_cpu_kernel){0};
        rc = compile_one(s, s->kernels[k], o, &out[k], texts ? &texts[k] : NULL, err);
    }
    if (rc)
        for (int j = 0; j < k; j++)
            if (out[j].entry)
                release_locked(out[j].entry);
    pthread_mutex_unlock(&lock);
    return rc;
}
