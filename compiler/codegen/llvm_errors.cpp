/* LLVM's error paths, reached from C. In a compile worker, running out of
 * memory ends the worker quietly and a fatal error is reported to the
 * worker (which fails the kernel being built with LLVM's reason); a planted
 * fatal error (PTC_INJECT's abort kind) goes through LLVM's own
 * report_fatal_error.
 *
 * Running out of memory: LLVM is built without exceptions: an allocation that fails inside it
 * throws std::bad_alloc through frames that cannot unwind it (terminate,
 * with a message on stderr) or, for LLVM's own mallocs, reports "LLVM ERROR:
 * out of memory" and aborts. A compile worker (worker.c) is a disposable
 * child, so both are turned into an _exit with a status its parent reads as
 * "ran out of memory". Never installed in the host process: the handlers are
 * process-wide, and the host's own allocations are not ptc's to end.
 */
#include <new>

#include <llvm/Support/ErrorHandling.h>
#include <cstdlib>
#include <unistd.h>

static int oom_status;

static void new_failed()
{
    _exit(oom_status);
}

static void llvm_alloc_failed(void *, const char *, bool)
{
    _exit(oom_status);
}

extern "C" void ptc_worker_exit_when_out_of_memory(int status)
{
    oom_status = status;
    std::set_new_handler(new_failed);
    llvm::install_bad_alloc_error_handler(llvm_alloc_failed, nullptr);
}

static void (*fatal_report)(const char *reason);

static void llvm_fatal_error(void *, const char *reason, bool)
{
    fatal_report(reason); /* does not return: the worker ends the child */
    abort();
}

/* In a compile worker: LLVM's fatal errors go to report (worker.c), which
 * fails the item being built with LLVM's reason and ends the child. */
extern "C" void ptc_worker_on_llvm_fatal_error(void (*report)(const char *reason))
{
    fatal_report = report;
    llvm::install_fatal_error_handler(llvm_fatal_error, nullptr);
}

/* LLVM's fatal-error path itself, as an LLVM pass that hits a broken
 * invariant takes it: "LLVM ERROR: ..." on stderr, then abort (SIGABRT). */
extern "C" [[noreturn]] void ptc_llvm_planted_fatal_error(void)
{
    llvm::report_fatal_error("planted fatal error (PTC_INJECT abort)", true);
}
