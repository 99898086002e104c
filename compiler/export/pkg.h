/* Internal to compiler/export: the package folder's manifest. */
#ifndef PTC_EXPORT_PKG_H
#define PTC_EXPORT_PKG_H

#include "export/export.h"

enum { PTC_PKG_PATH = 1100 };

typedef struct ptc_pkg_manifest {
    const char *cpu_target;  /* the CPU the cpu kernels were built for */
    const ptc_json *targets; /* array of "cpu", "sm_80", ... */
} ptc_pkg_manifest;

/* Checks dir/manifest.json (format, ptc's version) and every file it lists
 * against its SHA-256; the manifest's strings live in arena a. */
int ptc_pkg_verify(const char *dir, ptc_arena *a, ptc_pkg_manifest *out, ptc_error *err);
bool ptc_pkg_has_target(const ptc_pkg_manifest *m, const char *target);
/* dir/kernels/<target>; -1 when it does not fit. */
int ptc_pkg_kernel_dir(const char *dir, const char *target, char *out, size_t size);

#endif /* PTC_EXPORT_PKG_H */
