/* Running out of memory in a compile worker ends the worker quietly.
 *
 * LLVM is built without exceptions: an allocation that fails inside it
 * throws std::bad_alloc through frames that cannot unwind it (terminate,
 * with a message on stderr) or, for LLVM's own mallocs, reports "LLVM ERROR:
 * out of memory" and aborts. A compile worker (worker.c) is a disposable
 * child, so both are turned into an _exit with a status its parent reads as
 * "ran out of memory". Never installed in the host process: the handlers are
 * process-wide, and the host's own allocations are not ptc's to end.
 */
#include <new>

#include <llvm/Support/ErrorHandling.h>
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
