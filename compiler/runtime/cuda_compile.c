/* Compiling a program for a CUDA device: its code made and loaded.
 *
 * Identical kernels of the schedule (same cache key) are compiled once;
 * the others are compiled on a few threads at once, each kernel through
 * PTX generation (codegen/cuda, disk-cached), the driver's JIT to a
 * cubin (cuLink*, also disk-cached under the PTX key plus the device's
 * architecture and the driver version, so a warm start runs no JIT) and
 * cuModuleLoadData. With an explicit target (opts->cuda_sm) no device is
 * needed and modules load at the first run, on the run's device. Programs
 * compiled together (ptc_cuda_prepare_all: a training step's forward and
 * backward) share one compile worker for their PTX, then load all their
 * modules at once (cuda_load.c: each distinct cubin made once, on one pool
 * of threads), so the batch waits for its slowest module once.
 *
 * Horizontal combinations (lower/combo.c) are one module each, made in the
 * same compile worker as the kernels and loaded with them; a kernel that
 * runs only inside one has no code of its own. A program compiled without a
 * device loads on a run's device at that run (ptc_cuda_loaded_on), and a
 * kernel's 64-bit variant is generated and loaded when a call first needs
 * it (ptc_cuda_generate_wide, ptc_cuda_load_wide: cuda_exec.c decides).
 */
#include "runtime/cuda_prog.h"

#include "logs/logs.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void kernel_what(const ptc_kernel *k, char *what, size_t size)
{
    snprintf(what, size, "kernel %d %s", k->id, k->name);
}

/* ---- parallel compilation ---------------------------------------------------------------------
 */

/* One program's kernels to compile. */
typedef struct work {
    ptc_cuda_prog *cp;
    const ptc_schedule *s;
    const ptc_codegen_opts *co;
    cloaded *L;  /* the modules to load once the code exists; NULL: PTX only */
    bool wide;   /* the kernels' 64-bit variants (ckernel.wide), not their code */
    bool combos; /* the compile worker makes the combinations' code too */
    int *pending;
    int npending;
} work;

/* The threads compiling the kernels of works ws[0..nw), taken one at a
 * time in order: ws[0]'s, then ws[1]'s... */
typedef struct crew {
    work *ws;
    int total;  /* kernels of all the works */
    int next;   /* atomic */
    int failed; /* atomic */
    ptc_error err;
} crew;

/* The code w generates for kernel k. */
static ptc_cuda_code *work_code(const work *w, int k)
{
    return w->wide ? &w->cp->k[k].wide : &w->cp->k[k].code;
}

static void crew_fail(crew *c, const ptc_error *err)
{
    if (__atomic_fetch_add(&c->failed, 1, __ATOMIC_ACQ_REL) == 0)
        c->err = *err;
}

/* Kernel k of w's code generated. */
static int compile_kernel(const work *w, int k, ptc_error *err)
{
    ptc_codegen_opts co = *w->co;
    co.metrics = NULL; /* not thread-safe: timed by the caller */
    return ptc_cuda_codegen(w->s, w->s->kernels[k], &w->cp->target, &co, work_code(w, k), NULL,
                            err);
}

static void *worker(void *arg)
{
    crew *c = arg;
    ptc_error err;
    for (;;) {
        int i = __atomic_fetch_add(&c->next, 1, __ATOMIC_ACQ_REL);
        if (i >= c->total || __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE))
            break;
        const work *w = c->ws;
        for (; i >= w->npending; w++)
            i -= w->npending;
        if (compile_kernel(w, w->pending[i], &err))
            crew_fail(c, &err);
    }
    return NULL;
}

static int pending_in(const work *ws, int nw)
{
    int n = 0;
    for (int i = 0; i < nw; i++)
        n += ws[i].npending;
    return n;
}

/* Generates the kernels' PTX of ws[0..nw) on one pool of threads. -1 with
 * err: the first failure seen (the others stop at their next kernel). */
static int run_workers(work *ws, int nw, ptc_error *err)
{
    crew c = {.ws = ws, .total = pending_in(ws, nw)};
    ptc_cuda_run_pool(worker, &c, c.total);
    if (c.failed) {
        if (err)
            *err = c.err;
        return -1;
    }
    return 0;
}

/* Whether the process has the room LLVM would need to generate the PTX of
 * ws[0..nw) on nthreads threads (codegen.h). Where it has not, each kernel
 * goes to a worker of its own, as it did before a compile had one worker:
 * the parent then lives as near its limit as ever, and a compile that
 * succeeds leaves it with too little for ptc's own work after it. */
static bool room_for_one_worker(const work *ws, int nw, int nthreads)
{
    size_t most = 0;
    for (int w = 0; w < nw; w++) {
        const work *wk = &ws[w];
        for (int i = 0; i < wk->npending; i++) {
            size_t r = ptc_llvm_room(wk->s->kernels[wk->pending[i]]);
            most = r > most ? r : most;
        }
        for (int i = 0; wk->combos && i < wk->cp->ncombos; i++) {
            const ptc_combo *c = &wk->s->combos[i];
            size_t r = 0;
            for (int t = c->first; t < c->first + c->n; t++)
                r += ptc_llvm_room(wk->s->kernels[wk->s->steps[t].index]);
            most = r > most ? r : most;
        }
    }
    return ptc_llvm_have_room((size_t)nthreads * most);
}

/* The PTX of the kernels of ws[0..nw), and of the combinations of those
 * whose combos is set, generated in one compile worker (a fork per batch,
 * from this thread, before any compile thread starts). */
static int gen_in_worker(work *ws, int nw, ptc_error *err)
{
    int most = pending_in(ws, nw);
    for (int w = 0; w < nw; w++)
        most += ws[w].combos ? ws[w].cp->ncombos : 0;
    ptc_cuda_gen *items = calloc((size_t)most + 1, sizeof *items);
    if (!items)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime",
                          "out of memory listing the CUDA kernels");
    int n = 0;
    for (int w = 0; w < nw; w++) {
        const work *wk = &ws[w];
        ptc_cuda_gen item = {.s = wk->s, .t = &wk->cp->target, .o = wk->co};
        for (int i = 0; i < wk->npending; i++) {
            item.k = wk->pending[i];
            item.out = work_code(wk, item.k);
            items[n++] = item;
        }
        item.combo = true;
        for (int i = 0; wk->combos && i < wk->cp->ncombos; i++) {
            item.k = i;
            item.out = &wk->cp->combos[i];
            items[n++] = item;
        }
    }
    int rc = ptc_cuda_codegen_all(items, n, ptc_cuda_threads_for(n), err);
    free(items);
    return rc;
}

/* Generates the PTX of ws[0..nw)'s kernels (and combinations, where a
 * work's combos is set), in one compile worker where the process has the
 * room, else on a pool of threads. */
static int generate(work *ws, int nw, ptc_error *err)
{
    int nt = ptc_cuda_threads_for(pending_in(ws, nw));
    if (ptc_worker_enabled() && room_for_one_worker(ws, nw, nt))
        return gen_in_worker(ws, nw, err);
    return run_workers(ws, nw, err);
}

static cloaded *loaded_new(const ptc_cuda_prog *cp, ptc_cuda_device *d)
{
    cloaded *L = calloc(1, sizeof *L);
    L->dev = d;
    L->mods = calloc((size_t)cp->nk + 1, sizeof *L->mods);
    L->fn = calloc((size_t)cp->nk + 1, sizeof *L->fn);
    L->vfn = calloc((size_t)cp->nk + 1, sizeof *L->vfn);
    L->ffn = calloc((size_t)(cp->nk + 1) * PTC_CUDA_MAX_FORMS, sizeof *L->ffn);
    L->wide = calloc((size_t)cp->nk + 1, sizeof *L->wide);
    L->cmods = calloc((size_t)cp->ncombos + 1, sizeof *L->cmods);
    L->cfn = calloc((size_t)cp->ncombos + 1, sizeof *L->cfn);
    L->cvfn = calloc((size_t)cp->ncombos + 1, sizeof *L->cvfn);
    L->smods = calloc((size_t)cp->nk + 1, sizeof *L->smods);
    L->csmods = calloc((size_t)cp->ncombos + 1, sizeof *L->csmods);
    return L;
}

static void loaded_free(cloaded *L, int nk, int ncombos)
{
    if (!L)
        return;
    const ptc_cuda_api *A = ptc_cuda_api_get(NULL);
    bool pushed = false;
    ptc_error err;
    if (A && ptc_cuda_enter(L->dev, &pushed, &err) == 0) {
        for (int k = 0; k < nk; k++) {
            if (L->mods[k])
                A->cuModuleUnload(L->mods[k]);
            if (L->smods[k])
                A->cuModuleUnload(L->smods[k]);
            if (L->wide[k].mod)
                A->cuModuleUnload(L->wide[k].mod);
        }
        for (int i = 0; i < ncombos; i++) {
            if (L->cmods[i])
                A->cuModuleUnload(L->cmods[i]);
            if (L->csmods[i])
                A->cuModuleUnload(L->csmods[i]);
        }
        ptc_cuda_leave(pushed);
    }
    free(L->mods);
    free(L->fn);
    free(L->vfn);
    free(L->ffn);
    free(L->wide);
    free(L->cmods);
    free(L->cfn);
    free(L->cvfn);
    free(L->smods);
    free(L->csmods);
    free(L);
}

/* Unique kernels: indices of kernels whose key text has not been seen. */
static int dedup(ptc_cuda_prog *cp, const ptc_schedule *s, int *pending)
{
    char **keys = calloc((size_t)cp->nk + 1, sizeof *keys);
    int n = 0;
    for (int k = 0; k < cp->nk; k++) {
        ptc_buf b = {0};
        ptc_kernel_print_key(&b, s, s->kernels[k]);
        keys[k] = b.data ? b.data : strdup("");
        cp->k[k].same_as = -1;
        for (int j = 0; j < k && cp->k[k].same_as < 0; j++)
            if (cp->k[j].same_as < 0 && strcmp(keys[j], keys[k]) == 0)
                cp->k[k].same_as = j;
        if (cp->k[k].same_as < 0)
            pending[n++] = k;
    }
    for (int k = 0; k < cp->nk; k++)
        free(keys[k]);
    free(keys);
    return n;
}

/* Takes out of pending[0..n) the kernels that run only inside one-launch
 * combinations (whose code is the combination's), unless a kernel outside
 * one runs their code (an identical kernel); returns the count left. Under
 * max-autotune, which times each kernel alone, every kernel keeps its code. */
static int drop_combined(ptc_cuda_prog *cp, const ptc_schedule *s, int *pending, int n)
{
    bool *member = calloc((size_t)cp->nk + 1, sizeof *member);
    bool *needed = calloc((size_t)cp->nk + 1, sizeof *needed);
    for (int i = 0; i < cp->ncombos; i++)
        for (int t = s->combos[i].first; t < s->combos[i].first + s->combos[i].n; t++)
            member[s->steps[t].index] = true;
    for (int k = 0; k < cp->nk; k++)
        if (!member[k] && cp->k[k].same_as >= 0)
            needed[cp->k[k].same_as] = true;
    int left = 0;
    for (int i = 0; i < n; i++) {
        int k = pending[i];
        cp->k[k].combined_only = member[k] && !needed[k];
        if (!cp->k[k].combined_only)
            pending[left++] = k;
    }
    free(member);
    free(needed);
    return left;
}

/* The combination kernel k runs in, or -1. */
static int combo_of(const ptc_cuda_prog *cp, const ptc_schedule *s, int k)
{
    for (int i = 0; i < cp->ncombos; i++)
        for (int t = s->combos[i].first; t < s->combos[i].first + s->combos[i].n; t++)
            if (s->steps[t].index == k)
                return i;
    return -1;
}

/* The kernels with code of their own (not the same as an earlier one's),
 * only those planned 32-bit over symbolic sizes with wide_only: a malloc'd
 * list of *n, NULL when out of memory (err says so). */
static int *own_kernels(const ptc_cuda_prog *cp, bool wide_only, int *n, ptc_error *err)
{
    int *pending = calloc((size_t)cp->nk + 1, sizeof *pending);
    *n = 0;
    if (!pending) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory listing the CUDA kernels");
        return NULL;
    }
    for (int k = 0; k < cp->nk; k++)
        if (cp->k[k].same_as < 0 && !cp->k[k].combined_only &&
            (!wide_only || cp->k[k].code.i32_symbolic))
            pending[(*n)++] = k;
    return pending;
}

/* The device a program's inputs name (the first CUDA input's index; -1 =
 * current). */
static int graph_device(const ptc_program *p)
{
    for (int i = 0; i < p->ninputs; i++)
        if (p->in_types[i].device.kind == PTC_DEV_CUDA)
            return p->in_types[i].device.index;
    return -1;
}

int ptc_cuda_generate_wide(ptc_cuda_prog *cp, const ptc_schedule *s, const ptc_codegen_opts *co,
                           int *ks, int n, ptc_error *err)
{
    ptc_codegen_opts wide = *co;
    wide.wide_index = true;
    work w = {.cp = cp, .s = s, .co = &wide, .wide = true, .pending = ks, .npending = n};
    return n > 0 ? generate(&w, 1, err) : 0;
}

int ptc_cuda_load_wide(ptc_cuda_prog *cp, const ptc_schedule *s, int k, cloaded *L, ptc_error *err)
{
    cwide *w = &L->wide[k];
    ptc_cuda_slot slot = {.code = &cp->k[k].wide,
                          .dev = L->dev,
                          .no_cache = cp->no_cache,
                          .mod = &w->mod,
                          .fn = &w->fn[0],
                          .vfn = &w->vfn,
                          .ffn = w->fn};
    kernel_what(s->kernels[k], slot.what, sizeof slot.what);
    return ptc_cuda_load_slots(&slot, 1, err);
}

/* The modules of cp to load into L, appended to slots (room for cp->nk +
 * cp->ncombos): its kernels with code of their own, then its combinations;
 * JITs counted in m. Returns the count appended, -1 when out of memory. */
static int program_slots(ptc_cuda_prog *cp, const ptc_schedule *s, cloaded *L, ptc_metrics *m,
                         ptc_cuda_slot *slots, ptc_error *err)
{
    int nown;
    int *own = own_kernels(cp, false, &nown, err);
    if (!own)
        return -1;
    ptc_cuda_slot like = {.dev = L->dev, .no_cache = cp->no_cache, .m = m};
    bool defer = ptc_cuda_defer_scalar();
    int n = 0;
    for (int i = 0; i < nown; i++) {
        int k = own[i];
        ptc_cuda_slot *t = &slots[n++];
        *t = like;
        t->code = &cp->k[k].code;
        t->defer_scalar = defer && t->code->launch.vec > 1;
        t->mod = &L->mods[k], t->fn = &L->fn[k], t->vfn = &L->vfn[k];
        t->ffn = &L->ffn[k * PTC_CUDA_MAX_FORMS];
        kernel_what(s->kernels[k], t->what, sizeof t->what);
    }
    for (int i = 0; i < cp->ncombos; i++) {
        ptc_cuda_slot *t = &slots[n++];
        *t = like;
        t->code = &cp->combos[i];
        t->defer_scalar = defer && t->code->launch.vec > 1;
        t->mod = &L->cmods[i], t->fn = &L->cfn[i], t->vfn = &L->cvfn[i];
        snprintf(t->what, sizeof t->what, "combination %d", i);
    }
    free(own);
    return n;
}

bool ptc_cuda_defer_scalar(void)
{
    static int warned;
    return ptc_env_switch("PTC_CUDA_DEFER_SCALAR", true, &warned,
                          "scalar entries are JIT'd at their first launch as by default");
}

int ptc_cuda_load_scalar(ptc_cuda_prog *cp, const ptc_schedule *s, cloaded *L, int k, int ci,
                         ptc_error *err)
{
    CUfunction *fn = ci < 0 ? &L->fn[k] : &L->cfn[ci];
    if (*fn)
        return 0;
    /* the whole module: the vectorised entry again, but rarely and once */
    CUfunction vfn, forms[PTC_CUDA_MAX_FORMS];
    ptc_cuda_slot slot = {.code = ci < 0 ? &cp->k[k].code : &cp->combos[ci],
                          .dev = L->dev,
                          .no_cache = cp->no_cache,
                          .mod = ci < 0 ? &L->smods[k] : &L->csmods[ci],
                          .fn = fn,
                          .vfn = &vfn,
                          .ffn = forms};
    if (ci < 0)
        kernel_what(s->kernels[k], slot.what, sizeof slot.what);
    else
        snprintf(slot.what, sizeof slot.what, "combination %d", ci);
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "%s: a launch needs its scalar entry: loading it",
            slot.what);
    return ptc_cuda_load_slots(&slot, 1, err);
}

/* Loads the modules of programs ps[0..n) on the devices of their Ls[i]
 * (NULL: none), all in one ptc_cuda_load_slots; JITs counted in ms[i]. */
static int load_programs(ptc_program *const *ps, cloaded *const *Ls, ptc_metrics *const *ms, int n,
                         ptc_error *err)
{
    size_t most = 1;
    for (int i = 0; i < n; i++)
        most += Ls[i] ? (size_t)(ps[i]->cuda->nk + ps[i]->cuda->ncombos) : 0;
    ptc_cuda_slot *slots = calloc(most, sizeof *slots);
    if (!slots)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory listing CUDA modules");
    int nslots = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int added =
            Ls[i] ? program_slots(ps[i]->cuda, ps[i]->sched, Ls[i], ms[i], slots + nslots, err) : 0;
        rc = added < 0 ? -1 : 0;
        nslots += added > 0 ? added : 0;
    }
    if (rc == 0)
        rc = ptc_cuda_load_slots(slots, nslots, err);
    free(slots);
    return rc;
}

/* The 64-bit variants of the kernels planned with 32-bit indices for
 * symbolic sizes, generated now (PTX only, loaded when a call needs one)
 * into the compile's kernel folder: an export package carries them. */
static int generate_wide_variants(ptc_cuda_prog *cp, const ptc_schedule *s,
                                  const ptc_codegen_opts *co, ptc_error *err)
{
    int n;
    int *pending = own_kernels(cp, true, &n, err);
    if (!pending)
        return -1;
    int rc = ptc_cuda_generate_wide(cp, s, co, pending, n, err);
    free(pending);
    return rc;
}

/* The code of every horizontal combination (one module each, a launch of
 * all its members: lower/combo.c) that the kernels' compile worker did not
 * make. */
static int generate_combos(ptc_cuda_prog *cp, const ptc_schedule *s, const ptc_codegen_opts *co,
                           ptc_error *err)
{
    for (int i = 0; i < cp->ncombos; i++) {
        ptc_cuda_code *code = &cp->combos[i];
        if (!code->ptx && ptc_cuda_codegen_combo(s, &s->combos[i], &cp->target, co, code, err))
            return -1;
    }
    return 0;
}

int ptc_cuda_target_of(const ptc_program *p, const ptc_compile_opts *o, ptc_cuda_target *t,
                       ptc_cuda_device **dev, ptc_error *err)
{
    *dev = NULL;
    if (o && o->cuda_sm > 0) {
        t->sm = o->cuda_sm;
        t->sms = o->cuda_sms > 0 ? o->cuda_sms : PTC_CUDA_DEFAULT_SMS;
    } else {
        *dev = ptc_cuda_device_get(graph_device(p), err);
        if (!*dev)
            return -1;
        /* LLVM 16 writes PTX up to sm_90; newer GPUs JIT it forward */
        t->sm = (*dev)->sm > 90 ? 90 : (*dev)->sm;
        t->sms = (*dev)->sms;
    }
    if (!ptc_cuda_arch_name(t->sm))
        return ptc_errorf(
            err, PTC_ERR_UNSUPPORTED, "codegen",
            "CUDA compute capability %d.%d is not supported (sm_70 .. sm_90 and newer)", t->sm / 10,
            t->sm % 10);
    return 0;
}

/* A program's compile set up: its target, its kernels checked, the work of
 * making their code (*w, its options in *co): its kernels' and its
 * combinations'. */
static int prepare_begin(ptc_program *p, const ptc_compile_opts *o, ptc_metrics *m,
                         ptc_codegen_opts *co, work *w, ptc_error *err)
{
    ptc_cuda_prog *cp = calloc(1, sizeof *cp);
    p->cuda = cp;
    pthread_mutex_init(&cp->lock, NULL);
    cp->nk = p->sched->nkernels;
    cp->k = calloc((size_t)cp->nk + 1, sizeof *cp->k);
    cp->ncombos = p->sched->combos_launch ? p->sched->ncombos : 0;
    cp->combos = calloc((size_t)cp->ncombos + 1, sizeof *cp->combos);
    cp->combo_args = calloc((size_t)cp->ncombos + 1, sizeof *cp->combo_args);
    cp->combo_nargs = calloc((size_t)cp->ncombos + 1, sizeof *cp->combo_nargs);
    for (int i = 0; i < cp->ncombos; i++) {
        const ptc_combo *c = &p->sched->combos[i];
        size_t most = 1;
        for (int t = c->first; t < c->first + c->n; t++)
            most += (size_t)p->sched->kernels[p->sched->steps[t].index]->nargs;
        cp->combo_args[i] = calloc(most, sizeof **cp->combo_args);
        cp->combo_nargs[i] = ptc_combo_args(p->sched, c, cp->combo_args[i]);
    }
    cp->mem_dev = -1;
    ptc_cuda_device *dev = NULL;
    if (ptc_cuda_target_of(p, o, &cp->target, &dev, err))
        return -1;
    for (int k = 0; k < cp->nk; k++) { /* fail here, before a run writes anything */
        const ptc_kernel *kn = p->sched->kernels[k];
        cp->k[k].checks = ptc_kernel_has_checks(kn);
        cp->any_checks |= cp->k[k].checks;
        if (launch_params(kn, cp->k[k].checks) > MAX_PARAMS)
            return too_many_params(kn, cp->k[k].checks, err);
    }
    int *pending = calloc((size_t)cp->nk + 1, sizeof *pending);
    if (!pending)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime",
                          "out of memory listing the CUDA kernels");
    *co = (ptc_codegen_opts){
        .no_cache = o && o->no_cache, .kernel_dir = o ? o->kernel_dir : NULL, .metrics = m};
    cp->no_cache = co->no_cache;
    cp->kernel_dir = co->kernel_dir ? strdup(co->kernel_dir) : NULL;
    *w = (work){.cp = cp, .s = p->sched, .co = co, .combos = true, .pending = pending};
    w->npending = dedup(cp, p->sched, pending);
    if (!(o && o->autotune))
        w->npending = drop_combined(cp, p->sched, pending, w->npending);
    if (dev) {
        cp->loaded[dev->ordinal] = loaded_new(cp, dev);
        w->L = cp->loaded[dev->ordinal];
    }
    return 0;
}

/* Counts p's kernels whose code came from the cache. */
static void count_cached(ptc_program *p)
{
    const ptc_cuda_prog *cp = p->cuda;
    for (int k = 0; k < cp->nk; k++) {
        /* a kernel only combined comes from the cache as its combination does */
        p->info.ncached += cp->k[k].combined_only ? cp->combos[combo_of(cp, p->sched, k)].cached
                                                  : code_of(cp, k)->cached;
    }
}

/* Each kernel's PTX with its header, into texts[k]; a combination's PTX
 * follows its first member's (kernel_<k>.ptx). */
static void kernel_texts(const ptc_program *p, char **texts)
{
    const ptc_cuda_prog *cp = p->cuda;
    const ptc_schedule *s = p->sched;
    for (int k = 0; k < cp->nk; k++) {
        const char *ptx = code_of(cp, k)->ptx;
        texts[k] = ptc_kernel_code_text(s->kernels[k],
                                        ptx ? ptx
                                            : "// runs only in its horizontal combination, whose "
                                              "PTX follows the combination's first kernel's\n");
    }
    for (int i = 0; i < cp->ncombos; i++) {
        int k = s->steps[s->combos[i].first].index;
        ptc_buf b = {0};
        ptc_buf_printf(&b, "%s; ptc combination %d, one launch of kernels", texts[k], i);
        for (int t = s->combos[i].first; t < s->combos[i].first + s->combos[i].n; t++)
            ptc_buf_printf(&b, " %d", s->steps[t].index);
        ptc_buf_printf(&b, "\n%s", cp->combos[i].ptx);
        free(texts[k]);
        texts[k] = b.data;
    }
}

int ptc_cuda_prepare_all(ptc_program *const *ps, int n, const ptc_compile_opts *const *os,
                         ptc_metrics *const *ms, char **const *texts, ptc_error *err)
{
    work *ws = calloc((size_t)n + 1, sizeof *ws);
    ptc_codegen_opts *cos = calloc((size_t)n + 1, sizeof *cos);
    int rc = ws && cos ? 0 : ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory");
    for (int i = 0; i < n && rc == 0; i++)
        rc = prepare_begin(ps[i], os[i], ms[i], &cos[i], &ws[i], err);
    double t0 = ptc_now_ms();
    if (rc == 0)
        rc = generate(ws, n, err);
    for (int i = 0; i < n && rc == 0; i++)
        rc = generate_combos(ps[i]->cuda, ps[i]->sched, &cos[i], err);
    cloaded *Ls[n > 0 ? n : 1];
    for (int i = 0; i < n && rc == 0; i++)
        Ls[i] = ws[i].L;
    if (rc == 0)
        rc = load_programs(ps, Ls, ms, n, err);
    for (int i = 0; i < n && rc == 0; i++)
        if (os[i] && os[i]->cuda_wide_variants)
            rc = generate_wide_variants(ps[i]->cuda, ps[i]->sched, &cos[i], err);
    if (ms[0]) /* the batch's time is its first program's */
        ptc_metrics_add(ms[0], "cuda_compile_wall_ms", ptc_now_ms() - t0, true);
    for (int i = 0; i < n && rc == 0; i++) {
        count_cached(ps[i]);
        if (texts[i])
            kernel_texts(ps[i], texts[i]);
    }
    for (int i = 0; ws && i < n; i++)
        free(ws[i].pending);
    free(ws);
    free(cos);
    return rc;
}

int ptc_cuda_prepare(ptc_program *p, const ptc_compile_opts *o, ptc_metrics *m, char **texts,
                     ptc_error *err)
{
    return ptc_cuda_prepare_all(&p, 1, &o, &m, &texts, err);
}

void ptc_cuda_prog_free(ptc_cuda_prog *cp)
{
    if (!cp)
        return;
    for (int d = 0; d < MAX_DEV; d++)
        loaded_free(cp->loaded[d], cp->nk, cp->ncombos);
    if (cp->mem) {
        const ptc_cuda_api *A = ptc_cuda_api_get(NULL);
        ptc_error err;
        bool pushed = false;
        ptc_cuda_device *d = ptc_cuda_device_get(cp->mem_dev, &err);
        if (A && d && ptc_cuda_enter(d, &pushed, &err) == 0) {
            A->cuMemFree(cp->mem);
            ptc_cuda_leave(pushed);
        }
    }
    for (int k = 0; k < cp->nk; k++) {
        ptc_cuda_code_free(&cp->k[k].code);
        ptc_cuda_code_free(&cp->k[k].wide);
    }
    for (int i = 0; i < cp->ncombos; i++) {
        ptc_cuda_code_free(&cp->combos[i]);
        free(cp->combo_args[i]);
    }
    free(cp->combos);
    free(cp->combo_args);
    free(cp->combo_nargs);
    free(cp->k);
    free(cp->kernel_dir);
    pthread_mutex_destroy(&cp->lock);
    free(cp);
}

cloaded *ptc_cuda_loaded_on(ptc_program *p, ptc_cuda_device *d, ptc_error *err)
{
    ptc_cuda_prog *cp = p->cuda;
    pthread_mutex_lock(&cp->lock);
    cloaded *L = cp->loaded[d->ordinal];
    int rc = 0;
    if (!L) {
        L = loaded_new(cp, d);
        ptc_metrics *none = NULL;
        rc = load_programs(&p, &L, &none, 1, err);
        if (rc)
            loaded_free(L, cp->nk, cp->ncombos);
        else
            cp->loaded[d->ordinal] = L;
    }
    pthread_mutex_unlock(&cp->lock);
    return rc ? NULL : L;
}
