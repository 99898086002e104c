/* Compile workers: LLVM runs in forked children, so that a crash inside it
 * (an LLVM ERROR abort, a segfault in a pass, a planted PTC_INJECT crash)
 * fails one compile instead of killing the user's program.
 *
 * The caller forks right before code generation, with its locks (and, from
 * Python, the GIL) held: a child has only the forking thread, and runs only
 * the work function (LLVM and plain C; never Python, CUDA or OpenMP, whose
 * other threads did not come along). Children take items from a counter in
 * shared memory, one at a time, so the items spread over the cores however
 * uneven they are. Each child writes a record per item to its own pipe:
 * START before the work, then OK with the result bytes or ERR with a
 * ptc_error, and END when the counter runs out; then it _exits (no atexit
 * handlers, no flushing of buffers it inherited). The parent reads all pipes
 * with poll until they close, reaps the children and decodes: an item
 * started and not finished belongs to a child that died, and its result is a
 * CompileError saying how (signal, exit status, or the time limit,
 * PTC_COMPILE_TIMEOUT, past which every child is killed).
 */
#include "codegen/codegen.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

enum { MAX_CHILDREN = 64, DEFAULT_TIMEOUT_S = 600 };
/* A child's exit status when an allocation failed in it (worker_oom.cpp). */
enum { OUT_OF_MEMORY_STATUS = 86 };
enum { REC_START, REC_OK, REC_ERR, REC_END };

typedef struct rec {
    int32_t item, kind;
    uint64_t len; /* payload bytes that follow */
} rec;

/* Opt-in (PTC_COMPILE_WORKER=1) until forking is cheap enough: on an H100,
 * resnet50 bf16's cold compile took 0.52-0.59 s with a worker per kernel
 * against 0.15 s in process (a fork of a process holding torch and CUDA per
 * kernel). */
bool ptc_worker_enabled(void)
{
    const char *env = getenv("PTC_COMPILE_WORKER");
    return env && *env && strcmp(env, "0") != 0;
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

void ptc_worker_exit_when_out_of_memory(int status); /* worker_oom.cpp */

_Noreturn static void child_main(int fd, atomic_int *next, int n, ptc_worker_fn fn, void *ctx,
                                 pid_t parent)
{
    child_signals(parent);
    ptc_worker_exit_when_out_of_memory(OUT_OF_MEMORY_STATUS);
    for (;;) {
        int i = atomic_fetch_add(next, 1);
        if (i >= n)
            break;
        send_rec(fd, i, REC_START, NULL, 0);
        ptc_buf out = {0};
        ptc_error err = {0};
        if (fn(ctx, i, &out, &err) == 0)
            send_rec(fd, i, REC_OK, out.data, out.len);
        else
            send_rec(fd, i, REC_ERR, &err, sizeof err);
        ptc_buf_free(&out);
    }
    send_rec(fd, -1, REC_END, NULL, 0);
    fflush(NULL); /* only the child's own writes: the parent flushed before fork */
    _exit(0);
}

/* ---- the parent ------------------------------------------------------------------------ */

typedef struct child {
    pid_t pid;
    int fd; /* read end; -1 once closed */
    ptc_buf in;
    int status;
    bool reaped;
} child;

/* Reads every pipe to its end, killing all children at the deadline. */
static bool drain(child *c, int nc, double deadline)
{
    bool timed_out = false;
    for (;;) {
        struct pollfd pf[MAX_CHILDREN];
        int np = 0, who[MAX_CHILDREN];
        for (int i = 0; i < nc; i++)
            if (c[i].fd >= 0)
                pf[np] = (struct pollfd){.fd = c[i].fd, .events = POLLIN}, who[np++] = i;
        if (np == 0)
            return timed_out;
        int wait_ms = -1;
        if (deadline > 0 && !timed_out) {
            double left = deadline - ptc_now_ms();
            wait_ms = left > 0 ? (int)left + 1 : 0;
        }
        int r = poll(pf, (nfds_t)np, wait_ms);
        if (r < 0 && errno == EINTR) /* a signal for the host: it acts once we return */
            continue;
        if (r == 0) {
            timed_out = true;
            for (int i = 0; i < nc; i++)
                kill(c[i].pid, SIGKILL);
            continue;
        }
        for (int k = 0; k < np; k++) {
            if (!pf[k].revents)
                continue;
            child *ch = &c[who[k]];
            char buf[65536];
            ssize_t got = read(ch->fd, buf, sizeof buf);
            if (got > 0) {
                ptc_buf_putn(&ch->in, buf, (size_t)got);
            } else if (got == 0 || errno != EINTR) {
                close(ch->fd);
                ch->fd = -1;
            }
        }
    }
}

static void reap(child *c)
{
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

static void how_it_died(const child *c, bool timed_out, char *buf, size_t size)
{
    int sig = c->reaped && WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0;
    if (timed_out && (sig == SIGKILL || !c->reaped))
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

/* Decodes one child's records into res; marks items it started. */
static void decode(const child *c, bool timed_out, ptc_worker_result *res, bool *seen, int n)
{
    size_t at = 0;
    int open_item = -1;
    bool ended = false;
    while (at + sizeof(rec) <= c->in.len) {
        rec r;
        memcpy(&r, c->in.data + at, sizeof r);
        at += sizeof r;
        if (r.len > c->in.len - at || (r.kind != REC_END && (r.item < 0 || r.item >= n)))
            break; /* cut short by the child's death */
        const char *payload = c->in.data + at;
        at += r.len;
        if (r.kind == REC_END) {
            ended = true;
        } else if (r.kind == REC_START) {
            open_item = r.item;
            seen[r.item] = true;
        } else if (r.kind == REC_OK) {
            res[r.item].rc = 0;
            ptc_buf_putn(&res[r.item].out, payload, r.len);
            open_item = -1;
        } else if (r.kind == REC_ERR && r.len == sizeof(ptc_error)) {
            res[r.item].rc = -1;
            memcpy(&res[r.item].err, payload, sizeof(ptc_error));
            open_item = -1;
        }
    }
    if (open_item >= 0) {
        char how[256];
        how_it_died(c, timed_out, how, sizeof how);
        ptc_errorf(&res[open_item].err, PTC_ERR_COMPILE, "codegen", "the compile worker %s", how);
        res[open_item].died = true;
    } else if (!ended) {
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "a compile worker ended early, its results complete");
    }
}

int ptc_worker_run(int n, int nprocs, ptc_worker_fn fn, void *ctx, ptc_worker_result *res)
{
    for (int i = 0; i < n; i++)
        res[i] = (ptc_worker_result){.rc = -1};
    if (n <= 0)
        return 0;
    if (nprocs > n)
        nprocs = n;
    if (nprocs > MAX_CHILDREN)
        nprocs = MAX_CHILDREN;
    if (nprocs < 1)
        nprocs = 1;
    atomic_int *next =
        mmap(NULL, sizeof *next, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (next == MAP_FAILED)
        return 1;
    atomic_init(next, 0);
    child c[MAX_CHILDREN];
    int nc = 0;
    pid_t parent = getpid();
    fflush(NULL); /* or the children would write out our buffered output again */
    double t = timeout_ms(), deadline = t > 0 ? ptc_now_ms() + t : 0;
    for (; nc < nprocs; nc++) {
        int fds[2];
        if (pipe(fds) != 0)
            break;
        fcntl(fds[0], F_SETFD, FD_CLOEXEC); /* a host thread's exec must not keep it open */
        fcntl(fds[1], F_SETFD, FD_CLOEXEC);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            child_main(fds[1], next, n, fn, ctx, parent);
        }
        close(fds[1]);
        if (pid < 0) {
            close(fds[0]);
            break;
        }
        c[nc] = (child){.pid = pid, .fd = fds[0]};
    }
    if (nc == 0) {
        munmap(next, sizeof *next);
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "cannot fork a compile worker (%s): compiling in process", strerror(errno));
        return 1;
    }
    bool timed_out = drain(c, nc, deadline);
    bool *seen = calloc((size_t)n, sizeof *seen);
    for (int i = 0; i < nc; i++) {
        reap(&c[i]);
        decode(&c[i], timed_out, res, seen, n);
        ptc_buf_free(&c[i].in);
    }
    for (int i = 0; i < n; i++) {
        if (res[i].rc == 0 || res[i].err.msg[0])
            continue;
        res[i].died = true;
        ptc_errorf(&res[i].err, PTC_ERR_COMPILE, "codegen",
                   seen[i] ? "the compile worker ended without a result"
                           : "not compiled: the compile workers died first");
    }
    free(seen);
    munmap(next, sizeof *next);
    return 0;
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
 * process (worker_oom.cpp); where not even that can start, the compile fails
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
