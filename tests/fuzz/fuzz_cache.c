/* Fuzz target for the kernel cache's loader (libFuzzer), and a replay driver.
 *
 * The input is the cache file of a fixed key. Loading it must never crash,
 * hang or leak, and must be a miss (the file removed) unless the input is an
 * entry for that key whose object matches the SHA-256 stored beside it, in
 * which case the object loaded is exactly the one in the file. The replay
 * build makes its own inputs: a good entry, every prefix of it, and objects
 * altered behind a recomputed CRC (what once reached the linker). The
 * libFuzzer build starts from tests/fuzz/cache_corpus (a good entry).
 */
#include "codegen/codegen.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char KEY[] = "fuzz kernel key";

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_cache: %s\n", what);
    abort();
}

static char dir[64];

static void remove_dir(void)
{
    rmdir(dir);
}

/* A cache directory of this process's own, gone when it exits. */
static void setup(void)
{
    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "/tmp/ptc_fuzz_cache_%d", (int)getpid());
    mkdir(dir, 0700);
    setenv("PTC_CACHE_DIR", dir, 1);
    atexit(remove_dir);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    setup();
    char path[1200];
    ptc_cache_path(KEY, sizeof KEY - 1, path, sizeof path);
    ptc_error err;
    unlink(path);
    if (ptc_write_file(path, data, size, &err))
        fail(err.msg);
    chmod(path, 0600);
    uint8_t *obj = NULL;
    size_t objlen = 0;
    int hit = ptc_cache_load(KEY, sizeof KEY - 1, &obj, &objlen);
    struct stat st;
    bool kept = stat(path, &st) == 0;
    if (hit != 0 && hit != 1)
        fail("ptc_cache_load returned neither hit nor miss");
    if (hit == 0 && kept)
        fail("a miss left its file behind");
    if (hit == 1) {
        /* the object is in the file, followed by its digest and the CRC */
        if (objlen + PTC_SHA256_LEN + 4 > size ||
            memcmp(data + size - PTC_SHA256_LEN - 4 - objlen, obj, objlen) != 0)
            fail("a hit returned bytes that are not the file's object");
        uint8_t digest[PTC_SHA256_LEN];
        ptc_sha256_bytes(obj, objlen, digest);
        if (memcmp(digest, data + size - PTC_SHA256_LEN - 4, PTC_SHA256_LEN) != 0)
            fail("a hit whose object does not match its SHA-256");
    }
    free(obj);
    unlink(path);
    return 0;
}

#ifndef PTC_LIBFUZZER
int main(void)
{
    setup();
    static const char object[] = "\x7f"
                                 "ELF not really an object, but bytes the linker would take";
    ptc_cache_store(KEY, sizeof KEY - 1, (const uint8_t *)object, sizeof object - 1);
    char path[1200];
    ptc_cache_path(KEY, sizeof KEY - 1, path, sizeof path);
    size_t len;
    ptc_error err;
    uint8_t *good = (uint8_t *)ptc_read_file(path, &len, &err);
    if (!good)
        fail(err.msg);
    uint8_t *bad = malloc(len);
    int n = 0;
    for (size_t cut = 0; cut <= len; cut++, n++) /* the file and every prefix */
        LLVMFuzzerTestOneInput(good, cut);
    uint64_t seed = 12345;
    for (int m = 0; m < 2000; m++, n++) { /* flips anywhere, the CRC made valid again */
        memcpy(bad, good, len);
        for (int f = 0; f <= m % 3; f++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            bad[(seed >> 33) % len] ^= (uint8_t)(1 + (seed >> 20) % 255);
        }
        uint32_t crc = ptc_crc32(0, bad, len - 4);
        memcpy(bad + len - 4, &crc, 4);
        LLVMFuzzerTestOneInput(bad, len);
    }
    free(bad);
    free(good);
    printf("fuzz_cache: %d inputs replayed, no failures\n", n);
    return 0;
}
#endif
