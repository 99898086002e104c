/* ptexplain: run a PyTorch script with ptc and explain why it is slow.
 *
 *   ptexplain [OPTIONS] SCRIPT.py [ARGS...]
 *   ptexplain [OPTIONS] --entry FILE.py:FUNCTION
 *   ptexplain [OPTIONS] TRACE_DIR
 *
 * The driver: parse the command line, give the run a trace directory (the
 * user's PTC_TRACE_DIR, else a temporary one removed at the end), run the
 * script in the embedded interpreter with ptc measuring (embed.c), build and
 * analyse the report from what ptc measured (explain.h), print it as text or
 * JSON, then the script's traceback if it raised. Processes the script
 * started (a distributed job's ranks) that compiled get a report each after
 * it (ranks.c). Given a trace directory such a run left, ptexplain prints
 * the reports of the processes measured in it and runs nothing.
 *
 * Exit status: 0 the script ran (the report is complete); 1 the script raised
 * or exited with a non-zero status (the report so far is printed, then the
 * traceback), or ptexplain failed after the script ran; 2 bad command line, a
 * missing file, or ptc could not be started (a one-line error).
 */
#include "embed.h"
#include "explain.h"
#include "tools/viewer/html.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct args {
    xp_run run;
    const char *out, *html;
    const char *trace_in; /* ptexplain TRACE_DIR */
    bool json, no_color;
} args;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ptexplain [OPTIONS] SCRIPT.py [ARGS...]\n"
            "       ptexplain [OPTIONS] --entry FILE.py:FUNCTION\n"
            "       ptexplain [OPTIONS] TRACE_DIR\n"
            "Runs the script with ptc (torch.compile is routed to ptc.compile) and reports\n"
            "graphs, graph breaks ranked by measured cost, recompiles, ops that ran outside\n"
            "ptc's kernels and performance hints; then the same for each process the script\n"
            "started that compiled (a distributed job's ranks), its lines marked [rank N].\n"
            "Given the PTC_TRACE_DIR of such a run, prints its processes' reports again.\n"
            "  --entry FILE.py:FUNCTION  call FUNCTION (a function or nn.Module class) of FILE\n"
            "                  with FILE's example_inputs(), compiled with ptc\n"
            "  --runs N        calls of the entry (default 3)\n"
            "  --backend NAME  the entry's backend: ptc (default), eager or reference\n"
            "  --no-grad       call the entry under torch.no_grad()\n"
            "  --json          write the report as JSON\n"
            "  --no-color      no colors (also when NO_COLOR is set or the output is not a terminal)\n"
            "  -o FILE         write the report to FILE instead of standard output\n"
            "  --html FILE     also write one self-contained HTML page: the report, then every\n"
            "                  compile's stages drawn and linked by provenance (see man ptview)\n"
            "  -h, --help      this help; --version: ptc's version\n");
}

__attribute__((format(printf, 1, 2))) static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ptexplain: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

static int check_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return bad("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return bad("%s: not a file", path);
    if (access(path, R_OK) < 0)
        return bad("%s: %s", path, strerror(errno));
    return 0;
}

/* 0, or an exit status (-1: --help / --version printed). */
static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.run = {.runs = 3, .backend = "ptc"}};
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        const char *o = argv[i];
        bool has_value = i + 1 < argc;
        if (strcmp(o, "--") == 0) {
            i++;
            break;
        } else if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            usage(stdout);
            return -1;
        } else if (strcmp(o, "--version") == 0) {
            printf("ptexplain (ptc) %s\n", PTC_VERSION);
            return -1;
        } else if (strcmp(o, "--json") == 0) {
            a->json = true;
        } else if (strcmp(o, "--no-color") == 0) {
            a->no_color = true;
        } else if (strcmp(o, "--no-grad") == 0) {
            a->run.no_grad = true;
        } else if (strcmp(o, "-o") == 0 || strcmp(o, "--entry") == 0 || strcmp(o, "--runs") == 0 ||
                   strcmp(o, "--backend") == 0 || strcmp(o, "--html") == 0) {
            if (!has_value)
                return bad("%s needs a value (see ptexplain --help)", o);
            const char *v = argv[++i];
            if (strcmp(o, "-o") == 0) {
                a->out = v;
            } else if (strcmp(o, "--html") == 0) {
                a->html = v;
            } else if (strcmp(o, "--entry") == 0) {
                const char *colon = strrchr(v, ':');
                if (!colon || colon == v || !colon[1])
                    return bad("--entry %s: expected FILE.py:FUNCTION", v);
                a->run.entry_file = strndup(v, (size_t)(colon - v));
                a->run.entry_fn = colon + 1;
            } else if (strcmp(o, "--runs") == 0) {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || n < 1 || n > 1000000)
                    return bad("--runs %s: expected a number of calls from 1 to 1000000", v);
                a->run.runs = (int)n;
            } else {
                if (strcmp(v, "ptc") && strcmp(v, "eager") && strcmp(v, "reference"))
                    return bad("--backend %s: expected ptc, eager or reference", v);
                a->run.backend = v;
            }
        } else {
            return bad("unknown option %s (see ptexplain --help)", o);
        }
    }
    if (a->run.entry_file) {
        if (i < argc)
            return bad("--entry takes no script (got %s)", argv[i]);
        return check_file(a->run.entry_file);
    }
    if (i >= argc)
        return bad("no script given (usage: ptexplain [OPTIONS] SCRIPT.py [ARGS...])");
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
        if (i + 1 < argc || a->html)
            return bad("%s: a trace directory takes no %s", argv[i],
                       a->html ? "--html" : "arguments");
        a->trace_in = argv[i];
        return 0;
    }
    a->run.argc = argc - i;
    a->run.argv = argv + i;
    return check_file(argv[i]);
}

/* ---- the temporary trace directory ---------------------------------------------------- */

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(sub);
            else
                unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

static char temp_trace[4096];

static int trace_dir(void)
{
    const char *user = getenv("PTC_TRACE_DIR");
    if (user && *user)
        return 0;
    snprintf(temp_trace, sizeof temp_trace, "%s/ptexplain.XXXXXX", ptc_temp_dir());
    if (!mkdtemp(temp_trace))
        return bad("cannot create a trace directory under %s: %s", ptc_temp_dir(),
                   strerror(errno));
    setenv("PTC_TRACE_DIR", temp_trace, 1);
    return 0;
}

/* ---- report --------------------------------------------------------------------------- */

static const char *target_text(const args *a, ptc_buf *b)
{
    if (a->run.entry_file) {
        ptc_buf_printf(b, "%s:%s (%d call%s)", a->run.entry_file, a->run.entry_fn, a->run.runs,
                       a->run.runs == 1 ? "" : "s");
    } else {
        for (int i = 0; i < a->run.argc; i++)
            ptc_buf_printf(b, "%s%s", i ? " " : "", a->run.argv[i]);
    }
    return b->data;
}

/* The traces of the run's trace directory dir for the page: the script's
 * own process's (where it compiled), then each rank's rank_N folder, labelled
 * when there are ranks. How many; none with err set. */
static int open_traces(const char *dir, const xp_procs *procs, ptv_html_trace *out, ptc_error *err)
{
    int n = 0;
    ptc_error own_err;
    ptv_trace *own = ptv_open(dir, &own_err);
    if (own)
        out[n++] = (ptv_html_trace){own, procs->n ? "the script's process" : NULL};
    for (int k = 0; k < procs->n; k++) {
        int rank = procs->reports[k].proc_rank;
        if (rank < 0)
            continue; /* a process without a rank compiles into dir itself */
        char path[4096];
        snprintf(path, sizeof path, "%s/rank_%d", dir, rank);
        ptv_trace *t = ptv_open(path, err);
        if (t)
            out[n++] =
                (ptv_html_trace){t, ptc_arena_printf(procs->reports[k].arena, "rank %d", rank)};
    }
    if (n == 0)
        *err = own_err;
    return n;
}

/* The HTML page: the text report (with the processes the script started),
 * then the run's traces: its own and each rank's. */
static int write_html(const args *a, const xp_report *r, const xp_procs *procs)
{
    ptc_buf text = {0};
    if (procs->n)
        xp_render_procs_text(&text, r, procs, false);
    else
        xp_render_text(&text, r, false);
    ptc_error err;
    ptv_html_trace *traces = calloc((size_t)procs->n + 1, sizeof *traces);
    int n = traces ? open_traces(getenv("PTC_TRACE_DIR"), procs, traces, &err)
                   : ptc_errorf(&err, PTC_ERR_INTERNAL, "html", "out of memory") + 1;
    int rc = 0;
    if (!n || ptv_write_html_traces(traces, n, r->target, text.data ? text.data : "", a->html,
                                    &err) < 0) {
        char buf[1400];
        ptc_error_format(&err, buf, sizeof buf);
        fprintf(stderr, "ptexplain: --html %s: %s\n", a->html, buf);
        rc = 1;
    }
    for (int k = 0; k < n; k++)
        ptv_close(traces[k].trace);
    free(traces);
    ptc_buf_free(&text);
    return rc;
}

/* The report as text or JSON into -o's file or stdout; top is NULL when
 * reading a trace directory. */
static int print_reports(const args *a, const xp_report *top, const xp_procs *procs)
{
    ptc_buf out = {0};
    FILE *f = a->out ? fopen(a->out, "w") : stdout;
    bool color = !a->no_color && !a->json && !a->out && !getenv("NO_COLOR") && isatty(1);
    if (procs->n && a->json)
        xp_render_procs_json(&out, top, procs);
    else if (procs->n)
        xp_render_procs_text(&out, top, procs, color);
    else if (a->json)
        xp_render_json(&out, top);
    else
        xp_render_text(&out, top, color);
    int rc = 0;
    if (!f || fwrite(out.data, 1, out.len, f) != out.len || (f != stdout && fclose(f) != 0)) {
        fprintf(stderr, "ptexplain: %s: %s\n", a->out ? a->out : "stdout", strerror(errno));
        rc = 1;
    }
    fflush(stdout);
    ptc_buf_free(&out);
    return rc;
}

static int report_failed(const char *what, ptc_error *err)
{
    char buf[1400];
    ptc_error_format(err, buf, sizeof buf);
    fprintf(stderr, "ptexplain: %s: %s\n", what, buf);
    return 1;
}

/* ptexplain TRACE_DIR */
static int report_trace_dir(const args *a)
{
    xp_procs procs;
    ptc_error err;
    if (xp_procs_load(a->trace_in, 0, NULL, &procs, &err) < 0)
        return report_failed("cannot read the trace directory", &err);
    if (!procs.n)
        return bad("%s holds no measurements (measured_<pid>.json, in it or its rank_N folders): "
                   "ptexplain writes them into PTC_TRACE_DIR when it runs a script",
                   a->trace_in);
    int rc = print_reports(a, NULL, &procs);
    xp_procs_free(&procs);
    return rc;
}

static int write_report(const args *a, int status, double wall_ms)
{
    char msg[2048] = "";
    char *json = xp_py_collect(msg, sizeof msg);
    if (!json) {
        fprintf(stderr, "ptexplain: cannot read ptc's measurements: %s\n", msg);
        return 1;
    }
    xp_report r = {0};
    ptc_buf target = {0};
    r.target = target_text(a, &target);
    r.status = status == XP_RAN ? 0 : 1;
    r.error = status == XP_RAN ? NULL : xp_py_error_summary();
    r.wall_ms = wall_ms;
    ptc_error err;
    int rc = 0;
    xp_procs procs = {0};
    if (xp_report_build(&r, json, strlen(json), &err) < 0) {
        rc = report_failed("cannot build the report", &err);
    } else if (xp_procs_load(getenv("PTC_TRACE_DIR"), (long)getpid(), r.target, &procs, &err) < 0) {
        rc = report_failed("cannot read the measurements of the processes it started", &err);
    } else {
        rc = print_reports(a, &r, &procs);
        if (a->html && write_html(a, &r, &procs) != 0)
            rc = 1;
    }
    xp_procs_free(&procs);
    xp_report_free(&r);
    ptc_buf_free(&target);
    free(json);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *outputs[] = {a.out, a.html};
    for (int i = 0; i < 2; i++) {
        if (!outputs[i])
            continue;
        FILE *f = fopen(outputs[i], "w"); /* fail before the script runs, not after */
        if (!f)
            return bad("%s: %s", outputs[i], strerror(errno));
        fclose(f);
    }
    if (a.trace_in)
        return report_trace_dir(&a);
    if ((rc = trace_dir()))
        return rc;
    char msg[2048] = "";
    int status = xp_py_start(&a.run, msg, sizeof msg);
    double wall_ms = 0;
    if (status == XP_RAN)
        status = xp_py_exec(&a.run, &wall_ms, msg, sizeof msg);
    if (status == XP_SETUP) {
        xp_py_flush();
        rc = bad("%s", msg);
    } else {
        xp_py_flush();
        rc = write_report(&a, status, wall_ms);
        if (status == XP_RAISED) {
            xp_py_print_error();
            rc = 1;
        }
    }
    xp_py_flush();
    if (xp_py_finish() < 0 && rc == 0)
        rc = 1;
    if (temp_trace[0])
        remove_tree(temp_trace);
    return rc;
}
