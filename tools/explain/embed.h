/* ptexplain's embedded CPython (embed.c): start the interpreter the build was
 * configured with, route torch.compile to ptc.compile, run a script or one
 * entry function with ptc measuring, and hand back what ptc measured. */
#ifndef PTC_EXPLAIN_EMBED_H
#define PTC_EXPLAIN_EMBED_H

#include <stdbool.h>
#include <stddef.h>

typedef struct xp_run {
    /* script mode: argv[0] is the script */
    int argc;
    char **argv;
    /* --entry FILE.py:FUNCTION */
    const char *entry_file, *entry_fn;
    int runs;             /* calls of the entry */
    const char *backend;  /* the entry's backend */
    bool no_grad;         /* the entry's calls under torch.no_grad() */
} xp_run;

enum { XP_RAN = 0, XP_RAISED = 1, XP_SETUP = 2 };

/* Starts Python (sys.argv from run). XP_SETUP with msg on failure. */
int xp_py_start(const xp_run *run, char *msg, size_t size);
/* Runs the script or the entry. XP_RAN, XP_RAISED (the exception is kept
 * for xp_py_print_error) or XP_SETUP (msg: a usage problem found in the
 * file, e.g. no example_inputs). *wall_ms: the time it ran. */
int xp_py_exec(const xp_run *run, double *wall_ms, char *msg, size_t size);
/* The measurements as JSON (malloc'd), or NULL with msg. */
char *xp_py_collect(char *msg, size_t size);
/* The kept exception's one-line summary ("ValueError: bad"), or "". */
const char *xp_py_error_summary(void);
/* Prints the kept exception's traceback to stderr. */
void xp_py_print_error(void);
/* Flushes sys.stdout and sys.stderr, so the report follows the script's output. */
void xp_py_flush(void);
int xp_py_finish(void);

#endif /* PTC_EXPLAIN_EMBED_H */
