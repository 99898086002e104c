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
 * the JIT through its resource tracker. The kernels of a schedule (or of a
 * batch of schedules: ptc_cpu_compile_all, a training step's forward and
 * backward) that are neither loaded nor cached compile in parallel in one
 * forked compile worker, on as many threads of its own as OpenMP would use here (worker.c:
 * a crash inside LLVM fails the compile, not the process), each kernel its
 * own LLVM context; the objects come back through a pipe and are linked
 * here. With PTC_COMPILE_WORKER=0, or where fork fails, they compile
 * in this process on OpenMP threads instead, each with its own target
 * machine. One lock serialises everything else (the registry, the JIT, the
 * shared target machine).
 *
 * Each linked object gets its memory from one mapping reserved for it before
 * it is linked (objmem below): the small code model reaches constant pools
 * with 32-bit RIP-relative offsets, which RuntimeDyld does not check, so the
 * sections of one object must never be placed far apart.
 */
#include "codegen/cpu/cpu.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/OrcEE.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "codegen_hash.h" /* PTC_CODEGEN_HASH, generated at configure time */
/* Part of every cache key: the emitter's sources, hashed at configure time,
 * and whether the kernels are instrumented (PASSES). */
#ifdef PTC_ASAN
#define CODEGEN_VERSION "cpu-1-" PTC_CODEGEN_HASH "-asan"
#else
#define CODEGEN_VERSION "cpu-1-" PTC_CODEGEN_HASH
#endif

/* The emitter writes vector code, loop nests and hoistable index math
 * itself, so the optimiser only has to inline the body into its wrapper (the
 * noalias parameters become scopes), promote allocas, fold, hoist loop
 * invariants and remove redundant loads: a fifth of the time of O2 for the
 * same machine code on these kernels. */
#define PIPELINE                                                                \
    "always-inline,function(sroa,early-cse<memssa>,instcombine,simplifycfg,"    \
    "loop-mssa(licm),gvn,instcombine,simplifycfg)"

/* An ASan build checks its kernels' loads and stores as it checks its own C:
 * LLVM's AddressSanitizer pass after the others (where clang runs it), on the
 * functions emit.c marks sanitize_address, calling the libasan the process
 * has loaded. Its module constructor is never run (libasan is initialised
 * already), so the kernel's own globals are not poisoned, never wrongly. */
#ifdef PTC_ASAN
#define PASSES PIPELINE ",asan"
#else
#define PASSES PIPELINE
#endif

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
    const char *vec_libm; /* libmvec's name prefix for `lanes`, or NULL (cpu.h) */
    LLVMOrcLLJITRef jit;
    LLVMOrcJITDylibRef jd;
    kentry *entries;
    struct objmem *pending; /* the mapping reserved for the object being linked */
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

/* glibc's vector math library (libmvec) for the kernels' width: the name
 * prefix of its functions of `lanes` f32 lanes in the host's best ISA that
 * has them ("_ZGVeN16v_" + "sinf"), after loading it so that the JIT resolves
 * them from the process; NULL where there is none or PTC_CPU_LIBMVEC=0. */
static const char *choose_vec_libm(const char *features, int lanes)
{
    static const struct {
        int lanes;
        const char *feature, *prefix;
    } variants[] = {{16, "+avx512f", "_ZGVeN16v_"}, {8, "+avx2", "_ZGVdN8v_"},
                    {4, "+sse4.1", "_ZGVbN4v_"}};
    const char *env = getenv("PTC_CPU_LIBMVEC");
    if (env && strcmp(env, "0") == 0)
        return NULL;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        if (variants[i].lanes != lanes || !strstr(features, variants[i].feature))
            continue;
        void *lib = dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL);
        char sym[32];
        snprintf(sym, sizeof sym, "%ssinf", variants[i].prefix);
        return lib && dlsym(lib, sym) ? variants[i].prefix : NULL;
    }
    return NULL;
}

/* ---- memory for linked objects ------------------------------------------------------
 *
 * LLJIT links x86-64 ELF objects with RuntimeDyld, which asks its memory
 * manager for one section at a time. LLVM's SectionMemoryManager maps each
 * permission group on its own, wherever the kernel finds room: in a process
 * holding torch's libraries and a big compile's heap, a kernel's code and its
 * constant pool landed 4 GiB apart, and the code's 32-bit RIP-relative loads
 * (whose overflow RuntimeDyld only asserts on) read an unmapped address. So
 * each object gets one mapping, sized from its section headers before it is
 * linked, with a page-aligned part each for code, read-only and writable
 * sections. A section that does not fit (the size is an upper bound, so it
 * should not happen) is mapped on its own and fails the link when the object
 * is finalised, instead of running with a truncated offset. */

enum { PART_CODE, PART_RODATA, PART_RWDATA, NPARTS };

typedef struct spill {
    void *p;
    size_t n;
    struct spill *next;
} spill;

typedef struct objmem {
    uint8_t *base; /* the object's mapping */
    size_t size;
    size_t start[NPARTS], end[NPARTS], used[NPARTS]; /* offsets into it */
    spill *spills;                                   /* sections mapped outside it */
} objmem;

/* RuntimeDyld's stub for a call on x86-64 (a jmp through the GOT) and a GOT entry. */
enum { STUB_BYTES = 6, GOT_ENTRY_BYTES = 8, MAX_OBJECT_BYTES = 1 << 30 };

static int section_part(const Elf64_Shdr *sh)
{
    if (!(sh->sh_flags & SHF_ALLOC))
        return -1;
    if (sh->sh_flags & SHF_EXECINSTR)
        return PART_CODE;
    return sh->sh_flags & SHF_WRITE ? PART_RWDATA : PART_RODATA;
}

static bool read_section(const uint8_t *obj, const Elf64_Ehdr *eh, unsigned i, Elf64_Shdr *sh)
{
    if (i >= eh->e_shnum)
        return false;
    memcpy(sh, obj + eh->e_shoff + (size_t)i * sizeof *sh, sizeof *sh);
    return sh->sh_size <= MAX_OBJECT_BYTES && sh->sh_addralign <= 4096;
}

/* The most each part can be asked for: every allocated section with its
 * alignment and RuntimeDyld's minimum and padding, a stub in its part per
 * relocation applied to it, a GOT entry per relocation. false unless obj is
 * an ELF64 object whose headers lie inside it. */
static bool object_parts(const uint8_t *obj, size_t len, size_t need[NPARTS])
{
    Elf64_Ehdr eh;
    if (len < sizeof eh)
        return false;
    memcpy(&eh, obj, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
        (len - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum)
        return false;
    memset(need, 0, NPARTS * sizeof *need);
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh, target;
        if (!read_section(obj, &eh, i, &sh))
            return false;
        int part = section_part(&sh);
        if (part >= 0)
            need[part] += sh.sh_size + sh.sh_addralign + 16;
        if (sh.sh_type != SHT_RELA && sh.sh_type != SHT_REL)
            continue;
        size_t nrel = sh.sh_size / (sh.sh_entsize ? sh.sh_entsize : sizeof(Elf64_Rel));
        if (!read_section(obj, &eh, sh.sh_info, &target))
            return false;
        if (section_part(&target) >= 0)
            need[section_part(&target)] += nrel * STUB_BYTES;
        need[PART_RWDATA] += nrel * GOT_ENTRY_BYTES + 16;
    }
    return true;
}

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* The mapping for one object, before LLVM links it; NULL with why. */
static objmem *objmem_reserve(const uint8_t *obj, size_t len, char *why, size_t wsz)
{
    size_t need[NPARTS];
    if (!object_parts(obj, len, need)) {
        snprintf(why, wsz, "not an ELF64 object of this host");
        return NULL;
    }
    objmem *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(why, wsz, "out of memory");
        return NULL;
    }
    for (int p = 0; p < NPARTS; p++) {
        m->start[p] = m->used[p] = m->size;
        m->size += page_round(need[p]);
        m->end[p] = m->size;
    }
    m->base = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->base == MAP_FAILED) {
        snprintf(why, wsz, "cannot map %zu bytes for the kernel's code: %s", m->size,
                 strerror(errno));
        free(m);
        return NULL;
    }
    return m;
}

static void objmem_destroy(void *opaque)
{
    objmem *m = opaque;
    if (m->base)
        munmap(m->base, m->size);
    for (spill *s = m->spills, *next; s; s = next) {
        next = s->next;
        munmap(s->p, s->n);
        free(s);
    }
    free(m);
}

/* Called by the JIT per object it links: takes the mapping link_object reserved. */
static void *objmem_create(void *unused)
{
    (void)unused;
    objmem *m = G.pending ? G.pending : calloc(1, sizeof *m);
    G.pending = NULL;
    return m;
}

static void objmem_terminating(void *unused)
{
    (void)unused;
}

static uint8_t *objmem_take(objmem *m, int part, uintptr_t size, unsigned align)
{
    uintptr_t a = align ? align : 16;
    if (m->base) {
        uintptr_t at = ((uintptr_t)m->base + m->used[part] + a - 1) & ~(a - 1);
        size_t off = at - (uintptr_t)m->base;
        if (off <= m->end[part] && size <= m->end[part] - off) {
            m->used[part] = off + size;
            return (uint8_t *)at;
        }
    }
    spill *s = calloc(1, sizeof *s);
    s->n = size + a;
    s->p = mmap(NULL, s->n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->p == MAP_FAILED) {
        free(s);
        return NULL; /* RuntimeDyld gives up on the object */
    }
    s->next = m->spills;
    m->spills = s;
    return (uint8_t *)(((uintptr_t)s->p + a - 1) & ~(a - 1));
}

static uint8_t *objmem_code(void *opaque, uintptr_t size, unsigned align, unsigned id,
                            const char *name)
{
    (void)id, (void)name;
    return objmem_take(opaque, PART_CODE, size, align);
}

static uint8_t *objmem_data(void *opaque, uintptr_t size, unsigned align, unsigned id,
                            const char *name, LLVMBool readonly)
{
    (void)id, (void)name;
    return objmem_take(opaque, readonly ? PART_RODATA : PART_RWDATA, size, align);
}

/* After relocation: code executable, constants read-only. */
static LLVMBool objmem_finalize(void *opaque, char **errmsg)
{
    objmem *m = opaque;
    if (m->spills) {
        *errmsg = strdup("the kernel's sections did not fit the memory reserved for them");
        return 1;
    }
    static const int prot[NPARTS] = {PROT_READ | PROT_EXEC, PROT_READ, PROT_READ | PROT_WRITE};
    for (int p = 0; p < NPARTS; p++)
        if (m->end[p] > m->start[p] &&
            mprotect(m->base + m->start[p], m->end[p] - m->start[p], prot[p])) {
            *errmsg = strdup(strerror(errno));
            return 1;
        }
    return 0;
}

static LLVMOrcObjectLayerRef make_object_layer(void *unused, LLVMOrcExecutionSessionRef es,
                                               const char *triple)
{
    (void)unused, (void)triple;
    return LLVMOrcCreateRTDyldObjectLinkingLayerWithMCJITMemoryManagerLikeCallbacks(
        es, NULL, objmem_create, objmem_terminating, objmem_code, objmem_data, objmem_finalize,
        objmem_destroy);
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
    G.vec_libm = choose_vec_libm(G.features, G.lanes);
    snprintf(G.desc, sizeof G.desc, "%s %s lanes=%d libmvec=%s %s", G.triple, G.cpu, G.lanes,
             G.vec_libm ? G.vec_libm : "none", G.features);
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator(builder, make_object_layer, NULL);
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
                        const ptc_cpu_code *code, const char *sym, bool want_obj, bool want_text,
                        bool wrong, built *out, ptc_error *err)
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
    c.lanes = code->lanes ? code->lanes : G.lanes;
    c.vec_libm = c.lanes == G.lanes ? G.vec_libm : choose_vec_libm(G.features, c.lanes);
    c.unroll = code->unroll;
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
        LLVMErrorRef e = LLVMRunPasses(mod, PASSES, tm, po);
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
    G.pending = objmem_reserve(obj, len, why, wsz);
    if (!G.pending)
        return NULL;
    LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(G.jd);
    LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)obj, len, sym);
    LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(G.jit, rt, mb);
    LLVMOrcExecutorAddress addr = 0;
    if (!e) /* links the object here, on this thread: objmem_create takes G.pending */
        e = LLVMOrcLLJITLookup(G.jit, &addr, sym);
    if (G.pending) { /* never linked */
        objmem_destroy(G.pending);
        G.pending = NULL;
    }
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

/* k's cache key and symbol; -1 (err set) where the key ran out of memory
 * (a truncated key could name another kernel's object). */
static int make_key(const ptc_schedule *s, const ptc_kernel *k, const ptc_cpu_code *code,
                    bool wrong, ptc_buf *key, char *sym, size_t symsz, ptc_error *err)
{
    ptc_buf_printf(key, "ptc %s codegen %s target %s%s\n", PTC_VERSION, CODEGEN_VERSION, G.desc,
                   wrong ? " PTC_INJECT wrong" : "");
    if (code->lanes || code->unroll) /* the default form's key is as it always was */
        ptc_buf_printf(key, "form lanes %d unroll %d\n", code->lanes, code->unroll);
    ptc_kernel_print_key(key, s, k);
    uint64_t h1 = ptc_hash_bytes(PTC_HASH_INIT, key->data, key->len);
    uint64_t h2 = ptc_hash_bytes(0x84222325cbf29ce4ULL, key->data, key->len);
    snprintf(sym, symsz, "ptc_k%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
    if (ptc_buf_failed(key))
        return ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "kernel %d: out of memory", k->id);
    return 0;
}

/* One kernel's way through the compile. */
typedef struct job {
    const ptc_schedule *s;
    const ptc_kernel *k;
    ptc_buf key;
    char sym[48];
    kentry *e;          /* already loaded in this process */
    uint8_t *obj;       /* from the disk cache or just compiled */
    size_t objlen;
    bool from_disk, build, wrong;
    bool want_text; /* its LLVM IR is asked for */
    ptc_cpu_code code;     /* the form built (max-autotune's candidates; zero: the default) */
    ptc_inject_kind plant; /* a PTC_INJECT crash, hang or abort, carried out where LLVM runs */
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
static void build_one(LLVMTargetMachineRef tm, job *j)
{
    if (j->plant == PTC_INJECT_ABORT)
        ptc_llvm_planted_fatal_error();
    if (j->plant)
        ptc_inject_act(j->plant); /* the planted crash or hang is LLVM's */
    built bl = {0};
    j->rc = build_kernel(tm, j->s, j->k, &j->code, j->sym, j->build, j->want_text, j->wrong, &bl,
                         &j->err);
    if (j->rc == 0 && j->build) {
        j->obj = bl.obj;
        j->objlen = bl.objlen;
    }
    if (j->rc == 0 && j->want_text)
        j->text = ptc_kernel_code_text(j->k, bl.text);
    free(bl.text);
}

static bool wants_llvm(const job *j)
{
    return j->build || j->want_text;
}

/* In process: OpenMP threads, each with its own target machine. */
static void build_in_process(job *jobs, int n, int nt)
{
#pragma omp parallel num_threads(nt > 0 ? nt : 1)
    {
        LLVMTargetMachineRef tm = thread_tm();
#pragma omp for schedule(dynamic)
        for (int i = 0; i < n; i++)
            if (wants_llvm(&jobs[i]))
                build_one(tm, &jobs[i]);
        LLVMDisposeTargetMachine(tm);
    }
}

/* In a compile worker: item (of arg, the jobs to build) -> u64 object
 * length, object, text. */
static int build_in_child(void *arg, int item, ptc_buf *out, ptc_error *err)
{
    static _Thread_local LLVMTargetMachineRef tm; /* each child thread's own; gone with the child */
    job *j = ((job **)arg)[item];
    if (!tm)
        tm = thread_tm();
    build_one(tm, j);
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

/* Every job that needs LLVM fails: "<lead>kernel <id> <name><tail>". */
static void fail_llvm_jobs(job *jobs, int n, const char *lead, const char *tail)
{
    for (int i = 0; i < n; i++)
        if (wants_llvm(&jobs[i]))
            jobs[i].rc = ptc_errorf(&jobs[i].err, PTC_ERR_COMPILE, "codegen", "%skernel %d %s%s",
                                    lead, jobs[i].k->id, jobs[i].k->name, tail);
}

/* Builds the ntodo jobs that need an object or text, in parallel, in
 * compile workers: ptc_worker_run's answer. 0: every such job has its
 * outcome in its rc (a failed allocation of the lists here is each job's
 * out-of-memory error); 1: no worker could be forked and nothing ran, so
 * the caller builds in process. */
static int build_in_workers(job *jobs, int n, int ntodo, int nt)
{
    job **todo = malloc(sizeof *todo * (size_t)ntodo);
    ptc_worker_result *res = calloc((size_t)ntodo, sizeof *res);
    if (!todo || !res) {
        free(todo);
        free(res);
        fail_llvm_jobs(jobs, n, "out of memory before the compile workers could start: ", "");
        return 0;
    }
    for (int i = 0, k = 0; i < n; i++)
        if (wants_llvm(&jobs[i]))
            todo[k++] = &jobs[i];
    int rc = ptc_worker_run(ntodo, nt, build_in_child, todo, res);
    for (int i = 0; i < ntodo; i++) {
        if (rc == 0)
            take_result(todo[i], &res[i]);
        ptc_buf_free(&res[i].out);
    }
    free(res);
    free(todo);
    return rc;
}

/* ---- memory headroom --------------------------------------------------------------- */

/* Room for nthreads compiling the largest kernel to build (worker.c says how
 * it is estimated and why it is asked for before LLVM runs in process). */
static size_t llvm_room(const job *jobs, int n, int nthreads)
{
    size_t most = 0;
    for (int i = 0; i < n; i++)
        if (wants_llvm(&jobs[i]) && ptc_llvm_room(jobs[i].k) > most)
            most = ptc_llvm_room(jobs[i].k);
    return (size_t)nthreads * most;
}

static void build_jobs(job *jobs, int n)
{
    int todo = 0;
    for (int i = 0; i < n; i++)
        todo += wants_llvm(&jobs[i]);
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt > todo)
        nt = todo;
    if (todo == 0)
        return;
    size_t room = llvm_room(jobs, n, nt);
    bool tight = !ptc_llvm_have_room(room);
    if (tight)
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "less than %zu MiB of address space left for LLVM: compiling in one worker",
                room >> 20);
    if ((ptc_worker_enabled() || tight) && build_in_workers(jobs, n, todo, tight ? 1 : nt) == 0)
        return;
    if (!tight) {
        build_in_process(jobs, n, nt);
        return;
    }
    char lead[96];
    snprintf(lead, sizeof lead, "out of memory: LLVM needs about %zu MiB to compile ",
             llvm_room(jobs, n, 1) >> 20);
    fail_llvm_jobs(jobs, n, lead, ", and no compile worker could be started");
}

/* Links a job's object; a cached object that fails to link is rebuilt. */
static int link_job(const ptc_codegen_opts *o, job *j, ptc_error *err)
{
    for (int attempt = 0; !j->e && attempt < 2; attempt++) {
        if (!j->obj) {
            j->build = true;
            j->from_disk = false;
            j->want_text = false;
            build_jobs(j, 1);
            if (j->rc) {
                *err = j->err;
                return -1;
            }
            if (!(o && o->no_cache))
                ptc_cache_store_in(o ? o->kernel_dir : NULL, j->key.data, j->key.len, j->obj,
                                   j->objlen);
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

/* The jobs that need LLVM, built in parallel; the time goes to metrics. */
static void build_timed(job *jobs, int n, ptc_metrics *metrics)
{
    double t0 = ptc_now_ms();
    build_jobs(jobs, n);
    if (metrics)
        ptc_metrics_add(metrics, "llvm", ptc_now_ms() - t0, true);
}

static void release_kernels(ptc_cpu_kernel *out, int n)
{
    for (int i = 0; i < n; i++)
        if (out[i].entry) {
            release_locked(out[i].entry);
            out[i] = (ptc_cpu_kernel){0}; /* the program releases them again */
        }
}

/* Keeps the jobs' new objects in the cache and links every job, built,
 * into out[]; on error nothing is kept. */
static int link_all(const ptc_codegen_opts *o, job *jobs, int n, ptc_cpu_kernel *out, char **texts,
                    ptc_error *err)
{
    bool use_cache = !(o && o->no_cache);
    const char *dir = o ? o->kernel_dir : NULL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        job *j = &jobs[i];
        if (j->rc) {
            *err = j->err;
            rc = -1;
            break;
        }
        if (j->build && j->obj && use_cache)
            ptc_cache_store_in(dir, j->key.data, j->key.len, j->obj, j->objlen);
        if (!j->e) /* an identical kernel earlier in this program or its batch */
            j->e = find_entry(j->sym);
        bool was_loaded = j->e != NULL;
        rc = link_job(o, j, err);
        if (rc)
            break;
        j->e->refs++;
        out[i] =
            (ptc_cpu_kernel){.fn = j->e->fn, .entry = j->e, .cached = was_loaded || j->from_disk};
        if (texts)
            texts[i] = j->text, j->text = NULL;
    }
    if (rc)
        release_kernels(out, n);
    return rc;
}

static void free_jobs(job *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        ptc_buf_free(&jobs[i].key);
        free(jobs[i].obj);
        free(jobs[i].text);
    }
    free(jobs);
}

/* The jobs of schedule s's kernels, after those of the batch before it
 * (jobs[-before..0)): loaded in this process, in the disk cache, built by
 * an earlier job, or to build. -1 (err set) at a planted error. */
static int plan_jobs(const ptc_schedule *s, const ptc_codegen_opts *o, bool want_text, job *jobs,
                     int before, ptc_error *err)
{
    bool use_cache = !(o && o->no_cache);
    const char *dir = o ? o->kernel_dir : NULL; /* a package wants every object on disk */
    bool worker = ptc_worker_enabled();
    for (int i = 0; i < s->nkernels; i++) {
        job *j = &jobs[i];
        *j = (job){.s = s, .k = s->kernels[i], .want_text = want_text};
        /* Asked before the cache: a planted crash or error happens on every
         * compile, and a wrong kernel is cached apart from the right one. */
        ptc_inject_defer(worker);
        ptc_inject_kind ik = ptc_kernel_inject(s, j->k, "codegen", err);
        ptc_inject_defer(false);
        if (ik == PTC_INJECT_ERROR)
            return -1;
        j->wrong = ik == PTC_INJECT_WRONG;
        if (ik == PTC_INJECT_CRASH || ik == PTC_INJECT_HANG || ik == PTC_INJECT_ABORT)
            j->plant = ik; /* built, never loaded, so that it happens every compile */
        if (make_key(s, j->k, &j->code, j->wrong, &j->key, j->sym, sizeof j->sym, err))
            return -1;
        j->e = j->plant ? NULL : find_entry(j->sym);
        if ((!j->e || dir) && use_cache && !j->plant)
            j->from_disk =
                ptc_cache_load_in(dir, j->key.data, j->key.len, &j->obj, &j->objlen) == 1;
        j->build = (!j->e || dir) && !j->from_disk;
        /* identical kernels build once, in this program or an earlier one of the batch */
        for (int q = -before; q < i && j->build && !j->plant; q++)
            if (strcmp(jobs[q].sym, j->sym) == 0)
                j->build = false;
    }
    return 0;
}

int ptc_cpu_compile_all(const ptc_schedule *const *ss, const ptc_codegen_opts *const *os, int n,
                        ptc_cpu_kernel *const *outs, char **const *texts, ptc_error *err)
{
    pthread_mutex_lock(&lock);
    if (!init_locked()) {
        pthread_mutex_unlock(&lock);
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "CPU backend unavailable: %s",
                          G.why);
    }
    int total = 0, rc = 0;
    for (int p = 0; p < n; p++) {
        memset(outs[p], 0, sizeof *outs[p] * (size_t)ss[p]->nkernels);
        total += ss[p]->nkernels;
    }
    job *jobs = calloc((size_t)total + 1, sizeof *jobs);
    for (int p = 0, at = 0; p < n && rc == 0; at += ss[p++]->nkernels)
        rc = plan_jobs(ss[p], os[p], os[p] && os[p]->want_text && texts[p], jobs + at, at, err);
    if (rc == 0) /* the batch's LLVM time is its first program's */
        build_timed(jobs, total, os[0] ? os[0]->metrics : NULL);
    int linked = 0;
    for (int at = 0; rc == 0 && linked < n; linked++) {
        rc =
            link_all(os[linked], jobs + at, ss[linked]->nkernels, outs[linked], texts[linked], err);
        at += ss[linked]->nkernels;
    }
    for (int p = 0; rc && p < linked; p++) /* all or nothing */
        release_kernels(outs[p], ss[p]->nkernels);
    free_jobs(jobs, total);
    pthread_mutex_unlock(&lock);
    return rc;
}

int ptc_cpu_compile(const ptc_schedule *s, const ptc_codegen_opts *o, ptc_cpu_kernel *out,
                    char **texts, ptc_error *err)
{
    return ptc_cpu_compile_all(&s, &o, 1, &out, &texts, err);
}

/* max-autotune's candidate forms of one kernel, built in parallel, through
 * the same registry, disk cache and link as a program's kernels. */
int ptc_cpu_compile_forms(const ptc_schedule *s, int ki, const ptc_cpu_code *codes, int n,
                          ptc_cpu_kernel *out, ptc_error *err)
{
    pthread_mutex_lock(&lock);
    memset(out, 0, sizeof *out * (size_t)n);
    if (!init_locked()) {
        pthread_mutex_unlock(&lock);
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "CPU backend unavailable: %s",
                          G.why);
    }
    job *jobs = calloc((size_t)n + 1, sizeof *jobs);
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        *j = (job){.s = s, .k = s->kernels[ki], .code = codes[i]};
        if (make_key(s, j->k, &j->code, false, &j->key, j->sym, sizeof j->sym, err)) {
            free_jobs(jobs, n);
            pthread_mutex_unlock(&lock);
            return -1;
        }
        j->e = find_entry(j->sym);
        if (!j->e)
            j->from_disk =
                ptc_cache_load_in(NULL, j->key.data, j->key.len, &j->obj, &j->objlen) == 1;
        j->build = !j->e && !j->from_disk;
    }
    build_timed(jobs, n, NULL);
    int rc = link_all(NULL, jobs, n, out, NULL, err);
    free_jobs(jobs, n);
    pthread_mutex_unlock(&lock);
    return rc;
}
