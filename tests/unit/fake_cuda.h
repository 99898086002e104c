/* The stand-in libcuda (fake_cuda.c) in a Check suite: ptc opens it in place
 * of libcuda.so.1 (PTC_CUDA_LIBRARY), and the suite reads the entries its
 * launches ran. PTC_FAKE_CUDA is its path (tests/CMakeLists.txt); include
 * after check.h and runtime/runtime.h. */
#ifndef PTC_TEST_FAKE_CUDA_H
#define PTC_TEST_FAKE_CUDA_H

#include <dlfcn.h>
#include <stdlib.h>

/* The entry of launch i of this process (oldest first), NULL past the last;
 * the number of launches. */
static const char *(*fake_launched)(int);
static int (*fake_nlaunched)(void);
/* Launch i's blocks (what 0), threads per block (1), shared memory bytes (2). */
static unsigned (*fake_grid)(int, int);
/* Launches from now on record 64-bit parameters first and first+1 (-1:
 * none); watched parameter k (0, 1) of launch i. */
static void (*fake_watch_params)(int);
static unsigned long long (*fake_param)(int, int);
/* The driver JITs run so far; the PTX the latest was given. */
static int (*fake_nlinked)(void);
static const char *(*fake_last_linked)(void);

/* Makes the stand-in this process's libcuda and finds its readers. */
static void use_fake_cuda(void)
{
    setenv("PTC_CUDA_LIBRARY", PTC_FAKE_CUDA, 1);
    ptc_error err;
    ck_assert_msg(ptc_cuda_available(&err) == 0, "%s", err.msg);
    void *lib = dlopen(PTC_FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(lib);
    *(void **)&fake_launched = dlsym(lib, "fake_cuda_launched");
    *(void **)&fake_nlaunched = dlsym(lib, "fake_cuda_nlaunched");
    *(void **)&fake_grid = dlsym(lib, "fake_cuda_grid");
    *(void **)&fake_watch_params = dlsym(lib, "fake_cuda_watch_params");
    *(void **)&fake_param = dlsym(lib, "fake_cuda_param");
    *(void **)&fake_nlinked = dlsym(lib, "fake_cuda_nlinked");
    *(void **)&fake_last_linked = dlsym(lib, "fake_cuda_last_linked");
    ck_assert(fake_launched && fake_nlaunched && fake_grid && fake_watch_params && fake_param &&
              fake_nlinked && fake_last_linked);
    dlclose(lib); /* ptc's own handle keeps it loaded */
}

/* A borrowed "device" tensor of s0 x s1 int8 elements: the stand-in's
 * launches read nothing, so a few bytes stand for any size. */
static inline ptc_tensor fake_device_i8(int64_t s0, int64_t s1)
{
    static int8_t bytes[64];
    ptc_tensor x = {.dtype = PTC_I8, .ndim = 2, .device = {PTC_DEV_CUDA, 0}, .data = bytes};
    x.sizes[0] = s0, x.sizes[1] = s1, x.strides[0] = s1, x.strides[1] = 1;
    return x;
}

/* What ptc_cuda_get_index_counts added since before. */
static inline ptc_cuda_index_counts index_counts_since(ptc_cuda_index_counts before)
{
    ptc_cuda_index_counts now;
    ptc_cuda_get_index_counts(&now);
    return (ptc_cuda_index_counts){now.launches_i32 - before.launches_i32,
                                   now.launches_i64 - before.launches_i64,
                                   now.wide_variants - before.wide_variants};
}

#endif /* PTC_TEST_FAKE_CUDA_H */
