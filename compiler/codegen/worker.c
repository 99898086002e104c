/* Compile workers: LLVM runs in forked children, so that a crash inside it
 * (an LLVM ERROR abort, a segfault in a pass, a planted PTC_INJECT crash)
 * fails one compile instead of killing the user's program.
 *
 * One child per compile: the caller forks right before code generation,
 * with its locks (and, from Python, the GIL) held. The child has only the
 * forking thread and runs only the work function (LLVM and plain C; never
 * Python, CUDA or OpenMP, whose threads did not come along), on threads of
 * its own, as many as the process would compile on, taking items one at a
 * time. One fork, not one per thread or per kernel: a fork copies the page
 * tables of the whole process (40-110 ms under torch with a model loaded on
 * the 2-core build machine, where the whole of resnet18's codegen is 330 ms),
 * and its threads are cheap. The child writes a record per item to a pipe:
 * START before the work, then OK with the result bytes or ERR with a
 * ptc_error, and END when the items run out; then it _exits (no atexit
 * handlers, no flushing of buffers it inherited). The parent reads the pipe
 * with poll until END or its end; a child that sent END is reaped by a
 * thread of its own (its exit unmaps its copy of the address space, tens of
 * milliseconds that nothing waits for). An item started and not finished
 * belongs to a child that died: alone, it fails with a CompileError saying
 * how (signal, exit status, or the time limit, PTC_COMPILE_TIMEOUT, past
 * which the child is killed); the items left run again in a new child.
 * Ctrl-C is the parent's (the child ignores SIGINT): where the host says the
 * user interrupted (ptc_interrupted), the child is killed and every item not
 * done fails, with no retry.
 */
#include "codegen/asan.h"
#include "codegen/codegen.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

enum { MAX_THREADS = 64, DEFAULT_TIMEOUT_S = 600, INTERRUPT_POLL_MS = 50 };
/* A child's exit status when an allocation failed in it (llvm_errors.cpp). */
enum { OUT_OF_MEMORY_STATUS = 86, LLVM_FATAL_STATUS = 87 };
/* REC_FATAL: the item LLVM reported a fatal error on, just before the child
 * ends (its payload is the error saying so). */
enum { REC_START, REC_OK, REC_ERR, REC_FATAL, REC_END };

typedef struct rec {
    int32_t item, kind;
    uint64_t len; /* payload bytes that follow */
} rec;

#ifdef PTC_ASAN
/* ASan's allocator has no fork handlers: a child forked while another thread
 * holds its quarantine lock spins on it for good (unit.test_codegen_cpu hung
 * in LLVM's first delete in the child). glibc's malloc is fork-safe. */
enum { WORKER_BY_DEFAULT = 0 };
#else
enum { WORKER_BY_DEFAULT = 1 };
#endif

/* On unless PTC_COMPILE_WORKER=0 (off by default in ASan builds, on with
 * PTC_COMPILE_WORKER=1): one fork per compile that builds anything
 * (bench/compile_worker.py measures what it costs). */
bool ptc_worker_enabled(void)
{
    const char *env = getenv("PTC_COMPILE_WORKER");
    return env && *env ? strcmp(env, "0") != 0 : WORKER_BY_DEFAULT;
}

static double timeout_ms(void)
{
    const char *env = getenv("PTC_COMPILE_TIMEOUT");
    double s = env && *env ? atof(env) : DEFAULT_TIMEOUT_S;
    return s > 0 ? s * 1e3 : -1; /* 0: no limit */
}

/* ---- the child ------------------------------------------------------------------------- */

static void put(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3); /* the parent is gone */
        c += w, n -= (size_t)w;
    }
}

static void send_rec(int fd, int item, int kind, const void *payload, size_t len)
{
    rec r = {.item = item, .kind = kind, .len = len};
    put(fd, &r, sizeof r);
    if (len)
        put(fd, payload, len);
}

/* The host's handlers (Python's faulthandler, a sanitizer's) must not run in
 * the child: a crash here is the parent's to report. Ctrl-C is the parent's
 * too; a child whose parent died is killed rather than left compiling. */
static void child_signals(pid_t parent)
{
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGPIPE, SIGTERM};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        signal(fatal[i], SIG_DFL);
    signal(SIGINT, SIG_IGN);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (getppid() != parent)
        _exit(3);
}

void ptc_worker_exit_when_out_of_memory(int status); /* llvm_errors.cpp */
void ptc_worker_on_llvm_fatal_error(void (*report)(const char *reason)); /* llvm_errors.cpp */

/* What a child works through: items[0..n), taken one at a time by its
 * threads, each record written whole under the lock. */
typedef struct child_work {
    int fd;
    const int *items;
    int n;
    ptc_worker_fn fn;
    void *ctx;
    atomic_int next;
    pthread_mutex_t lock;
} child_work;

static void send_whole(child_work *w, int item, int kind, const void *payload, size_t len)
{
    pthread_mutex_lock(&w->lock);
    send_rec(w->fd, item, kind, payload, len);
    pthread_mutex_unlock(&w->lock);
}

/* The child's work and each of its threads' current item, for LLVM's
 * fatal-error handler, which runs on the failing thread. */
static child_work *the_work;
static _Thread_local int current_item = -1;

/* LLVM reported a fatal error on this thread's item: the item fails with
 * LLVM's words (not its default "LLVM ERROR:" line on the host's stderr),
 * and the child ends, as LLVM would have ended it; the parent runs the
 * items still open again. */
_Noreturn static void llvm_fatal_error(const char *reason)
{
    ptc_error err = {0};
    ptc_errorf(&err, PTC_ERR_COMPILE, "codegen", "LLVM reported a fatal error: %s", reason);
    if (the_work && current_item >= 0)
        send_whole(the_work, current_item, REC_FATAL, &err, sizeof err);
    _exit(LLVM_FATAL_STATUS);
}

static void *child_thread(void *arg)
{
    child_work *w = arg;
    for (;;) {
        int i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n)
            return NULL;
        int item = w->items[i];
        current_item = item;
        send_whole(w, item, REC_START, NULL, 0);
        ptc_buf out = {0};
        ptc_error err = {0};
        if (w->fn(w->ctx, item, &out, &err) == 0)
            send_whole(w, item, REC_OK, out.data, out.len);
        else
            send_whole(w, item, REC_ERR, &err, sizeof err);
        ptc_buf_free(&out);
    }
}

/* The child's threads are its own (made after the fork, so none is stopped
 * inside a lock the parent's threads held): it runs the items nthreads at
 * a time, as the process itself would. */
_Noreturn static void child_main(child_work *w, int nthreads, pid_t parent)
{
    child_signals(parent);
    ptc_worker_exit_when_out_of_memory(OUT_OF_MEMORY_STATUS);
    the_work = w;
    ptc_worker_on_llvm_fatal_error(llvm_fatal_error);
    pthread_t th[MAX_THREADS];
    int started = 0;
    while (started < nthreads - 1 && pthread_create(&th[started], NULL, child_thread, w) == 0)
        started++;
    child_thread(w);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    send_rec(w->fd, -1, REC_END, NULL, 0);
    fflush(NULL); /* only the child's own writes: the parent flushed before fork */
    _exit(0);
}

/* ---- the parent ------------------------------------------------------------------------ */

typedef struct child {
    pid_t pid;
    int fd;     /* read end; -1 once closed */
    ptc_buf in; /* bytes not yet taken: a record still coming */
    bool ended; /* END came: the child is only exiting now */
    int status;
    bool reaped;
    bool timed_out, interrupted; /* killed: past the deadline, or the user's Ctrl-C */
    bool no_room;                /* killed: this process could not hold its records */
} child;

/* Where the records go: res, and which items are done or open (started,
 * not finished: a child that dies leaves them open). */
typedef struct sink {
    ptc_worker_result *res;
    bool *done, *open;
    int n;
    bool fatal; /* an item's LLVM fatal error ended the child: the open ones are innocent */
} sink;

/* Takes the whole records that have come, as they come, so that the
 * results are held once: the pipe's bytes keep only a record cut short. */
static void take_records(child *c, sink *k)
{
    size_t at = 0;
    while (!c->ended && at + sizeof(rec) <= c->in.len) {
        rec r;
        memcpy(&r, c->in.data + at, sizeof r);
        if (r.len > c->in.len - at - sizeof r)
            break; /* its payload is still coming */
        const char *payload = c->in.data + at + sizeof r;
        at += sizeof r + r.len;
        if (r.kind == REC_END || r.item < 0 || r.item >= k->n) {
            c->ended = r.kind == REC_END;
            continue;
        }
        ptc_worker_result *res = &k->res[r.item];
        if (r.kind == REC_START) {
            k->open[r.item] = true;
        } else if (r.kind == REC_OK) { /* sized to fit (and a NUL): results can be large */
            res->rc = 0;
            ptc_buf_free(&res->out);
            res->out = (ptc_buf){.data = malloc(r.len + 1), .cap = r.len + 1};
            if (!res->out.data)
                res->out.cap = 0; /* ptc_buf's own growth says it is out of memory */
            ptc_buf_putn(&res->out, payload, r.len);
            if (ptc_buf_failed(&res->out)) { /* a result cut short is no result */
                ptc_buf_free(&res->out);
                res->rc = ptc_errorf(&res->err, PTC_ERR_COMPILE, "codegen",
                                     "out of memory taking the compile worker's result "
                                     "(%u bytes)", (unsigned)r.len);
            }
            k->open[r.item] = false, k->done[r.item] = true;
        } else if ((r.kind == REC_ERR || r.kind == REC_FATAL) && r.len == sizeof(ptc_error)) {
            res->rc = -1;
            res->died = r.kind == REC_FATAL;
            k->fatal = k->fatal || r.kind == REC_FATAL;
            memcpy(&res->err, payload, sizeof(ptc_error));
            k->open[r.item] = false, k->done[r.item] = true;
        }
    }
    memmove(c->in.data, c->in.data + at, c->in.len - at);
    c->in.len -= at;
}

/* How long drain may wait for the child's next bytes: until the deadline,
 * in slices short enough to see the user's Ctrl-C. */
static int wait_ms(const child *c, double deadline)
{
    int wait = INTERRUPT_POLL_MS;
    if (deadline > 0 && !c->timed_out) {
        double left = deadline - ptc_now_ms();
        wait = left <= 0 ? 0 : left < wait ? (int)left + 1 : wait;
    }
    return wait;
}

/* Reads the child's pipe until END or its end, killing it at the deadline or
 * when the user interrupts. */
static void drain(child *c, sink *k, double deadline)
{
    while (c->fd >= 0) {
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        int r = poll(&pf, 1, wait_ms(c, deadline));
        if (!c->interrupted && ptc_interrupted()) {
            c->interrupted = true;
            kill(c->pid, SIGKILL);
        }
        if (r < 0 && errno == EINTR) /* a signal for the host: it acts once we return */
            continue;
        if (r == 0) {
            if (deadline > 0 && !c->timed_out && ptc_now_ms() >= deadline) {
                c->timed_out = true;
                kill(c->pid, SIGKILL);
            }
            continue;
        }
        char buf[65536];
        ssize_t got = read(c->fd, buf, sizeof buf);
        if (got > 0) {
            ptc_buf_putn(&c->in, buf, (size_t)got);
            if (ptc_buf_failed(&c->in) && !c->no_room) { /* its records are cut: stop it */
                c->no_room = true;
                kill(c->pid, SIGKILL);
            }
            if (!c->no_room)
                take_records(c, k);
        }
        bool closed = got == 0 || (got < 0 && errno != EINTR);
        if (closed || c->ended) {
            close(c->fd);
            c->fd = -1;
        }
    }
}

static void *reap_in_background(void *pid)
{
    while (waitpid((pid_t)(intptr_t)pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void reap(child *c)
{
    if (c->ended) { /* its status tells nothing: leave its exit to a thread of its own */
        pthread_t th;
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        c->reaped = r == c->pid;
        if (c->reaped || (r == 0 && pthread_create(&th, NULL, reap_in_background,
                                                   (void *)(intptr_t)c->pid) == 0)) {
            if (!c->reaped)
                pthread_detach(th);
            return;
        }
    }
    for (;;) {
        pid_t r = waitpid(c->pid, &c->status, 0);
        if (r == c->pid) {
            c->reaped = true;
            return;
        }
        if (r < 0 && errno != EINTR)
            return; /* reaped by someone else (SIGCHLD ignored or handled): judged by END */
    }
}

static void how_it_died(const child *c, char *buf, size_t size)
{
    int sig = c->reaped && WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0;
    if (c->interrupted && (sig == SIGKILL || !c->reaped))
        snprintf(buf, size, "was stopped: the compile was interrupted (Ctrl-C)");
    else if (c->no_room && (sig == SIGKILL || !c->reaped))
        snprintf(buf, size, "was stopped: this process ran out of memory for its results");
    else if (c->timed_out && (sig == SIGKILL || !c->reaped))
        snprintf(buf, size,
                 "ran past the compile time limit (PTC_COMPILE_TIMEOUT=%g s) and was killed",
                 timeout_ms() / 1e3);
    else if (sig)
        snprintf(buf, size, "crashed (signal %d, %s)", sig, strsignal(sig));
    else if (c->reaped && WIFEXITED(c->status) && WEXITSTATUS(c->status) == OUT_OF_MEMORY_STATUS)
        snprintf(buf, size, "ran out of memory (an allocation inside LLVM failed)");
    else if (c->reaped && WIFEXITED(c->status) && WEXITSTATUS(c->status) != 0)
        snprintf(buf, size, "exited with status %d (an LLVM fatal error?)", WEXITSTATUS(c->status));
    else
        snprintf(buf, size, "ended without finishing");
}

/* One child forked to run items[0..n) on nthreads threads; it is drained
 * and reaped. -1 when it could not be forked. */
static int run_child(child *c, const int *items, int n, int nthreads, ptc_worker_fn fn, void *ctx,
                     sink *k, double deadline)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC); /* a host thread's exec must not keep it open */
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    child_work w = {.fd = fds[1], .items = items, .n = n, .fn = fn, .ctx = ctx};
    atomic_init(&w.next, 0);
    pthread_mutex_init(&w.lock, NULL);
    pid_t parent = getpid();
    fflush(NULL); /* or the child would write out our buffered output again */
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child_main(&w, nthreads, parent);
    }
    close(fds[1]);
    pthread_mutex_destroy(&w.lock);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    *c = (child){.pid = pid, .fd = fds[0]};
    drain(c, k, deadline);
    reap(c);
    return 0;
}

/* Fails every item still to do (the loop below says why) and ends it. */
static void fail_rest(ptc_worker_result *res, const int *pending, int npending, const char *why)
{
    for (int i = 0; i < npending; i++) {
        res[pending[i]].died = true;
        ptc_errorf(&res[pending[i]].err, PTC_ERR_COMPILE, "codegen", "%s", why);
    }
}

/* One child runs every item, on as many threads as the process would use.
 * Where it dies, the items it left are run again in a new child: an item
 * it died on alone is the culprit and fails with how it died; where several
 * were running at once, the rest run one at a time until the culprit is
 * known. A failure costs forks, a compile that goes well one. */
int ptc_worker_run(int n, int nthreads, ptc_worker_fn fn, void *ctx, ptc_worker_result *res)
{
    for (int i = 0; i < n; i++)
        res[i] = (ptc_worker_result){.rc = -1};
    if (n <= 0)
        return 0;
    nthreads = nthreads > n ? n : nthreads < 1 ? 1 : nthreads;
    if (nthreads > MAX_THREADS)
        nthreads = MAX_THREADS;
    int *pending = malloc(sizeof *pending * (size_t)n), npending = n, forks = 0;
    bool *done = calloc((size_t)n, sizeof *done), *open = calloc((size_t)n, sizeof *open);
    for (int i = 0; i < n; i++)
        pending[i] = i;
    double t0 = ptc_now_ms(), t = timeout_ms(), deadline = t > 0 ? t0 + t : 0;
    int rc = 0;
    while (npending > 0) {
        child c;
        memset(open, 0, sizeof *open * (size_t)n);
        sink k = {.res = res, .done = done, .open = open, .n = n};
        if (run_child(&c, pending, npending, nthreads, fn, ctx, &k, deadline) != 0) {
            ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "cannot fork a compile worker (%s)%s",
                    strerror(errno), forks ? "" : ": compiling in process");
            if (forks == 0)
                rc = 1;
            else
                fail_rest(res, pending, npending,
                          "not compiled: no compile worker could be forked");
            break;
        }
        forks++;
        ptc_buf_free(&c.in);
        int nopen = 0, left = 0;
        for (int i = 0; i < npending; i++)
            if (open[pending[i]])
                nopen++;
        char how[256];
        how_it_died(&c, how, sizeof how);
        /* timed out: all it ran took too long; interrupted: all it ran is
         * stopped; after a fatal error the one to blame has failed already,
         * the open ones only run again */
        bool stopped = c.timed_out || c.interrupted || c.no_room;
        if (!k.fatal && (nopen == 1 || (nopen > 0 && stopped)))
            for (int i = 0; i < npending; i++)
                if (open[pending[i]]) {
                    res[pending[i]].died = done[pending[i]] = true;
                    ptc_errorf(&res[pending[i]].err, PTC_ERR_COMPILE, "codegen",
                               "the compile worker %s", how);
                }
        for (int i = 0; i < npending; i++)
            if (!done[pending[i]])
                pending[left++] = pending[i];
        if (left > 0 && (c.ended || stopped || (nopen == 0 && nthreads == 1 && !k.fatal))) {
            fail_rest(res, pending, left,
                      c.ended         ? "the compile worker ended without a result"
                      : c.interrupted ? "not compiled: the compile was interrupted (Ctrl-C)"
                      : c.no_room     ? "not compiled: out of memory for the compile worker's "
                                        "results"
                                      : "not compiled: the compile worker died first");
            break;
        }
        if (nopen != 1 && !k.fatal)
            nthreads = 1; /* which of them was it? */
        npending = left;
    }
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "compile workers: %d item(s), %d fork(s), %.1f ms", n,
            forks, ptc_now_ms() - t0);
    free(pending);
    free(done);
    free(open);
    return rc;
}

/* ---- room for LLVM ------------------------------------------------------------------------ */

/* LLVM cannot fail an allocation gracefully: std::bad_alloc crosses its
 * frames (built without exceptions) and terminates the process. So before
 * LLVM runs in this process (the CPU's object code, the CUDA backend's PTX),
 * the room it will need is asked for: a mapping of that size, made and
 * dropped at once. Under an address-space limit (RLIMIT_AS, how a process's
 * memory is bounded short of an OOM kill) the mapping fails where LLVM
 * would. Per compiling thread the room is a malloc heap (glibc gives a thread
 * its own, 64 MiB of address space), a stack, LLVM's fixed working set and a
 * share per body entry of the kernel to build; over-estimated on purpose (a
 * 2-thread CPU compile of 14 kernels of up to 256 entries grew the process
 * by 167 MB at its peak, 1 thread by 51 MB), since a wrong guess costs only
 * a fork. Where the room is missing, the kernels compile in one forked
 * compile worker, in which running out of memory ends the child, not the
 * process (llvm_errors.cpp); where not even that can start, the compile fails
 * with "out of memory". */
enum { THREAD_ROOM = (64 + 16 + 32) << 20, ENTRY_ROOM = 64 << 10 };

size_t ptc_llvm_room(const ptc_kernel *k)
{
    size_t entries = 0;
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            entries += (size_t)k->groups[g].members[m].body.n;
    return THREAD_ROOM + entries * ENTRY_ROOM;
}

bool ptc_llvm_have_room(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return false;
    munmap(p, bytes);
    return true;
}
