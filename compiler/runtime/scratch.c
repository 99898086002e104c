/* Per-thread scratch memory of the C kernels behind externs.
 *
 * The GEMM's packed panels, a convolution's im2col matrix and its contiguous
 * copies were malloc'd and freed on every call. Their first calls faulted
 * every page in (and, above malloc's mmap threshold, mapped and unmapped
 * them: on 16 threads, contention on the process's memory map), and later
 * ones did again wherever malloc had handed the memory back. Each thread
 * now keeps one buffer per use (a slot), grown when a call needs more and
 * kept until the thread ends, as BLAS libraries keep their buffers; a slot
 * is used by one call at a time on its thread, and the slots a call holds
 * while it calls another kernel (a convolution's columns while its GEMM
 * packs) are distinct. ptc_program_warm reserves what a program's externs
 * will ask for, pages touched, before its first call.
 */
#include "runtime/rt.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct thread_scratch {
    void *mem[PTC_SCRATCH_SLOTS];
    size_t bytes[PTC_SCRATCH_SLOTS];
} thread_scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local thread_scratch *mine;

static void free_scratch(void *arg)
{
    thread_scratch *s = arg;
    for (int i = 0; i < PTC_SCRATCH_SLOTS; i++)
        free(s->mem[i]);
    free(s);
}

static void make_key(void)
{
    PTC_ASSERT(pthread_key_create(&scratch_key, free_scratch) == 0);
}

void *ptc_scratch(ptc_scratch_slot slot, size_t bytes)
{
    if (!mine) {
        pthread_once(&scratch_once, make_key);
        mine = calloc(1, sizeof *mine);
        PTC_ASSERT(mine);
        pthread_setspecific(scratch_key, mine); /* freed when the thread ends */
    }
    if (mine->bytes[slot] < bytes) {
        free(mine->mem[slot]);
        size_t rounded = (bytes + 63) / 64 * 64;
        mine->mem[slot] = aligned_alloc(64, rounded);
        PTC_ASSERT(mine->mem[slot]); /* out of memory for a kernel's scratch */
        mine->bytes[slot] = rounded;
    }
    return mine->mem[slot];
}

void ptc_touch_pages(void *mem, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    volatile char *p = mem;
    for (size_t off = 0; off < bytes; off += page)
        p[off] = 0;
    if (bytes)
        p[bytes - 1] = 0;
}

void ptc_scratch_reserve(const size_t *bytes)
{
    for (int i = 0; i < PTC_SCRATCH_SLOTS; i++)
        if (bytes[i])
            ptc_touch_pages(ptc_scratch((ptc_scratch_slot)i, bytes[i]), bytes[i]);
}

void ptc_scratch_need_at_least(ptc_scratch_need *need, bool team, ptc_scratch_slot slot,
                               size_t bytes)
{
    size_t *have = team ? &need->team[slot] : &need->caller[slot];
    if (*have < bytes)
        *have = bytes;
}
