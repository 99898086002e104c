/* Fault injection (PTC_INJECT): planted bugs in the real pipeline.
 *
 * The spec is parsed once into a small table of (stage, op, kind, nth) rules.
 * A stage asks ptc_inject_hit for every op it handles; the first matching rule
 * decides. Crashes and hangs happen right here, so the failure really is in
 * the asking stage (a hang the host reports interrupted ends as an error);
 * errors and wrong results are the caller's to produce, because only the
 * caller can fail its pass or perturb what it computes. The
 * N-th-query counters are per rule and atomic, so OpenMP threads asking from a
 * running kernel count each query once.
 */
#include "ir/ir.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 16

static const char *const stage_names[] = {"prims", "lower", "codegen", "runtime"};
static const char *const kind_names[] = {"none", "crash", "error", "wrong", "hang", "abort"};
enum { NSTAGES = sizeof stage_names / sizeof *stage_names };
_Static_assert(sizeof kind_names / sizeof *kind_names == PTC_INJECT_ABORT + 1,
               "inject kind names out of step");

typedef struct rule {
    int stage; /* index into stage_names */
    int op;    /* ptc_op, or -1 for any op */
    ptc_inject_kind kind;
    long nth;            /* fire only on the nth matching query; 0 = always */
    atomic_long queries; /* matching queries so far */
} rule;

static struct {
    int nrules;
    rule rules[MAX_RULES];
    char spec[512];
    bool configured; /* by ptc_inject_configure: the environment is ignored */
} inj;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static char *volatile track_buf;
static volatile size_t track_size;

static int find_name(const char *const *names, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0)
            return i;
    return -1;
}

/* One "<stage>:<op>:<kind>[@N]" entry of length len. */
static int parse_rule(const char *s, size_t len, rule *r, ptc_error *err)
{
    const char *end = s + len, *c1 = memchr(s, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
    if (!c1 || !c2)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject",
                          "PTC_INJECT: entry '%.*s' is not <stage>:<op>:<kind>[@N]", (int)len, s);
    r->stage = find_name(stage_names, NSTAGES, s, (size_t)(c1 - s));
    if (r->stage < 0)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject",
                          "PTC_INJECT: unknown stage '%.*s' in '%.*s' (expected prims, lower, "
                          "codegen or runtime; interp is the oracle and cannot be injected)",
                          (int)(c1 - s), s, (int)len, s);
    char opname[64];
    size_t oplen = (size_t)(c2 - c1 - 1);
    if (oplen == 0 || oplen >= sizeof opname)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject", "PTC_INJECT: bad op name in '%.*s'",
                          (int)len, s);
    memcpy(opname, c1 + 1, oplen);
    opname[oplen] = 0;
    r->op = strcmp(opname, "*") == 0 ? -1 : ptc_op_lookup(opname);
    if (r->op == -1 && strcmp(opname, "*") != 0)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject",
                          "PTC_INJECT: unknown op '%s' in '%.*s' (an ops.def name or *)", opname,
                          (int)len, s);
    const char *kind = c2 + 1, *at = memchr(kind, '@', (size_t)(end - kind));
    int k = find_name(kind_names, PTC_INJECT_ABORT + 1, kind, (size_t)((at ? at : end) - kind));
    if (k <= 0)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject",
                          "PTC_INJECT: unknown kind '%.*s' in '%.*s' (expected crash, error, "
                          "wrong, hang or abort)",
                          (int)((at ? at : end) - kind), kind, (int)len, s);
    r->kind = (ptc_inject_kind)k;
    if (r->kind == PTC_INJECT_ABORT && strcmp(stage_names[r->stage], "codegen") != 0)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject",
                          "PTC_INJECT: abort (LLVM's fatal error) plants only in codegen, "
                          "not in '%.*s'",
                          (int)len, s);
    r->nth = 0;
    if (at) {
        char num[24], *numend;
        size_t numlen = (size_t)(end - at - 1);
        if (numlen == 0 || numlen >= sizeof num)
            return ptc_errorf(err, PTC_ERR_PARSE, "inject", "PTC_INJECT: bad count in '%.*s'",
                              (int)len, s);
        memcpy(num, at + 1, numlen);
        num[numlen] = 0;
        r->nth = strtol(num, &numend, 10);
        if (*numend || r->nth < 1)
            return ptc_errorf(err, PTC_ERR_PARSE, "inject",
                              "PTC_INJECT: count '@%s' in '%.*s' must be a positive integer", num,
                              (int)len, s);
    }
    atomic_init(&r->queries, 0);
    return 0;
}

static int configure(const char *spec, ptc_error *err)
{
    inj.nrules = 0;
    inj.spec[0] = 0;
    if (!spec || !*spec)
        return 0;
    if (strlen(spec) >= sizeof inj.spec)
        return ptc_errorf(err, PTC_ERR_PARSE, "inject", "PTC_INJECT: spec too long");
    rule rules[MAX_RULES];
    int n = 0;
    for (const char *s = spec; *s;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (n == MAX_RULES)
            return ptc_errorf(err, PTC_ERR_PARSE, "inject", "PTC_INJECT: more than %d entries",
                              MAX_RULES);
        if (parse_rule(s, len, &rules[n], err))
            return -1;
        n++;
        s += len + (comma ? 1 : 0);
    }
    memcpy(inj.rules, rules, sizeof rules);
    inj.nrules = n;
    snprintf(inj.spec, sizeof inj.spec, "%s", spec);
    return 0;
}

static void read_env(void)
{
    if (inj.configured)
        return;
    ptc_error err;
    if (configure(getenv("PTC_INJECT"), &err)) {
        fprintf(stderr, "ptc: %s (ignored)\n", err.msg);
        inj.nrules = 0;
        inj.spec[0] = 0;
    }
}

int ptc_inject_configure(const char *spec, ptc_error *err)
{
    inj.configured = true;
    pthread_once(&env_once, read_env); /* never reads the environment after this */
    return configure(spec, err);
}

const char *ptc_inject_spec(void)
{
    pthread_once(&env_once, read_env);
    return inj.spec;
}

void ptc_inject_track(char *buf, size_t size)
{
    track_buf = NULL;
    track_size = size;
    track_buf = buf;
}

/* A real segfault, whatever handlers the host installed (a sanitizer's or
 * Python's faulthandler would otherwise turn it into an exit with a report,
 * and a failure's signature must not depend on the build). */
_Noreturn static void crash(void)
{
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    abort();
}

static _Thread_local bool deferred;

void ptc_inject_defer(bool on)
{
    deferred = on;
}

_Noreturn void ptc_inject_act(ptc_inject_kind kind)
{
    if (kind == PTC_INJECT_HANG)
        for (;;)
            pause();
    crash();
}

/* Sleeps for ever, unless the host says the user interrupted (ptc_interrupted,
 * every 20 ms from the hanging thread): Python's SIGINT handler only sets a
 * flag, which a plain pause() sleeps through, and the thread hanging may not
 * be the one the signal wakes. */
static void hang(const char *stage, ptc_op op, ptc_error *err)
{
    for (;;) {
        if (ptc_interrupted()) {
            ptc_errorf(err, PTC_ERR_INJECTED, stage,
                       "planted hang in %s of %s interrupted (PTC_INJECT=%s)", stage,
                       ptc_op_name(op), inj.spec);
            return;
        }
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
}

bool ptc_inject_armed(void)
{
    pthread_once(&env_once, read_env);
    return inj.nrules > 0 || track_buf;
}

ptc_inject_kind ptc_inject_hit(const char *stage, ptc_op op, ptc_error *err)
{
    char *buf = track_buf;
    if (buf && track_size) {
        size_t n = strlen(stage);
        n = n < track_size - 1 ? n : track_size - 1;
        memcpy(buf, stage, n);
        buf[n] = 0;
    }
    pthread_once(&env_once, read_env);
    for (int i = 0; i < inj.nrules; i++) {
        rule *r = &inj.rules[i];
        if (strcmp(stage_names[r->stage], stage) != 0 || (r->op >= 0 && r->op != (int)op))
            continue;
        long q = atomic_fetch_add(&r->queries, 1) + 1;
        if (r->nth && q != r->nth)
            continue;
        switch (r->kind) {
        case PTC_INJECT_CRASH:
        case PTC_INJECT_HANG:
            if (deferred)
                return r->kind;
            if (r->kind == PTC_INJECT_CRASH)
                crash();
            hang(stage, op, err);
            return PTC_INJECT_ERROR;
        case PTC_INJECT_ABORT: /* LLVM's to carry out: codegen acts on it */
            return PTC_INJECT_ABORT;
        case PTC_INJECT_ERROR:
            ptc_errorf(err, PTC_ERR_INJECTED, stage, "injected error in %s of %s (PTC_INJECT=%s)",
                       stage, ptc_op_name(op), inj.spec);
            return PTC_INJECT_ERROR;
        case PTC_INJECT_WRONG:
            return PTC_INJECT_WRONG;
        case PTC_INJECT_NONE:
            break;
        }
    }
    return PTC_INJECT_NONE;
}

void ptc_inject_perturb(ptc_tensor *t)
{
    int64_t n = ptc_tensor_numel(t), idx[PTC_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        if (ptc_dtype_is_float(t->dtype)) {
            double x = ptc_tensor_get_f64(t, idx);
            ptc_tensor_set_f64(t, idx, x + 1.0 + fabs(x) / 4);
        } else if (ptc_dtype_is_bool(t->dtype)) {
            ptc_tensor_set_i64(t, idx, !ptc_tensor_get_i64(t, idx));
        } else {
            ptc_tensor_set_i64(t, idx, ptc_tensor_get_i64(t, idx) + 1);
        }
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d])
                break;
            idx[d] = 0;
        }
    }
}
