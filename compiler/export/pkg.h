/* Internal to compiler/export: the package folder's manifest. */
#ifndef PTC_EXPORT_PKG_H
#define PTC_EXPORT_PKG_H

#include "export/export.h"

enum { PTC_PKG_PATH = 1100 };

typedef struct ptc_pkg_manifest {
    const char *cpu_target;  /* the CPU the cpu kernels were built for */
    const ptc_json *targets; /* array of "cpu", "sm_80", ... */
    ptc_storage *weights;    /* weights.bin, mapped and verified: one reference
                              * for the caller (ptc_pkg_unmap) */
} ptc_pkg_manifest;

/* Checks dir/manifest.json (format, ptc's version) and every file it lists
 * against its digest; the manifest's strings live in arena a. */
int ptc_pkg_verify(const char *dir, ptc_arena *a, ptc_pkg_manifest *out, ptc_error *err);
/* Drops a reference on a mapped file (NULL: nothing). */
void ptc_pkg_unmap(ptc_storage *file);
/* XXH64 of data[len] (xxh64.c): the weights' pin. */
uint64_t ptc_pkg_xxh64(const void *data, size_t len, uint64_t seed);
bool ptc_pkg_has_target(const ptc_pkg_manifest *m, const char *target);
/* The package's kernels for a model on dev, in buf, or NULL (compile them)
 * with the reason logged: another CPU, or a target the package lacks. */
const char *ptc_pkg_kernels_for(const char *dir, const ptc_pkg_manifest *man, ptc_device dev,
                                char *buf, size_t size);
/* dir/kernels/<target>; -1 when it does not fit. */
int ptc_pkg_kernel_dir(const char *dir, const char *target, char *out, size_t size);

#endif /* PTC_EXPORT_PKG_H */
