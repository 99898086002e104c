/* An address-space limit (RLIMIT_AS) a little above what the process holds,
 * how a Check suite makes allocations fail for real; include after check.h.
 * ASan's shadow memory cannot live under one: suites skip these cases there. */
#ifndef PTC_TEST_ADDRESS_LIMIT_H
#define PTC_TEST_ADDRESS_LIMIT_H

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

/* Limits the process to its present size plus headroom bytes; *old is the
 * limit to put back with setrlimit(RLIMIT_AS, old). */
static inline void limit_address_space(size_t headroom, struct rlimit *old)
{
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert(f && fscanf(f, "%ld", &pages) == 1);
    fclose(f);
    ck_assert_int_eq(getrlimit(RLIMIT_AS, old), 0);
    struct rlimit lim = *old;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + headroom;
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);
}

#endif
