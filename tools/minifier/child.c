/* Children: every test runs in a forked process, so that a crash, a hang or
 * an out-of-memory in the compiler under test is a result, never the end of
 * ptminify.
 *
 * A child inherits the candidate (built by the parent before the fork), runs
 * it under RLIMIT_AS and without core dumps in a process group of its own,
 * and writes its result into a slot of a shared anonymous mapping. Its stderr
 * goes to a per-slot temporary file that the parent reads afterwards: crash
 * details (assertions, "LLVM ERROR", "out of memory") only exist there. The
 * stage a crash or hang happened in comes from ptc_inject_track: every stage
 * of the pipeline asks the injection hook about each op, and the hook copies
 * the stage name into the shared slot as it goes.
 *
 * The parent keeps SIGCHLD blocked and waits with sigtimedwait, so that it
 * wakes for a finished child or for the nearest deadline, whichever is first.
 */
#include "minify.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile int mf_interrupted;

typedef struct slot {
    pid_t pid;      /* 0 when free */
    int errfd;      /* the child's stderr */
    double started; /* ms */
    bool timed_out;
} slot;

struct mf_pool {
    mf_limits lim;
    int nslots;
    slot *slots;
    mf_result *shared; /* nslots results in a MAP_SHARED mapping */
    int devnull;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int temp_fd(ptc_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ptminify_err_XXXXXX", ptc_temp_dir());
    int fd = mkstemp(path);
    if (fd < 0)
        return ptc_errorf(err, PTC_ERR_IO, "minify", "cannot create %s: %s", path, strerror(errno));
    unlink(path);
    return fd;
}

mf_pool *mf_pool_new(const mf_limits *lim, ptc_error *err)
{
    mf_pool *p = calloc(1, sizeof *p);
    p->lim = *lim;
    p->nslots = lim->jobs > 0 ? lim->jobs : 1;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    p->shared = mmap(NULL, sizeof(mf_result) * (size_t)p->nslots, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    p->devnull = open("/dev/null", O_RDWR);
    if (p->shared == MAP_FAILED || p->devnull < 0) {
        ptc_errorf(err, PTC_ERR_IO, "minify", "cannot set up children: %s", strerror(errno));
        goto fail;
    }
    for (int i = 0; i < p->nslots; i++)
        p->slots[i].errfd = -1;
    for (int i = 0; i < p->nslots; i++)
        if ((p->slots[i].errfd = temp_fd(err)) < 0)
            goto fail;
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    return p;
fail:
    if (p->shared == MAP_FAILED)
        p->shared = NULL;
    mf_pool_free(p);
    return NULL;
}

void mf_pool_free(mf_pool *p)
{
    if (!p)
        return;
    mf_pool_kill_all(p);
    for (int i = 0; i < p->nslots; i++)
        if (p->slots[i].errfd >= 0)
            close(p->slots[i].errfd);
    if (p->shared)
        munmap(p->shared, sizeof(mf_result) * (size_t)p->nslots);
    if (p->devnull >= 0)
        close(p->devnull);
    free(p->slots);
    free(p);
}

int mf_pool_slots(const mf_pool *p)
{
    return p->nslots;
}

int mf_pool_running(const mf_pool *p)
{
    int n = 0;
    for (int i = 0; i < p->nslots; i++)
        n += p->slots[i].pid != 0;
    return n;
}

static void kill_slot(mf_pool *p, int i)
{
    slot *s = &p->slots[i];
    if (!s->pid)
        return;
    kill(-s->pid, SIGKILL);
    kill(s->pid, SIGKILL);
    int st;
    while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
}

void mf_pool_kill(mf_pool *p, int i)
{
    kill_slot(p, i);
}

void mf_pool_kill_all(mf_pool *p)
{
    for (int i = 0; i < p->nslots; i++)
        kill_slot(p, i);
}

/* ---- the child ----------------------------------------------------------------- */

static void set_limits(const mf_limits *lim)
{
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
#ifndef __SANITIZE_ADDRESS__
    /* (AddressSanitizer reserves terabytes of address space: no limit there) */
    if (lim->mem_mb > 0) {
        rlim_t bytes = (rlim_t)lim->mem_mb << 20;
        struct rlimit as = {bytes, bytes};
        setrlimit(RLIMIT_AS, &as);
    }
#endif
}

/* Common set-up of every child: own process group, default signals, stdout
 * to /dev/null, stderr to errfd, limits. */
static void child_setup(const mf_pool *p, int errfd)
{
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    dup2(p->devnull, 1);
    if (errfd >= 0)
        dup2(errfd, 2);
    set_limits(&p->lim);
}

int mf_pool_start(mf_pool *p, const mf_case *c, mf_exec_fn exec, const mf_exec_opts *o)
{
    int i = 0;
    while (i < p->nslots && p->slots[i].pid)
        i++;
    PTC_ASSERT(i < p->nslots);
    slot *s = &p->slots[i];
    mf_result *r = &p->shared[i];
    memset(r, 0, sizeof *r);
    if (ftruncate(s->errfd, 0) == 0)
        lseek(s->errfd, 0, SEEK_SET);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        child_setup(p, s->errfd);
        ptc_inject_track(r->stage, sizeof r->stage);
        double t0 = now_ms();
        exec(c, o, r);
        r->seconds = (now_ms() - t0) / 1e3;
        r->done = 1;
        fflush(stderr);
        _exit(0);
    }
    if (pid < 0) {
        r->kind = MF_INVALID;
        snprintf(r->message, sizeof r->message, "fork failed: %s", strerror(errno));
        return -1;
    }
    setpgid(pid, pid); /* also here: no window where a kill(-pid) misses it */
    s->pid = pid;
    s->started = now_ms();
    s->timed_out = false;
    return i;
}

/* ---- classifying what happened --------------------------------------------- */

/* The last `size - 1` bytes the child wrote to stderr. */
static void read_stderr(int fd, char *buf, size_t size)
{
    buf[0] = 0;
    off_t len = lseek(fd, 0, SEEK_END);
    if (len <= 0)
        return;
    off_t from = len > (off_t)size - 1 ? len - ((off_t)size - 1) : 0;
    ssize_t n = pread(fd, buf, (size_t)(len - from), from);
    buf[n > 0 ? n : 0] = 0;
}

/* The most telling line of a crashed child's stderr: an assertion, an LLVM
 * fatal error, an uncaught exception. */
static void crash_detail(const char *text, char *out, size_t size)
{
    static const char *const keys[] = {"assertion",        "internal error", "LLVM ERROR",
                                       "terminate called", "Assertion",      "fatal"};
    out[0] = 0;
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *hit = strstr(text, keys[k]);
        if (!hit)
            continue;
        const char *line = hit;
        while (line > text && line[-1] != '\n')
            line--;
        const char *end = strchr(hit, '\n');
        int n = end ? (int)(end - line) : (int)strlen(line);
        snprintf(out, size, "%.*s", n, line);
        return;
    }
}

static void classify(mf_pool *p, int i, int status, mf_result *r)
{
    slot *s = &p->slots[i];
    *r = p->shared[i];
    char text[4096];
    if (r->done && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    read_stderr(s->errfd, text, sizeof text);
    r->done = 0;
    r->seconds = (now_ms() - s->started) / 1e3;
    r->errclass = PTC_ERR_NONE;
    r->message[0] = 0;
    if (s->timed_out) {
        r->kind = MF_HANG;
        snprintf(r->message, sizeof r->message, "no result after %g s", p->lim.timeout_s);
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        r->kind = MF_OOM;
        snprintf(r->message, sizeof r->message, "killed by SIGKILL (the system's OOM killer?)");
    } else if (strstr(text, "out of memory") || strstr(text, "bad_alloc") ||
               strstr(text, "Cannot allocate memory")) {
        r->kind = MF_OOM;
        snprintf(r->message, sizeof r->message, "over the %ld MB limit", p->lim.mem_mb);
    } else {
        r->kind = MF_CRASH;
        r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        r->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
        crash_detail(text, r->message, sizeof r->message);
    }
}

int mf_pool_wait(mf_pool *p, mf_result *r)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (;;) {
        double now = now_ms(), next = now + 100;
        for (int i = 0; i < p->nslots; i++) {
            slot *s = &p->slots[i];
            if (!s->pid)
                continue;
            int status;
            pid_t got = waitpid(s->pid, &status, WNOHANG);
            if (got == s->pid) {
                classify(p, i, status, r);
                s->pid = 0;
                return i;
            }
            double deadline = s->started + p->lim.timeout_s * 1e3;
            if (!s->timed_out && now >= deadline) {
                s->timed_out = true;
                kill(-s->pid, SIGKILL);
                kill(s->pid, SIGKILL);
                next = now; /* reap it right away */
            } else if (!s->timed_out && deadline < next) {
                next = deadline;
            }
        }
        if (mf_interrupted)
            return -1;
        double wait = next - now_ms();
        if (wait <= 0)
            continue;
        struct timespec ts = {(time_t)(wait / 1e3), (long)(((long long)wait % 1000) * 1000000LL)};
        if (ts.tv_sec == 0 && ts.tv_nsec < 200000)
            ts.tv_nsec = 200000;
        sigtimedwait(&chld, NULL, &ts);
    }
}

/* ---- recording every intermediate value ----------------------------------- */

typedef struct recorder {
    const ptc_graph *g;
    ptc_tensor *values; /* by value id */
} recorder;

static int record_node(void *ctx, const ptc_node *n, const ptc_tensor *outs)
{
    recorder *rec = ctx;
    for (int i = 0; i < n->nout; i++) {
        rec->values[n->outs[i]->id] = outs[i];
        ptc_tensor_retain(&rec->values[n->outs[i]->id]);
    }
    return 0;
}

/* In the child: run, then write what was recorded (also after an error). */
static void record_child(const ptc_graph *g, const ptc_tensor *inputs, const char *path)
{
    recorder rec = {g, calloc((size_t)g->nvalues + 1, sizeof(ptc_tensor))};
    ptc_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    ptc_run_opts ro = {.on_node = record_node, .ctx = &rec};
    ptc_error err;
    if (ptc_interp_run(g, inputs, g->ninputs, outs, &ro, &err)) {
        char msg[1200];
        ptc_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "recording stopped: %s\n", msg);
    }
    int n = 0;
    ptc_tensor *ts = calloc((size_t)g->nvalues + 1, sizeof *ts);
    const char **names = calloc((size_t)g->nvalues + 1, sizeof *names);
    for (int v = 0; v < g->nvalues; v++)
        if (rec.values[v].data) {
            ts[n] = rec.values[v];
            names[n++] = g->values[v]->name;
        }
    if (ptc_tensorfile_write(path, ts, names, n, &err)) {
        fprintf(stderr, "recording: %s\n", err.msg);
        _exit(3);
    }
    _exit(0);
}

int mf_record(mf_pool *p, const ptc_graph *g, const ptc_tensor *inputs, ptc_tensor *recorded,
              ptc_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ptminify_rec_XXXXXX", ptc_temp_dir());
    int fd = mkstemp(path);
    if (fd < 0)
        return ptc_errorf(err, PTC_ERR_IO, "minify", "cannot create %s: %s", path, strerror(errno));
    close(fd);
    int errfd = p->slots[0].errfd;
    if (ftruncate(errfd, 0) == 0)
        lseek(errfd, 0, SEEK_SET);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        child_setup(p, errfd);
        record_child(g, inputs, path);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = -1;
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char text[2048], detail[512] = "";
        read_stderr(errfd, text, sizeof text);
        crash_detail(text, detail, sizeof detail);
        ptc_errorf(err, PTC_ERR_RUNTIME, "interp", "recording intermediate values failed (%s%s%s)",
                   pid < 0               ? "fork failed"
                   : WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
                                         : "the recorder failed",
                   detail[0] ? ": " : "", detail);
    } else {
        ptc_tensorfile tf;
        if (ptc_tensorfile_read(path, &tf, err) == 0) {
            rc = 0;
            for (int i = 0; i < tf.n; i++) {
                ptc_value *v = ptc_graph_find_value(g, tf.names[i]);
                if (v && !v->def)
                    continue;
                if (v) {
                    recorded[v->id] = tf.tensors[i];
                    ptc_tensor_retain(&recorded[v->id]);
                    rc++;
                }
            }
            ptc_tensorfile_free(&tf);
        }
    }
    unlink(path);
    return rc;
}
