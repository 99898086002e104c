/* Tests for logs/: PTC_LOGS parsing and output, the JSON writer and reader
 * (including hostile input), metrics and timers, and the trace directory.
 *
 * Check forks every test, so each one starts with the log levels unset and
 * can set PTC_LOGS / PTC_TRACE_DIR freely.
 */
#define _GNU_SOURCE
#include "logs/logs.h"

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers --------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static char *make_tmpdir(void)
{
    char *dir = strdup("/tmp/ptc_test_logs_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

/* Everything written to f so far, as a malloc'd string. */
static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *s = calloc((size_t)n + 1, 1);
    rewind(f);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), n);
    return s;
}

static bool file_exists(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

static ptc_json *read_json(ptc_arena *a, const char *path)
{
    ptc_error err;
    size_t len;
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_msg(text, "%s", err.msg);
    ptc_json *j = ptc_json_parse(a, text, len, path, &err);
    ck_assert_msg(j, "%s:%d:%d: %s", err.file, err.line, err.col, err.msg);
    free(text);
    return j;
}

/* ---- log components -------------------------------------------------------- */

START_TEST(log_spec_levels)
{
    ptc_error err;
    ck_assert_int_eq(ptc_log_configure("graph_breaks,+guards", &err), 0);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GRAPH_BREAKS), PTC_LOG_INFO);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GUARDS), PTC_LOG_DEBUG);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_PERF), PTC_LOG_OFF);
    ck_assert(ptc_log_on(PTC_LOG_GUARDS, PTC_LOG_DEBUG));
    ck_assert(!ptc_log_on(PTC_LOG_GRAPH_BREAKS, PTC_LOG_DEBUG));

    ck_assert_int_eq(ptc_log_configure("all,-perf, +cache", &err), 0);
    for (int c = 0; c < PTC_LOG_COUNT; c++) {
        int want = c == PTC_LOG_PERF ? PTC_LOG_OFF : c == PTC_LOG_CACHE ? PTC_LOG_DEBUG : PTC_LOG_INFO;
        ck_assert_int_eq(ptc_log_level((ptc_logc)c), want);
    }
    ck_assert_int_eq(ptc_log_configure("+all", &err), 0);
    for (int c = 0; c < PTC_LOG_COUNT; c++)
        ck_assert_int_eq(ptc_log_level((ptc_logc)c), PTC_LOG_DEBUG);
    /* A spec replaces the previous one; empty entries are ignored. */
    ck_assert_int_eq(ptc_log_configure(",,recompiles,", &err), 0);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_RECOMPILES), PTC_LOG_INFO);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GUARDS), PTC_LOG_OFF);
    ck_assert_int_eq(ptc_log_configure("", &err), 0);
    for (int c = 0; c < PTC_LOG_COUNT; c++)
        ck_assert_int_eq(ptc_log_level((ptc_logc)c), PTC_LOG_OFF);
    ck_assert_int_eq(ptc_log_level((ptc_logc)PTC_LOG_COUNT), PTC_LOG_OFF);
}
END_TEST

START_TEST(log_unknown_component)
{
    ptc_error err;
    ck_assert_int_eq(ptc_log_configure("guards", &err), 0);
    ck_assert_int_eq(ptc_log_configure("guards,grpah_breaks", &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "'grpah_breaks'"));
    /* Every valid name is listed. */
    for (int c = 0; c < PTC_LOG_COUNT; c++)
        ck_assert_msg(strstr(err.msg, ptc_log_name((ptc_logc)c)), "%s missing from: %s",
                      ptc_log_name((ptc_logc)c), err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, "all"));
    /* A bad spec changes nothing. */
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GUARDS), PTC_LOG_INFO);
    ck_assert_int_eq(ptc_log_configure("+", &err), -1);
    ck_assert_int_eq(ptc_log_configure("guards+", &err), -1);
}
END_TEST

START_TEST(log_output_format)
{
    FILE *f = tmpfile();
    ptc_log_set_stream(f);
    ptc_error err;
    ck_assert_int_eq(ptc_log_configure("guards,+captured", &err), 0);
    ptc_log(PTC_LOG_GUARDS, PTC_LOG_INFO, "installed %d guards", 3);
    ptc_log(PTC_LOG_GUARDS, PTC_LOG_DEBUG, "hidden at info level");
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "perf is off");
    ptc_log(PTC_LOG_CAPTURED, PTC_LOG_DEBUG, "ends in a newline\n");
    ptc_log_block(PTC_LOG_CAPTURED, PTC_LOG_INFO, "graph forward:", "line one\nline two\n");
    ptc_log_block(PTC_LOG_PERF, PTC_LOG_INFO, "off", "nothing");
    char *out = slurp(f);
    ck_assert_str_eq(out, "[ptc:guards] installed 3 guards\n"
                          "[ptc:captured] ends in a newline\n"
                          "[ptc:captured] graph forward:\n"
                          "[ptc:captured]   line one\n"
                          "[ptc:captured]   line two\n");
    free(out);
    ptc_log_set_stream(NULL);
    fclose(f);
}
END_TEST

START_TEST(log_env_init)
{
    setenv("PTC_LOGS", "+recompiles,perf", 1);
    ptc_log_init();
    ck_assert_int_eq(ptc_log_level(PTC_LOG_RECOMPILES), PTC_LOG_DEBUG);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_PERF), PTC_LOG_INFO);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GUARDS), PTC_LOG_OFF);
    /* Read once: changing the environment later has no effect. */
    setenv("PTC_LOGS", "all", 1);
    ptc_log_init();
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GUARDS), PTC_LOG_OFF);
}
END_TEST

START_TEST(log_env_lazy)
{
    /* No explicit init: the first query reads PTC_LOGS. */
    setenv("PTC_LOGS", "kernels", 1);
    ck_assert_int_eq(ptc_log_level(PTC_LOG_KERNELS), PTC_LOG_INFO);
}
END_TEST

START_TEST(log_env_bad)
{
    FILE *f = tmpfile();
    ptc_log_set_stream(f);
    setenv("PTC_LOGS", "guards,nonsense", 1);
    ptc_log_init();
    char *out = slurp(f);
    ck_assert_ptr_nonnull(strstr(out, "unknown log component 'nonsense'"));
    ck_assert_ptr_nonnull(strstr(out, "graph_breaks"));
    ck_assert_int_eq((int)(strchr(out, '\n') - out), (int)strlen(out) - 1); /* one line */
    ck_assert_int_eq(ptc_log_level(PTC_LOG_GUARDS), PTC_LOG_OFF);
    free(out);
    ptc_log_set_stream(NULL);
    fclose(f);
}
END_TEST

/* ---- JSON writer ----------------------------------------------------------- */

static void write_sample(ptc_jw *w)
{
    ptc_jw_obj_begin(w);
    ptc_jw_key(w, "name");
    ptc_jw_str(w, "a \"q\"\\\n\t\x01");
    ptc_jw_key(w, "n");
    ptc_jw_int(w, -42);
    ptc_jw_key(w, "x");
    ptc_jw_num(w, 0.1);
    ptc_jw_key(w, "big");
    ptc_jw_num(w, 1e300);
    ptc_jw_key(w, "inf");
    ptc_jw_num(w, INFINITY);
    ptc_jw_key(w, "list");
    ptc_jw_arr_begin(w);
    ptc_jw_bool(w, true);
    ptc_jw_bool(w, false);
    ptc_jw_null(w);
    ptc_jw_str(w, NULL);
    ptc_jw_arr_begin(w);
    ptc_jw_arr_end(w);
    ptc_jw_obj_begin(w);
    ptc_jw_obj_end(w);
    ptc_jw_arr_end(w);
    ptc_jw_key(w, "empty");
    ptc_jw_str(w, "");
    ptc_jw_obj_end(w);
}

START_TEST(json_writer_compact)
{
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, false);
    write_sample(&w);
    ck_assert_str_eq(b.data, "{\"name\":\"a \\\"q\\\"\\\\\\n\\t\\u0001\",\"n\":-42,\"x\":0.1,"
                             "\"big\":1e+300,\"inf\":null,\"list\":[true,false,null,null,[],{}],"
                             "\"empty\":\"\"}");
    ptc_buf_free(&b);
}
END_TEST

START_TEST(json_writer_pretty)
{
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, true);
    ptc_jw_obj_begin(&w);
    ptc_jw_key(&w, "a");
    ptc_jw_arr_begin(&w);
    ptc_jw_int(&w, 1);
    ptc_jw_int(&w, 2);
    ptc_jw_arr_end(&w);
    ptc_jw_key(&w, "b");
    ptc_jw_obj_begin(&w);
    ptc_jw_obj_end(&w);
    ptc_jw_key(&w, "c");
    ptc_jw_str(&w, "x: ");
    ptc_jw_key(&w, "d");
    ptc_jw_int(&w, 3);
    ptc_jw_obj_end(&w);
    ck_assert_str_eq(b.data, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": \"x: \",\n"
                             "  \"d\": 3\n}");
    ck_assert_int_eq(w.depth, 0);
    ptc_buf_free(&b);
}
END_TEST

START_TEST(json_writer_utf8)
{
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, false);
    ptc_jw_arr_begin(&w);
    ptc_jw_str(&w, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"); /* valid: kept */
    ptc_jw_str(&w, "bad \xff \xc3 \xed\xa0\x80 \xc0\xaf end");   /* invalid: U+FFFD each */
    ptc_jw_arr_end(&w);
#define R "\xef\xbf\xbd" /* U+FFFD */
    ck_assert_str_eq(b.data, "[\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
                             "\"bad " R " " R " " R R R " " R R " end\"]");
#undef R
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ptc_json *j = ptc_json_parse(a, b.data, b.len, "utf8", &err);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(j->items[0]->str, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    ptc_arena_free(a);
    ptc_buf_free(&b);
}
END_TEST

START_TEST(json_floats_round_trip)
{
    static const double vals[] = {0.0, -0.0, 1.0, 0.1, 1e-05, 1e300, -2.5e-308, 3.141592653589793,
                                  123456789012345678.0, 5e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        ptc_buf b = {0};
        ptc_jw w;
        ptc_jw_init(&w, &b, false);
        ptc_jw_num(&w, vals[i]);
        ptc_arena *a = ptc_arena_new();
        ptc_error err;
        ptc_json *j = ptc_json_parse(a, b.data, b.len, NULL, &err);
        ck_assert_msg(j && j->kind == PTC_JNUM, "%s", b.data);
        ck_assert_msg(j->num == vals[i], "%s", b.data);
        ptc_arena_free(a);
        ptc_buf_free(&b);
    }
}
END_TEST

/* ---- JSON reader ----------------------------------------------------------- */

START_TEST(json_reader_values)
{
    const char *text = "\xef\xbb\xbf { \"a\" : [1, -2.5e3, 0, true, false, null, \"s\\u00e9\\ud83d\\ude00\\/\"],"
                       " \"b\": {\"c\": {}}, \"a\": 7, \"e\": []}  \n";
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ptc_json *j = ptc_json_parse(a, text, strlen(text), "t.json", &err);
    ck_assert_msg(j, "%s", err.msg);
    ck_assert_int_eq(j->kind, PTC_JOBJ);
    ck_assert_int_eq(j->n, 4);
    ck_assert_str_eq(j->keys[0], "a");
    const ptc_json *arr = j->items[0];
    ck_assert_int_eq(arr->kind, PTC_JARR);
    ck_assert_int_eq(arr->n, 7);
    ck_assert(arr->items[0]->num == 1);
    ck_assert(arr->items[1]->num == -2500);
    ck_assert(arr->items[3]->kind == PTC_JBOOL && arr->items[3]->b);
    ck_assert(arr->items[4]->kind == PTC_JBOOL && !arr->items[4]->b);
    ck_assert(arr->items[5]->kind == PTC_JNULL);
    ck_assert_str_eq(arr->items[6]->str, "s\xc3\xa9\xf0\x9f\x98\x80/");
    /* Duplicate keys: the last one wins. */
    ck_assert(ptc_json_num(j, "a", 0) == 7);
    ck_assert_int_eq(ptc_json_get(ptc_json_get(j, "b"), "c")->kind, PTC_JOBJ);
    ck_assert_ptr_null(ptc_json_get(j, "zz"));
    ck_assert_ptr_null(ptc_json_get(arr, "a"));
    ck_assert_ptr_null(ptc_json_get(NULL, "a"));
    ck_assert_str_eq(ptc_json_str(j, "missing", "dflt"), "dflt");
    ck_assert_str_eq(ptc_json_str(j, "a", "not a string"), "not a string");
    ck_assert(ptc_json_num(j, "b", -1) == -1);
    ck_assert_int_eq(ptc_json_get(j, "e")->n, 0);
    ptc_arena_free(a);
}
END_TEST

static const struct {
    const char *text;
    int line, col;
    const char *msg;
} bad_json[] = {
    {"", 1, 1, "expected a value, got end of input"},
    {"   ", 1, 4, "expected a value"},
    {"{", 1, 2, "expected a string key"},
    {"{\"a\" 1}", 1, 6, "expected ':' after the key"},
    {"{\"a\": 1,}", 1, 9, "expected a string key"},
    {"[1, 2", 1, 6, "expected ',' or ']'"},
    {"[1,\n 2,\n ]", 3, 2, "expected a value"},
    {"{\"a\":\n  tru}", 2, 3, "expected a value"},
    {"\"abc", 1, 1, "unterminated string"},
    {"\"a\nb\"", 1, 3, "control character"},
    {"\"\\q\"", 1, 2, "unknown escape"},
    {"\"\\u12x4\"", 1, 6, "bad hex digit"},
    {"\"\\u12\"", 1, 4, "truncated"},
    {"\"\\ud800\"", 1, 8, "unpaired surrogate"},
    {"\"\\udc00\"", 1, 2, "unpaired surrogate"},
    {"\"\\u0000\"", 1, 2, "\\u0000"},
    {"01", 1, 2, "expected the end of input"},
    {"-", 1, 2, "expected a digit"},
    {"1.", 1, 3, "expected a digit after '.'"},
    {"1e+", 1, 4, "exponent"},
    {"{} {}", 1, 4, "expected the end of input"},
    {"nul", 1, 1, "expected a value"},
    {"[1]\n\n  x", 3, 3, "got 'x'"},
    {"\x01", 1, 1, "byte 0x01"},
    {"{\"k\": NaN}", 1, 7, "expected a value"},
};

START_TEST(json_reader_errors)
{
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++) {
        ptc_arena *a = ptc_arena_new();
        ptc_error err;
        ptc_json *j = ptc_json_parse(a, bad_json[i].text, strlen(bad_json[i].text), "bad.json", &err);
        ck_assert_msg(!j, "case %zu parsed: %s", i, bad_json[i].text);
        ck_assert_int_eq(err.cls, PTC_ERR_PARSE);
        ck_assert_str_eq(err.file, "bad.json");
        ck_assert_msg(err.line == bad_json[i].line && err.col == bad_json[i].col,
                      "case %zu (%s): at %d:%d, want %d:%d (%s)", i, bad_json[i].text, err.line,
                      err.col, bad_json[i].line, bad_json[i].col, err.msg);
        ck_assert_msg(strstr(err.msg, bad_json[i].msg), "case %zu: '%s' lacks '%s'", i, err.msg,
                      bad_json[i].msg);
        ptc_arena_free(a);
    }
}
END_TEST

START_TEST(json_reader_length_bounded)
{
    /* The reader stops at len: what follows (not even NUL-terminated) is never read. */
    char text[8] = {'[', '1', ']', 'x', 'x', 'x', 'x', 'x'};
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ck_assert_ptr_nonnull(ptc_json_parse(a, text, 3, NULL, &err));
    ck_assert_ptr_null(ptc_json_parse(a, text, 2, NULL, &err));
    char num[2] = {'4', '2'};
    ptc_json *j = ptc_json_parse(a, num, 2, NULL, &err);
    ck_assert(j && j->num == 42);
    ck_assert_ptr_null(ptc_json_parse(a, "[1]\0", 4, NULL, &err));
    ck_assert_ptr_null(ptc_json_parse(a, NULL, 0, NULL, NULL));
    ptc_arena_free(a);
}
END_TEST

START_TEST(json_reader_deep_nesting)
{
    size_t n = 100000;
    char *text = malloc(n * 2 + 1);
    memset(text, '[', n);
    memset(text + n, ']', n);
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ck_assert_ptr_null(ptc_json_parse(a, text, 2 * n, NULL, &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "nested more than"));
    /* 200 levels are fine. */
    ck_assert_ptr_nonnull(ptc_json_parse(a, text + n - 200, 400, NULL, &err));
    ptc_arena_free(a);
    free(text);
}
END_TEST

/* Random bytes and random mutations of valid JSON: errors, never a crash
 * (the sanitizer leg runs this under ASan/UBSan). */
START_TEST(json_reader_never_crashes)
{
    static const char seed[] = "{\"version\": 1, \"compiles\": [{\"id\": \"f_0\", \"line\": 12,"
                               " \"x\": -1.5e-3, \"ok\": true, \"s\": \"a\\u00e9\\n\", \"n\": null}]}";
    static const char alphabet[] = "{}[]\":,\\ue0123456789.-+Eetrufalsn \n\t\x01\xff";
    uint64_t state = 12345;
    int parsed = 0;
    for (int iter = 0; iter < 20000; iter++) {
        char text[256];
        size_t len;
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        if (iter % 2) {
            len = (state >> 33) % sizeof text;
            for (size_t i = 0; i < len; i++) {
                state = state * 6364136223846793005ULL + 1442695040888963407ULL;
                text[i] = alphabet[(state >> 33) % (sizeof alphabet - 1)];
            }
        } else {
            len = sizeof seed - 1;
            memcpy(text, seed, len);
            int edits = 1 + (int)((state >> 40) % 4);
            for (int e = 0; e < edits && len > 0; e++) {
                state = state * 6364136223846793005ULL + 1442695040888963407ULL;
                size_t at = (state >> 33) % len;
                int kind = (int)((state >> 20) % 3);
                char c = alphabet[(state >> 50) % (sizeof alphabet - 1)];
                if (kind == 0)
                    text[at] = c;
                else if (kind == 1)
                    len = at; /* truncate */
                else if (len + 1 < sizeof text) {
                    memmove(text + at + 1, text + at, len - at);
                    text[at] = c;
                    len++;
                }
            }
        }
        ptc_arena *a = ptc_arena_new();
        ptc_error err;
        ptc_json *j = ptc_json_parse(a, text, len, "fuzz", &err);
        if (j) {
            parsed++;
        } else {
            ck_assert_int_eq(err.cls, PTC_ERR_PARSE);
            ck_assert(err.line >= 1 && err.col >= 1);
        }
        ptc_arena_free(a);
    }
    ck_assert_int_gt(parsed, 0);
}
END_TEST

/* ---- metrics --------------------------------------------------------------- */

START_TEST(metrics_table)
{
    ptc_metrics m = {0};
    ptc_metrics_add(&m, "nodes", 10, false);
    ptc_metrics_add(&m, "nodes", 5, false);
    ptc_metrics_add(&m, "prims", 1.5, true);
    ck_assert(ptc_metrics_get(&m, "nodes") == 15);
    ck_assert(ptc_metrics_get(&m, "prims") == 1.5);
    ck_assert(ptc_metrics_get(&m, "absent") == 0);
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, false);
    ptc_metrics_json(&m, &w);
    ck_assert_str_eq(b.data, "{\"times_ms\":{\"prims\":1.5},\"counts\":{\"nodes\":15}}");
    ptc_buf_free(&b);
    /* Overflow is counted, not lost silently. */
    for (int i = 0; i < PTC_MAX_METRICS + 10; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i);
        ptc_metrics_add(&m, name, 1, false);
    }
    ck_assert_int_eq(m.n, PTC_MAX_METRICS);
    ck_assert(ptc_metrics_get(&m, "metrics_dropped") == 13);
    ck_assert(ptc_metrics_get(&m, "m0") == 1);
}
END_TEST

START_TEST(metrics_timer)
{
    double t0 = ptc_now_ms();
    ck_assert(t0 > 0);
    ptc_metrics m = {0};
    double started = ptc_timer_start();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ptc_timer_stop(&m, "sleep", started);
    double t = ptc_metrics_get(&m, "sleep");
    ck_assert_msg(t >= 19.0 && t < 5000.0, "timer measured %g ms for a 20 ms sleep", t);
    ck_assert(ptc_now_ms() >= t0 + 19.0);
    ck_assert(m.items[0].is_time);
}
END_TEST

/* ---- trace directory ------------------------------------------------------- */

static const char graph_text[] = "# ptc ir v1\n"
                                 "graph forward(%x: f32[s0,4] cpu) {\n"
                                 "  %0 = relu(%x) : f32[s0,4]\n"
                                 "  return (%0)\n"
                                 "}\n";

static ptc_module *sample_module(void)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(graph_text, strlen(graph_text), "sample", &err);
    ck_assert_msg(m, "%s", err.msg);
    return m;
}

/* A part of a compile (a program of a graph cut into pieces) is a compile
 * of its own beside it: "<whole's id>.<part>", the whole's frame and place,
 * its own reason; a second part of the same name gets a suffix, a name with
 * a separator is refused. */
START_TEST(trace_parts)
{
    char *dir = make_tmpdir();
    ptc_error err;
    ptc_trace *t = ptc_trace_open(dir, &err);
    ck_assert_msg(t, "%s", err.msg);
    ptc_trace_compile *c = ptc_trace_begin(t, "Net.forward", 1, "forward", "net.py", 7, "first call",
                                           &err);
    ck_assert_msg(c, "%s", err.msg);
    ptc_trace_compile *p1 = ptc_trace_begin_part(c, "program_1", "program 1", &err);
    ck_assert_msg(p1, "%s", err.msg);
    ptc_trace_compile *again = ptc_trace_begin_part(c, "program_1", "program 1 again", &err);
    ck_assert_msg(again, "%s", err.msg);
    ck_assert_ptr_null(ptc_trace_begin_part(c, "a/b", "no", &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "bad trace part name"));
    ck_assert_str_eq(strrchr(ptc_trace_compile_dir(p1), '/') + 1, "Net.forward_1.program_1");
    ck_assert_str_eq(strrchr(ptc_trace_compile_dir(again), '/') + 1, "Net.forward_1.program_1-2");
    ptc_module *m = sample_module();
    ck_assert_int_eq(ptc_trace_graph(p1, "forward", m->graphs[0], &err), 0);
    ptc_module_free(m);
    ck_assert_int_eq(ptc_trace_end(p1, &err), 0);
    ck_assert_int_eq(ptc_trace_end(again, &err), 0);
    ck_assert_int_eq(ptc_trace_end(c, &err), 0);
    ck_assert(file_exists(ptc_trace_compile_dir(p1), "forward.ptir"));
    ptc_arena *a = ptc_arena_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", dir);
    const ptc_json *list = ptc_json_get(read_json(a, path), "compiles");
    ck_assert_int_eq(list->n, 3);
    const ptc_json *e = list->items[1];
    ck_assert_str_eq(ptc_json_str(e, "id", ""), "Net.forward_1.program_1");
    ck_assert_str_eq(ptc_json_str(e, "frame", ""), "Net.forward");
    ck_assert(ptc_json_num(e, "recompile", -1) == 1);
    ck_assert_str_eq(ptc_json_str(e, "file", ""), "net.py");
    ck_assert(ptc_json_num(e, "line", 0) == 7);
    ck_assert_str_eq(ptc_json_str(e, "reason", ""), "program 1");
    ck_assert_str_eq(ptc_json_get(e, "stages")->items[0]->str, "forward");
    ptc_arena_free(a);
    ptc_trace_close(t);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(trace_layout)
{
    char *dir = make_tmpdir();
    char sub[512];
    snprintf(sub, sizeof sub, "%s/nested/trace", dir);
    ptc_error err;
    ptc_trace *t = ptc_trace_open(sub, &err);
    ck_assert_msg(t, "%s", err.msg);
    ck_assert_str_eq(ptc_trace_dir(t), sub);
    ptc_trace_compile *c = ptc_trace_begin(t, "Model.forward<locals>", 0, "forward", "model.py", 12,
                                           "first call", &err);
    ck_assert_msg(c, "%s", err.msg);
    ck_assert_str_eq(strrchr(ptc_trace_compile_dir(c), '/') + 1, "Model.forward_locals__0");

    /* While the compile runs, the index already lists it as incomplete. */
    ptc_arena *a = ptc_arena_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", sub);
    ptc_json *idx = read_json(a, path);
    const ptc_json *list = ptc_json_get(idx, "compiles");
    ck_assert_int_eq(list->n, 1);
    ck_assert(!ptc_json_get(list->items[0], "complete")->b);

    ptc_module *m = sample_module();
    ck_assert_int_eq(ptc_trace_graph(c, "captured", m->graphs[0], &err), 0);
    ck_assert_int_eq(ptc_trace_write(c, "loops", "loops.txt", "buf0\n", 5, &err), 0);
    ck_assert_int_eq(ptc_trace_write(c, NULL, "guards.txt", "x.dtype == f32\n", 15, &err), 0);
    ck_assert_int_eq(ptc_trace_write(c, "loops", "loops.txt", "buf1\n", 5, &err), 0); /* again */
    ptc_timer_stop(ptc_trace_metrics(c), "prims", ptc_timer_start());
    ptc_metrics_add(ptc_trace_metrics(c), "nodes", 1, false);
    ck_assert_int_eq(ptc_trace_end(c, &err), 0);

    const char *cdir = ptc_trace_compile_dir(c);
    ck_assert(file_exists(cdir, "captured.ptir"));
    ck_assert(file_exists(cdir, "loops.txt"));
    ck_assert(file_exists(cdir, "guards.txt"));
    ck_assert(file_exists(cdir, "metrics.json"));

    /* The stage file reads back as the same graph. */
    snprintf(path, sizeof path, "%s/captured.ptir", cdir);
    ptc_module *back = ptc_parse_file(path, &err);
    ck_assert_msg(back, "%s", err.msg);
    ptc_buf b1 = {0}, b2 = {0};
    ptc_print_module(&b1, m);
    ptc_print_module(&b2, back);
    ck_assert_str_eq(b1.data, b2.data);
    ptc_buf_free(&b1);
    ptc_buf_free(&b2);
    ptc_module_free(back);
    ptc_module_free(m);

    snprintf(path, sizeof path, "%s/metrics.json", cdir);
    ptc_json *metrics = read_json(a, path);
    const ptc_json *times = ptc_json_get(metrics, "times_ms");
    ck_assert_ptr_nonnull(ptc_json_get(times, "prims"));
    ck_assert(ptc_json_num(times, "total", -1) >= 0);
    ck_assert(ptc_json_num(ptc_json_get(metrics, "counts"), "nodes", 0) == 1);

    snprintf(path, sizeof path, "%s/index.json", sub);
    idx = read_json(a, path);
    ck_assert(ptc_json_num(idx, "version", 0) == 1);
    ck_assert_str_eq(ptc_json_str(idx, "ptc_version", ""), PTC_VERSION);
    list = ptc_json_get(idx, "compiles");
    ck_assert_int_eq(list->n, 1);
    const ptc_json *e = list->items[0];
    ck_assert_str_eq(ptc_json_str(e, "id", ""), "Model.forward_locals__0");
    ck_assert_str_eq(ptc_json_str(e, "frame", ""), "Model.forward<locals>");
    ck_assert(ptc_json_num(e, "recompile", -1) == 0);
    ck_assert_str_eq(ptc_json_str(e, "function", ""), "forward");
    ck_assert_str_eq(ptc_json_str(e, "file", ""), "model.py");
    ck_assert(ptc_json_num(e, "line", 0) == 12);
    ck_assert_str_eq(ptc_json_str(e, "reason", ""), "first call");
    ck_assert(ptc_json_get(e, "complete")->b);
    const ptc_json *stages = ptc_json_get(e, "stages"), *files = ptc_json_get(e, "files");
    ck_assert_int_eq(stages->n, 2);
    ck_assert_str_eq(stages->items[0]->str, "captured");
    ck_assert_str_eq(stages->items[1]->str, "loops");
    ck_assert_int_eq(files->n, 4);
    ck_assert_str_eq(files->items[0]->str, "captured.ptir");
    ck_assert_str_eq(files->items[1]->str, "loops.txt");
    ck_assert_str_eq(files->items[2]->str, "guards.txt");
    ck_assert_str_eq(files->items[3]->str, "metrics.json");
    ptc_trace_close(t);

    /* No temporary index files left behind. */
    ck_assert(!file_exists(sub, ".index.json.tmp"));
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, ".index.json.%ld.tmp", (long)getpid());
    ck_assert(!file_exists(sub, tmpname));
    ptc_arena_free(a);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* A program's kernel files in one batch: each written and listed, in order,
 * under one stage; a bad name stops the batch, and what was written before
 * it stays listed. */
START_TEST(trace_kernel_files_in_one_batch)
{
    char *dir = make_tmpdir();
    ptc_error err;
    ptc_trace *t = ptc_trace_open(dir, &err);
    ck_assert_msg(t, "%s", err.msg);
    ptc_trace_compile *c = ptc_trace_begin(t, "f", 0, "f", "f.py", 1, "first call", &err);
    const char *files[] = {"kernel_0.ll", "kernel_1.ll", "kernel_2.ll"};
    const char *texts[] = {"define void @k0()\n", "define void @k1()\n", "define void @k2()\n"};
    ck_assert_int_eq(ptc_trace_write_texts(c, "llvm", files, texts, 0, &err), 0);
    ck_assert_int_eq(ptc_trace_write_texts(c, "llvm", files, texts, 3, &err), 0);
    const char *bad[] = {"kernel_3.ll", "../kernel_4.ll", "kernel_5.ll"};
    ck_assert_int_eq(ptc_trace_write_texts(c, NULL, bad, texts, 3, &err), -1);
    ck_assert_msg(strstr(err.msg, "../kernel_4.ll"), "%s", err.msg);
    ck_assert_int_eq(ptc_trace_end(c, &err), 0);
    const char *cdir = ptc_trace_compile_dir(c);
    for (int i = 0; i < 3; i++)
        ck_assert(file_exists(cdir, files[i]));
    ck_assert(file_exists(cdir, "kernel_3.ll"));
    ck_assert(!file_exists(cdir, "kernel_5.ll"));

    ptc_arena *a = ptc_arena_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", dir);
    const ptc_json *e = ptc_json_get(read_json(a, path), "compiles")->items[0];
    const ptc_json *stages = ptc_json_get(e, "stages"), *listed = ptc_json_get(e, "files");
    ck_assert_int_eq(stages->n, 1);
    ck_assert_str_eq(stages->items[0]->str, "llvm");
    ck_assert_int_eq(listed->n, 5); /* kernel_0..3, metrics.json */
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(listed->items[i]->str, files[i]);
    ck_assert_str_eq(listed->items[3]->str, "kernel_3.ll");
    ptc_trace_close(t);
    ptc_arena_free(a);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* Two traces of one directory in one process (each compiled function keeps
 * its own): whichever closes last keeps the other's compiles in the index. */
START_TEST(trace_two_writers_keep_each_others_compiles)
{
    char *dir = make_tmpdir();
    ptc_error err;
    ptc_trace *first = ptc_trace_open(dir, &err);
    ck_assert_msg(first, "%s", err.msg);
    ptc_trace_compile *a =
        ptc_trace_begin(first, "A.forward", 0, "forward", "a.py", 1, "first call", &err);
    ck_assert_int_eq(ptc_trace_end(a, &err), 0);
    ptc_trace *second = ptc_trace_open(dir, &err);
    ck_assert_msg(second, "%s", err.msg);
    ptc_trace_compile *b =
        ptc_trace_begin(second, "B.forward", 0, "forward", "b.py", 1, "first call", &err);
    ck_assert_int_eq(ptc_trace_end(b, &err), 0);
    ptc_trace_close(second);
    ptc_trace_close(first); /* knew of A only when it opened */

    ptc_arena *ar = ptc_arena_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", dir);
    const ptc_json *list = ptc_json_get(read_json(ar, path), "compiles");
    ck_assert_int_eq(list->n, 2);
    bool seen_a = false, seen_b = false;
    for (int i = 0; i < list->n; i++) {
        const char *id = ptc_json_str(list->items[i], "id", "");
        seen_a |= strcmp(id, "A.forward_0") == 0;
        seen_b |= strcmp(id, "B.forward_0") == 0;
        ck_assert(ptc_json_get(list->items[i], "complete")->b);
    }
    ck_assert(seen_a && seen_b);
    ptc_arena_free(ar);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(trace_extends_index)
{
    char *dir = make_tmpdir();
    ptc_error err;
    for (int run = 0; run < 3; run++) {
        ptc_trace *t = ptc_trace_open(dir, &err);
        ck_assert_msg(t, "%s", err.msg);
        ptc_trace_compile *c = ptc_trace_begin(t, "forward", 0, NULL, NULL, 0, NULL, &err);
        ck_assert_msg(c, "%s", err.msg);
        ck_assert_int_eq(ptc_trace_end(c, &err), 0);
        if (run == 2) { /* a second compile of this run, never ended */
            ck_assert_ptr_nonnull(ptc_trace_begin(t, "forward", 1, NULL, NULL, 0, "guard failed", &err));
        }
        ptc_trace_close(t);
    }
    ptc_arena *a = ptc_arena_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", dir);
    const ptc_json *list = ptc_json_get(read_json(a, path), "compiles");
    ck_assert_int_eq(list->n, 4);
    ck_assert_str_eq(ptc_json_str(list->items[0], "id", ""), "forward_0");
    ck_assert_str_eq(ptc_json_str(list->items[1], "id", ""), "forward_0-2");
    ck_assert_str_eq(ptc_json_str(list->items[2], "id", ""), "forward_0-3");
    ck_assert_str_eq(ptc_json_str(list->items[3], "id", ""), "forward_1");
    ck_assert(ptc_json_get(list->items[0], "complete")->b);
    ck_assert(!ptc_json_get(list->items[3], "complete")->b);
    ck_assert_int_eq(ptc_json_get(list->items[3], "function")->kind, PTC_JNULL);
    ck_assert_str_eq(ptc_json_str(list->items[3], "reason", ""), "guard failed");
    ck_assert(file_exists(dir, "forward_0-3/metrics.json"));
    ptc_arena_free(a);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(trace_env_and_errors)
{
    ptc_error err;
    unsetenv("PTC_TRACE_DIR");
    ck_assert_ptr_null(ptc_trace_open(NULL, &err));
    ck_assert_int_eq(err.cls, PTC_ERR_NONE);
    setenv("PTC_TRACE_DIR", "", 1);
    ck_assert_ptr_null(ptc_trace_open(NULL, &err));
    ck_assert_int_eq(err.cls, PTC_ERR_NONE);

    char *dir = make_tmpdir();
    setenv("PTC_TRACE_DIR", dir, 1);
    ptc_trace *t = ptc_trace_open(NULL, &err);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(ptc_trace_dir(t), dir);
    ptc_trace_compile *c = ptc_trace_begin(t, "", 2, NULL, NULL, 0, NULL, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(strrchr(ptc_trace_compile_dir(c), '/') + 1, "graph_2");
    ck_assert_int_eq(ptc_trace_write(c, NULL, "../escape.txt", "x", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad trace file name"));
    ck_assert_int_eq(ptc_trace_write(c, NULL, "..", "x", 1, &err), -1);
    ck_assert_int_eq(ptc_trace_write(c, NULL, "", "x", 1, &err), -1);
    ck_assert_int_eq(ptc_trace_write(c, NULL, NULL, "x", 1, &err), -1);
    ck_assert_int_eq(ptc_trace_write(c, NULL, "empty.txt", "", 0, &err), 0);
    ptc_trace_close(t);

    /* A corrupt index is an error naming the place, not silently replaced. */
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", dir);
    const char *corrupt = "{\"compiles\": [\n  {\"id\": }";
    ck_assert_int_eq(ptc_write_file(path, corrupt, strlen(corrupt), &err), 0);
    ck_assert_ptr_null(ptc_trace_open(dir, &err));
    ck_assert_int_eq(err.line, 2);
    ck_assert_int_eq(err.col, 10);
    ck_assert_ptr_nonnull(strstr(err.file, "index.json"));
    ck_assert_int_eq(ptc_write_file(path, "{\"version\": 1}", strlen("{\"version\": 1}"), &err), 0);
    ck_assert_ptr_null(ptc_trace_open(dir, &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "compiles"));
    const char *v7 = "{\"version\": 7, \"compiles\": []}";
    ck_assert_int_eq(ptc_write_file(path, v7, strlen(v7), &err), 0);
    ck_assert_ptr_null(ptc_trace_open(dir, &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "version 7"));

    /* A trace directory that is a file. */
    snprintf(path, sizeof path, "%s/afile", dir);
    ck_assert_int_eq(ptc_write_file(path, "x", 1, &err), 0);
    ck_assert_ptr_null(ptc_trace_open(path, &err));
    ck_assert_int_eq(err.cls, PTC_ERR_IO);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- repro dumps ------------------------------------------------------------ */

START_TEST(repro_folder_contents)
{
    char *dir = make_tmpdir();
    char target[512], got[512];
    snprintf(target, sizeof target, "%s/r1", dir);
    ptc_module *m = sample_module();
    const ptc_graph *g = m->graphs[0];
    ptc_error err;
    int64_t sizes[2] = {3, 4};
    ptc_tensor x;
    ck_assert_int_eq(ptc_tensor_alloc(&x, PTC_F32, 2, sizes, &err), 0);
    ptc_tensor_fill_random(&x, 11);
    ptc_repro_info info = {"accuracy", "codegen", "CompileError", "max abs diff 0.5 > \"atol\"",
                           "cpu", 1e-4, 1e-5};
    ck_assert_msg(ptc_repro_write(target, g, &x, 1, &info, got, sizeof got, &err) == 0, "%s",
                  err.msg);
    ck_assert_str_eq(got, target);

    char path[1024];
    snprintf(path, sizeof path, "%s/graph.ptir", target);
    ptc_module *back = ptc_parse_file(path, &err);
    ck_assert_msg(back, "%s", err.msg);
    ptc_buf b1 = {0}, b2 = {0};
    ptc_print_graph(&b1, g);
    ptc_print_graph(&b2, back->graphs[0]);
    ck_assert_str_eq(b1.data, b2.data);
    ptc_buf_free(&b1);
    ptc_buf_free(&b2);
    ptc_module_free(back);

    snprintf(path, sizeof path, "%s/inputs.bin", target);
    ptc_tensorfile tf;
    ck_assert_msg(ptc_tensorfile_read(path, &tf, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tf.n, 1);
    ck_assert_str_eq(tf.names[0], "x");
    ck_assert_int_eq(memcmp(tf.tensors[0].data, x.data, 12 * sizeof(float)), 0);
    ptc_tensorfile_free(&tf);

    ptc_arena *a = ptc_arena_new();
    snprintf(path, sizeof path, "%s/repro.json", target);
    ptc_json *j = read_json(a, path);
    ck_assert(ptc_json_num(j, "version", 0) == 1);
    ck_assert_str_eq(ptc_json_str(j, "ptc_version", ""), PTC_VERSION);
    ck_assert_str_eq(ptc_json_str(j, "kind", ""), "accuracy");
    ck_assert_str_eq(ptc_json_str(j, "stage", ""), "codegen");
    ck_assert_str_eq(ptc_json_str(j, "error_class", ""), "CompileError");
    ck_assert_str_eq(ptc_json_str(j, "message", ""), "max abs diff 0.5 > \"atol\"");
    ck_assert_str_eq(ptc_json_str(j, "backend", ""), "cpu");
    ck_assert(ptc_json_num(j, "rtol", 0) == 1e-4);
    ck_assert(ptc_json_num(j, "atol", 0) == 1e-5);
    ck_assert_str_eq(ptc_json_str(j, "graph", ""), "graph.ptir");
    ck_assert_str_eq(ptc_json_str(j, "inputs", ""), "inputs.bin");
    ck_assert(!file_exists(target, ".repro.json.tmp"));

    /* No inputs (a crash before they were known): no inputs.bin, "inputs": null. */
    snprintf(target, sizeof target, "%s/r2", dir);
    ck_assert_int_eq(ptc_repro_write(target, g, NULL, 0, NULL, NULL, 0, &err), 0);
    ck_assert(!file_exists(target, "inputs.bin"));
    snprintf(path, sizeof path, "%s/repro.json", target);
    j = read_json(a, path);
    ck_assert_int_eq(ptc_json_get(j, "inputs")->kind, PTC_JNULL);
    ck_assert_int_eq(ptc_json_get(j, "kind")->kind, PTC_JNULL);

    /* Bad arguments are errors, and nothing is written. */
    snprintf(target, sizeof target, "%s/r3", dir);
    ck_assert_int_eq(ptc_repro_write(target, g, &x, 2, &info, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "2 input tensors"));
    ptc_repro_info bad = info;
    bad.kind = "slow";
    ck_assert_int_eq(ptc_repro_write(target, g, &x, 1, &bad, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "'slow'"));
    ck_assert(!file_exists(dir, "r3"));
    char tiny[4];
    ck_assert_int_eq(ptc_repro_write(target, g, &x, 1, &info, tiny, sizeof tiny, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not fit"));

    ptc_arena_free(a);
    ptc_tensor_release(&x);
    ptc_module_free(m);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(repro_fresh_folders)
{
    char *dir = make_tmpdir();
    char base[512], first[512], second[512], prefix[600];
    snprintf(base, sizeof base, "%s/dumps", dir);
    setenv("PTC_REPRO", base, 1);
    ptc_module *m = sample_module();
    ptc_error err;
    ptc_repro_info accuracy = {.kind = "accuracy", .stage = "accuracy", .backend = "cpu"};
    ck_assert_int_eq(ptc_repro_write(NULL, m->graphs[0], NULL, 0, NULL, first, sizeof first, &err), 0);
    ck_assert_int_eq(ptc_repro_write(NULL, m->graphs[0], NULL, 0, &accuracy, second, sizeof second, &err), 0);
    snprintf(prefix, sizeof prefix, "%s/repro_%ld_", base, (long)getpid());
    ck_assert_int_eq(strncmp(first, prefix, strlen(prefix)), 0);
    ck_assert_str_ne(first, second);
    ck_assert(file_exists(first, "repro.json"));
    ck_assert(file_exists(second, "graph.ptir"));
    /* The same failure again: the folder it already has (one per failure). */
    char again[512];
    ck_assert_int_eq(ptc_repro_write(NULL, m->graphs[0], NULL, 0, &accuracy, again, sizeof again, &err), 0);
    ck_assert_str_eq(again, second);
    /* Without PTC_REPRO: under $TMPDIR. */
    unsetenv("PTC_REPRO");
    setenv("TMPDIR", dir, 1);
    ck_assert_int_eq(ptc_repro_write(NULL, m->graphs[0], NULL, 0, NULL, first, sizeof first, &err), 0);
    snprintf(prefix, sizeof prefix, "%s/repro_", dir);
    ck_assert_int_eq(strncmp(first, prefix, strlen(prefix)), 0);
    ptc_module_free(m);
    rm_rf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("logs");
    TCase *tc = tcase_create("log");
    tcase_add_test(tc, log_spec_levels);
    tcase_add_test(tc, log_unknown_component);
    tcase_add_test(tc, log_output_format);
    tcase_add_test(tc, log_env_init);
    tcase_add_test(tc, log_env_lazy);
    tcase_add_test(tc, log_env_bad);
    suite_add_tcase(s, tc);
    tc = tcase_create("json");
    tcase_add_test(tc, json_writer_compact);
    tcase_add_test(tc, json_writer_pretty);
    tcase_add_test(tc, json_writer_utf8);
    tcase_add_test(tc, json_floats_round_trip);
    tcase_add_test(tc, json_reader_values);
    tcase_add_test(tc, json_reader_errors);
    tcase_add_test(tc, json_reader_length_bounded);
    tcase_add_test(tc, json_reader_deep_nesting);
    tcase_add_test(tc, json_reader_never_crashes);
    suite_add_tcase(s, tc);
    tc = tcase_create("metrics");
    tcase_add_test(tc, metrics_table);
    tcase_add_test(tc, metrics_timer);
    suite_add_tcase(s, tc);
    tc = tcase_create("trace");
    tcase_add_test(tc, trace_layout);
    tcase_add_test(tc, trace_kernel_files_in_one_batch);
    tcase_add_test(tc, trace_two_writers_keep_each_others_compiles);
    tcase_add_test(tc, trace_parts);
    tcase_add_test(tc, trace_extends_index);
    tcase_add_test(tc, trace_env_and_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("repro");
    tcase_add_test(tc, repro_folder_contents);
    tcase_add_test(tc, repro_fresh_folders);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
