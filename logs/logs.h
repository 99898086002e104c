/* ptc logs: log components (PTC_LOGS), the trace directory (PTC_TRACE_DIR),
 * per-pass timers recorded into metrics.json, and the small JSON writer/reader
 * every tool shares. Usable from every module; depends only on compiler/ir.
 *
 * Trace directory layout (the one input format of ptview):
 *   DIR/index.json           {"version":1,"ptc_version":"0.1.0","compiles":[
 *                              {"id":"forward_0","frame":"forward","recompile":0,
 *                               "function":"forward","file":"model.py","line":12,
 *                               "reason":"first call","stages":["captured",...],
 *                               "files":["captured.ptir",...]}, ...]}
 *   DIR/<frame>_<recompile>/ captured.ptir prims.ptir joint.ptir forward.ptir
 *                            backward.ptir loops.txt kernels.txt kernel_<n>.ll
 *                            kernel_<n>.ptx guards.txt breaks.json metrics.json
 *   DIR/<frame>_<recompile>.program_<k>/  a graph cut into pieces: each distinct
 *                            piece's program (its captured graph and stages;
 *                            the graph's own folder keeps the whole)
 * index.json is rewritten (atomically, via rename) whenever a compile closes,
 * so a trace cut short still opens. (It is also rewritten when a compile
 * begins and after each file or batch of files, with "complete": false
 * until ptc_trace_end, so a compile that crashed is listed too. A folder
 * name already used by an earlier run in the same directory gets a "-2",
 * "-3", ... suffix.)
 * metrics.json: {"times_ms": {"<pass>": ms, ..., "total": ms},
 *                "counts": {"<name>": n, ...}}
 */
#ifndef PTC_LOGS_H
#define PTC_LOGS_H

#include "ir/ir.h"

/* ------------------------------------------------------------------------------
 * Log components
 * ---------------------------------------------------------------------------- */

#define PTC_LOG_COMPONENTS(X)                                                   \
    X(GRAPH_BREAKS, "graph_breaks", "why a graph was split")                    \
    X(GUARDS, "guards", "guards installed for each compiled entry")             \
    X(RECOMPILES, "recompiles", "which guard failed and forced a recompile")    \
    X(CAPTURED, "captured", "stage-1 graphs as captured")                       \
    X(PRIMS, "prims", "stage-2 graphs after decomposition")                     \
    X(LOOPS, "loops", "loop IR")                                                \
    X(KERNELS, "kernels", "fusion groups and the memory plan")                  \
    X(OUTPUT_CODE, "output_code", "generated LLVM IR / PTX")                    \
    X(PERF, "perf", "compile-time metrics per pass")                            \
    X(CACHE, "cache", "kernel cache hits, misses and rejects")                  \
    X(RUNTIME, "runtime", "kernel launches, buffer plans and calls into torch")

typedef enum {
#define X(id, name, help) PTC_LOG_##id,
    PTC_LOG_COMPONENTS(X)
#undef X
    PTC_LOG_COUNT
} ptc_logc;

enum { PTC_LOG_OFF = 0, PTC_LOG_INFO = 1, PTC_LOG_DEBUG = 2 };

/* Parses a spec like "graph_breaks,+guards,-perf" ("+name" = debug, "all").
 * Unknown names are an error naming the name and listing the valid ones.
 * ptc_log_init reads PTC_LOGS (once; errors are reported on stderr). */
int ptc_log_configure(const char *spec, ptc_error *err);
void ptc_log_init(void);
int ptc_log_level(ptc_logc c);
static inline bool ptc_log_on(ptc_logc c, int level) { return ptc_log_level(c) >= level; }
/* "[ptc:guards] message\n" on the log stream (stderr unless redirected). */
void ptc_log(ptc_logc c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A multi-line block (e.g. a printed graph), each line prefixed. */
void ptc_log_block(ptc_logc c, int level, const char *title, const char *text);
void ptc_log_set_stream(FILE *f);
const char *ptc_log_name(ptc_logc c);
/* A 0/1 environment switch: what `name` is set to, or dflt when it is unset
 * or empty; any other value warns once (through *warned) that
 * `as_by_default` (what the default does) applies, and gives dflt. */
bool ptc_env_switch(const char *name, bool dflt, int *warned, const char *as_by_default);

/* ------------------------------------------------------------------------------
 * JSON: a writer that builds text into a ptc_buf, and a reader into a tree.
 * ---------------------------------------------------------------------------- */

typedef struct ptc_jw {
    ptc_buf *b;
    int depth;
    bool need_comma[64];
    bool pretty;
} ptc_jw;
void ptc_jw_init(ptc_jw *w, ptc_buf *b, bool pretty);
void ptc_jw_obj_begin(ptc_jw *w);
void ptc_jw_obj_end(ptc_jw *w);
void ptc_jw_arr_begin(ptc_jw *w);
void ptc_jw_arr_end(ptc_jw *w);
void ptc_jw_key(ptc_jw *w, const char *key); /* inside an object, before a value */
void ptc_jw_str(ptc_jw *w, const char *s);   /* NULL -> null */
void ptc_jw_int(ptc_jw *w, int64_t v);
void ptc_jw_num(ptc_jw *w, double v);        /* non-finite -> null */
void ptc_jw_bool(ptc_jw *w, bool v);
void ptc_jw_null(ptc_jw *w);

typedef enum { PTC_JNULL, PTC_JBOOL, PTC_JNUM, PTC_JSTR, PTC_JARR, PTC_JOBJ } ptc_jkind;
typedef struct ptc_json {
    ptc_jkind kind;
    bool b;
    double num;
    const char *str;           /* JSTR */
    int n;                     /* JARR / JOBJ element count */
    struct ptc_json **items;   /* JARR / JOBJ values */
    const char **keys;         /* JOBJ keys */
} ptc_json;
/* Parses into arena `a`; errors carry line:col and `filename`. */
ptc_json *ptc_json_parse(ptc_arena *a, const char *text, size_t len, const char *filename,
                         ptc_error *err);
const ptc_json *ptc_json_get(const ptc_json *obj, const char *key); /* NULL if absent */
const char *ptc_json_str(const ptc_json *obj, const char *key, const char *dflt);
double ptc_json_num(const ptc_json *obj, const char *key, double dflt);
/* Writes a parsed value back out; what nests max_depth levels deep or more
 * (counting the writer's open levels) is written as null. */
void ptc_jw_value(ptc_jw *w, const ptc_json *j, int max_depth);

/* ------------------------------------------------------------------------------
 * Timers and metrics: per-pass compile times, node counts, cache hits.
 * ---------------------------------------------------------------------------- */

double ptc_now_ms(void); /* monotonic */

#define PTC_MAX_METRICS 64
typedef struct ptc_metrics {
    int n;
    struct { char name[48]; double value; bool is_time; } items[PTC_MAX_METRICS];
} ptc_metrics;
/* Adds to (or creates) a named metric. Times are milliseconds. */
void ptc_metrics_add(ptc_metrics *m, const char *name, double value, bool is_time);
double ptc_metrics_get(const ptc_metrics *m, const char *name);
/* Adds every metric of src to dst, each named prefix + its name (a
 * backward's "prims" as "backward_prims"); NULL prefix: the same names. */
void ptc_metrics_add_all(ptc_metrics *dst, const ptc_metrics *src, const char *prefix);
void ptc_metrics_json(const ptc_metrics *m, ptc_jw *w);

/* Times a pass: t = ptc_timer_start(); ...; ptc_timer_stop(&metrics, "prims", t). */
static inline double ptc_timer_start(void) { return ptc_now_ms(); }
void ptc_timer_stop(ptc_metrics *m, const char *pass, double started);

/* ------------------------------------------------------------------------------
 * Trace directory
 * ---------------------------------------------------------------------------- */

typedef struct ptc_trace ptc_trace;

/* Opens (creating) a trace directory. NULL dir: use $PTC_TRACE_DIR, and return
 * NULL (no error) when it is unset. An existing index.json is extended. */
ptc_trace *ptc_trace_open(const char *dir, ptc_error *err);
void ptc_trace_close(ptc_trace *t); /* writes index.json, frees */
const char *ptc_trace_dir(const ptc_trace *t);

/* One compile: a folder "<frame>_<recompile>" (frame sanitised to [A-Za-z0-9_.-]). */
typedef struct ptc_trace_compile ptc_trace_compile;
ptc_trace_compile *ptc_trace_begin(ptc_trace *t, const char *frame, int recompile,
                                   const char *function, const char *file, int line,
                                   const char *reason, ptc_error *err);
/* A compile of part of whole's graph (one program of a graph cut into
 * pieces): a folder and an index entry of its own, "<whole's id>.<part>"
 * (made unique as above), with whole's frame, function and place, and
 * reason saying which part it is. Ended with ptc_trace_end. */
ptc_trace_compile *ptc_trace_begin_part(ptc_trace_compile *whole, const char *part,
                                        const char *reason, ptc_error *err);
/* Writes <folder>/<file> and records the stage name ("captured", "prims",
 * "loops", ...; NULL for auxiliary files such as guards.txt). */
int ptc_trace_write(ptc_trace_compile *c, const char *stage, const char *file,
                    const char *data, size_t len, ptc_error *err);
/* Writes texts[i] (NUL-terminated) as files[i], for i < n, recording stage
 * (or NULL) with them, and updates index.json once, not once per file. On
 * an error the files written before it are listed. */
int ptc_trace_write_texts(ptc_trace_compile *c, const char *stage, const char *const *files,
                          const char *const *texts, int n, ptc_error *err);
/* Writes a graph as .ptir under its stage name ("captured" -> captured.ptir). */
int ptc_trace_graph(ptc_trace_compile *c, const char *stage, const ptc_graph *g, ptc_error *err);
ptc_metrics *ptc_trace_metrics(ptc_trace_compile *c);
/* Writes metrics.json and updates index.json. */
int ptc_trace_end(ptc_trace_compile *c, ptc_error *err);
const char *ptc_trace_compile_dir(const ptc_trace_compile *c);

/* ------------------------------------------------------------------------------
 * Repro dumps (PTC_REPRO): what ptminify reads.
 *   <dir>/graph.ptir   the failing graph (stage 1 or 2), with source locations
 *   <dir>/inputs.bin   tensor file: one tensor per graph input, named as the input
 *   <dir>/repro.json   {"version":1,"ptc_version":"0.1.0","kind":"crash|error|accuracy|hang",
 *                       "stage":"codegen","error_class":"CompileError","message":"...",
 *                       "backend":"cpu","rtol":1e-4,"atol":1e-5,
 *                       "graph":"graph.ptir","inputs":"inputs.bin"}
 *   (inputs NULL: no inputs.bin and "inputs": null; repro.json is written last,
 *   atomically, so a folder without it is incomplete)
 * ---------------------------------------------------------------------------- */

typedef struct ptc_repro_info {
    const char *kind;        /* "crash", "error" or "accuracy" */
    const char *stage;       /* failing stage ("prims", "lower", "codegen", "runtime", ...) */
    const char *error_class; /* ptc_errclass_name(...) */
    const char *message;
    const char *backend;     /* "cpu", "cuda", "reference" */
    double rtol, atol;       /* for accuracy failures */
} ptc_repro_info;

/* Writes a repro folder. dir NULL: a new folder under $PTC_REPRO (default: a
 * fresh directory under $TMPDIR or /tmp), named repro_<pid>_<n>, unless this
 * process wrote one for the same failure (the same graph, provenance aside,
 * kind, stage, error class, backend and PTC_INJECT): then that folder. The
 * folder's path is copied to path_out. */
int ptc_repro_write(const char *dir, const ptc_graph *g, const ptc_tensor *inputs, int ninputs,
                    const ptc_repro_info *info, char *path_out, size_t path_size, ptc_error *err);

/* ------------------------------------------------------------------------------
 * Command-line tools (cli.c): options and one-line errors.
 * ---------------------------------------------------------------------------- */

/* The value of option NAME at argv[*i], written "NAME=V" or "NAME V" (then
 * *i moves past V). NULL when argv[*i] is another option, or when NAME has
 * no value (then *missing is set, where missing is not NULL). */
const char *ptc_cli_opt(int argc, char **argv, int *i, const char *name, bool *missing);
/* Where temporary files and folders go: $TMPDIR, else /tmp. */
const char *ptc_temp_dir(void);
/* Prints "TOOL: message" on stderr; returns 2, the exit status of bad input. */
int ptc_cli_fail(const char *tool, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "TOOL: file:line:col: message" for err; returns status. */
int ptc_cli_report(const char *tool, const ptc_error *err, int status);

#endif /* PTC_LOGS_H */
