/* Command-line helpers shared by the tools (ptc-run, ptview, ptminify).
 *
 * Every tool answers bad input the same way: one line on stderr, "TOOL:
 * what was wrong", and exit status 2 (or the status the caller picks for a
 * failed run). Options are spelled "--name=VALUE" or "--name VALUE".
 */
#include "logs.h"

#include <stdarg.h>
#include <string.h>

const char *ptc_cli_opt(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != 0)
        return NULL; /* a longer option that starts with the same letters */
    if (*i + 1 < argc)
        return argv[++*i];
    if (missing)
        *missing = true;
    return NULL;
}

int ptc_cli_fail(const char *tool, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tool);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int ptc_cli_report(const char *tool, const ptc_error *err, int status)
{
    char buf[2048];
    ptc_error_format(err, buf, sizeof buf);
    fprintf(stderr, "%s: %s\n", tool, buf);
    return status;
}
