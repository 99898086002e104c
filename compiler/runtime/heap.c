/* The C heap under a CPU training step.
 *
 * glibc's malloc hands the free top of its heap back to the system once
 * more than M_TRIM_THRESHOLD bytes lie there; the threshold follows the
 * largest block it has unmapped (twice that block), so after a few steps it
 * sits at about twice the largest gradient. A compiled backward allocates
 * every gradient while the forward's saved tensors are still alive, so the
 * gradients end up together at the top of the heap; `zero_grad` frees them
 * at once, glibc trims them, and the next backward faults every page in
 * again. On resnet18 (batch 8, 64x64, one thread) that was 6,900 page
 * faults a step against eager's none, spent inside torch's
 * convolution_backward, which writes the large weight gradients first.
 *
 * So once a CPU training program is compiled, ptc sets the two thresholds
 * glibc's own rule would reach after unmapping a 32 MiB block (the largest
 * it adapts to), the trim threshold at least twice the program's gradient
 * bytes. A user who tuned malloc (MALLOC_*_ variables, GLIBC_TUNABLES) is
 * left alone.
 */
#include "runtime/runtime.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

enum { MMAP_THRESHOLD = 32 << 20 };

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t trim_threshold; /* what ptc set, 0: nothing yet */

static bool user_tuned_malloc(void)
{
    static const char *vars[] = {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                 "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]))
            return true;
    const char *t = getenv("GLIBC_TUNABLES");
    return t && strstr(t, "glibc.malloc.");
}

size_t ptc_runtime_keep_heap(size_t gradient_bytes)
{
#ifdef __GLIBC__
    if (user_tuned_malloc())
        return 0;
    size_t want = 2 * gradient_bytes > 2 * (size_t)MMAP_THRESHOLD ? 2 * gradient_bytes
                                                                  : 2 * (size_t)MMAP_THRESHOLD;
    pthread_mutex_lock(&heap_lock);
    if (want > trim_threshold && mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 &&
        mallopt(M_TRIM_THRESHOLD, want > (size_t)INT_MAX ? INT_MAX : (int)want) == 1) {
        trim_threshold = want;
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "malloc keeps up to %zu MiB free at the heap's top (gradients of a CPU "
                "training program: %zu MiB)",
                want >> 20, gradient_bytes >> 20);
    }
    size_t now = trim_threshold;
    pthread_mutex_unlock(&heap_lock);
    return now;
#else
    (void)gradient_bytes;
    return 0;
#endif
}
