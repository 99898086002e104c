/* JSON: a streaming writer into a ptc_buf and a strict reader into a tree.
 *
 * The writer knows whether a comma is due from need_comma[depth]; a value
 * that follows a key is recognised by the ':' the key left at the end of the
 * buffer (strings always end in '"', so a trailing ':' can only be a key's).
 * Strings are escaped to valid JSON: invalid UTF-8 becomes U+FFFD, so what
 * the writer emits always reads back in Python's json module, and writing
 * what was read gives the same text again.
 *
 * The reader is a recursive descent over (text, len) that never reads past
 * len, caps nesting depth, and puts every node in the caller's arena, so an
 * error anywhere simply returns NULL: the caller frees the arena as usual.
 * Errors name filename:line:col.
 */
#include "logs/logs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ---------------------------------------------------------------- */

enum { MAX_DEPTH = (int)(sizeof(((ptc_jw *)0)->need_comma) / sizeof(bool)) };

void ptc_jw_init(ptc_jw *w, ptc_buf *b, bool pretty)
{
    memset(w, 0, sizeof *w);
    w->b = b;
    w->pretty = pretty;
}

static void newline(ptc_jw *w)
{
    if (!w->pretty)
        return;
    ptc_buf_putc(w->b, '\n');
    for (int i = 0; i < w->depth; i++)
        ptc_buf_puts(w->b, "  ");
}

static bool after_key(const ptc_jw *w)
{
    size_t n = w->b->len;
    if (w->pretty)
        return n >= 2 && w->b->data[n - 2] == ':' && w->b->data[n - 1] == ' ';
    return n >= 1 && w->b->data[n - 1] == ':';
}

/* Everything a value or key needs before it: a comma, a newline, indent. */
static void before_item(ptc_jw *w)
{
    if (w->depth == 0)
        return;
    if (w->need_comma[w->depth])
        ptc_buf_putc(w->b, ',');
    w->need_comma[w->depth] = true;
    newline(w);
}

static void before_value(ptc_jw *w)
{
    if (!after_key(w))
        before_item(w);
}

static void jw_open(ptc_jw *w, char c)
{
    before_value(w);
    ptc_buf_putc(w->b, c);
    PTC_ASSERT(w->depth + 1 < MAX_DEPTH);
    w->depth++;
    w->need_comma[w->depth] = false;
}

static void jw_close(ptc_jw *w, char c)
{
    PTC_ASSERT(w->depth > 0);
    bool had_items = w->need_comma[w->depth];
    w->depth--;
    if (had_items)
        newline(w);
    ptc_buf_putc(w->b, c);
}

void ptc_jw_obj_begin(ptc_jw *w) { jw_open(w, '{'); }
void ptc_jw_obj_end(ptc_jw *w) { jw_close(w, '}'); }
void ptc_jw_arr_begin(ptc_jw *w) { jw_open(w, '['); }
void ptc_jw_arr_end(ptc_jw *w) { jw_close(w, ']'); }

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static int utf8_len(const unsigned char *s)
{
    int n;
    uint32_t cp;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xe0) == 0xc0) {
        n = 2;
        cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3;
        cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        n = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static void put_string(ptc_buf *b, const char *s)
{
    ptc_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"': ptc_buf_puts(b, "\\\""); break;
        case '\\': ptc_buf_puts(b, "\\\\"); break;
        case '\n': ptc_buf_puts(b, "\\n"); break;
        case '\t': ptc_buf_puts(b, "\\t"); break;
        case '\r': ptc_buf_puts(b, "\\r"); break;
        case '\b': ptc_buf_puts(b, "\\b"); break;
        case '\f': ptc_buf_puts(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                ptc_buf_printf(b, "\\u%04x", *p);
            } else {
                int n = utf8_len(p);
                if (n == 0) { /* U+FFFD as UTF-8, as a valid one would be written */
                    ptc_buf_puts(b, "\xef\xbf\xbd");
                    n = 1;
                } else {
                    ptc_buf_putn(b, (const char *)p, (size_t)n);
                }
                p += n;
                continue;
            }
        }
        p++;
    }
    ptc_buf_putc(b, '"');
}

void ptc_jw_key(ptc_jw *w, const char *key)
{
    before_item(w);
    put_string(w->b, key ? key : "");
    ptc_buf_puts(w->b, w->pretty ? ": " : ":");
}

void ptc_jw_str(ptc_jw *w, const char *s)
{
    if (!s) {
        ptc_jw_null(w);
        return;
    }
    before_value(w);
    put_string(w->b, s);
}

void ptc_jw_int(ptc_jw *w, int64_t v)
{
    before_value(w);
    ptc_buf_printf(w->b, "%lld", (long long)v);
}

void ptc_jw_num(ptc_jw *w, double v)
{
    if (!isfinite(v)) {
        ptc_jw_null(w);
        return;
    }
    before_value(w);
    /* Counts read as counts; the range test comes first, as converting an
     * out-of-range double to an integer is undefined. */
    if (fabs(v) < 9007199254740992.0 && v == (double)(int64_t)v) {
        ptc_buf_printf(w->b, "%lld", (long long)v);
        return;
    }
    char s[40];
    for (int prec = 1; prec <= 17; prec++) { /* shortest text that reads back */
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    ptc_buf_puts(w->b, s);
}

void ptc_jw_bool(ptc_jw *w, bool v)
{
    before_value(w);
    ptc_buf_puts(w->b, v ? "true" : "false");
}

void ptc_jw_null(ptc_jw *w)
{
    before_value(w);
    ptc_buf_puts(w->b, "null");
}

/* ---- reader ---------------------------------------------------------------- */

enum { READ_MAX_DEPTH = 256 };

typedef struct jreader {
    const char *text, *p, *end;
    const char *line_start;
    int line;
    const char *file;
    ptc_arena *arena;
    ptc_error *err;
} jreader;

__attribute__((format(printf, 3, 4))) static int jfail(jreader *r, const char *at,
                                                       const char *fmt, ...)
{
    /* Recount line and column up to `at` (errors are rare; keeps the scanner simple). */
    int line = 1;
    const char *ls = r->text;
    for (const char *q = r->text; q < at && q < r->end; q++)
        if (*q == '\n') {
            line++;
            ls = q + 1;
        }
    va_list ap;
    va_start(ap, fmt);
    ptc_verrorf(r->err, PTC_ERR_PARSE, "json", fmt, ap);
    va_end(ap);
    ptc_error_at(r->err, r->file, line, (int)(at - ls) + 1);
    return -1;
}

static void describe_at(const jreader *r, char *buf, size_t size)
{
    if (r->p >= r->end) {
        snprintf(buf, size, "end of input");
        return;
    }
    unsigned char c = (unsigned char)*r->p;
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, size, "'%c'", c);
    else
        snprintf(buf, size, "byte 0x%02x", c);
}

static int jexpected(jreader *r, const char *what)
{
    char got[32];
    describe_at(r, got, sizeof got);
    return jfail(r, r->p, "expected %s, got %s", what, got);
}

static void jws(jreader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static ptc_json *jnode(jreader *r, ptc_jkind kind)
{
    ptc_json *j = PTC_NEW(r->arena, ptc_json);
    j->kind = kind;
    return j;
}

static int hex4(jreader *r, uint32_t *out)
{
    if (r->end - r->p < 4)
        return jfail(r, r->p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return jfail(r, r->p + i, "bad hex digit in \\u escape");
        v = v * 16 + (uint32_t)d;
    }
    r->p += 4;
    *out = v;
    return 0;
}

static void put_utf8(ptc_buf *b, uint32_t cp)
{
    char s[4];
    if (cp < 0x80) {
        ptc_buf_putc(b, (char)cp);
    } else if (cp < 0x800) {
        s[0] = (char)(0xc0 | cp >> 6);
        s[1] = (char)(0x80 | (cp & 0x3f));
        ptc_buf_putn(b, s, 2);
    } else if (cp < 0x10000) {
        s[0] = (char)(0xe0 | cp >> 12);
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        s[2] = (char)(0x80 | (cp & 0x3f));
        ptc_buf_putn(b, s, 3);
    } else {
        s[0] = (char)(0xf0 | cp >> 18);
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        s[3] = (char)(0x80 | (cp & 0x3f));
        ptc_buf_putn(b, s, 4);
    }
}

/* One escape after the backslash: appends its bytes to b. */
static int escape(jreader *r, ptc_buf *b)
{
    if (r->p >= r->end)
        return jfail(r, r->p, "unterminated string");
    char e = *r->p++;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = e ? strchr(from, e) : NULL;
    if (k) {
        ptc_buf_putc(b, to[k - from]);
        return 0;
    }
    if (e != 'u')
        return jfail(r, r->p - 2, "unknown escape '\\%c' in string", e >= 0x20 && e < 0x7f ? e : '?');
    uint32_t cp;
    if (hex4(r, &cp))
        return -1;
    if (cp >= 0xd800 && cp <= 0xdbff) { /* a high surrogate needs its low half */
        uint32_t lo;
        if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
            return jfail(r, r->p, "unpaired surrogate in \\u escape");
        r->p += 2;
        if (hex4(r, &lo))
            return -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return jfail(r, r->p - 6, "unpaired surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        return jfail(r, r->p - 6, "unpaired surrogate in \\u escape");
    }
    if (cp == 0)
        return jfail(r, r->p - 6, "\\u0000 is not supported in strings");
    put_utf8(b, cp);
    return 0;
}

static int jstring(jreader *r, const char **out)
{
    const char *start = r->p++; /* the opening quote */
    ptc_buf b = {0};
    ptc_buf_puts(&b, "");
    for (;;) {
        if (r->p >= r->end) {
            ptc_buf_free(&b);
            return jfail(r, start, "unterminated string");
        }
        unsigned char c = (unsigned char)*r->p;
        if (c == '"')
            break;
        if (c < 0x20) {
            ptc_buf_free(&b);
            return jfail(r, r->p, "control character (byte 0x%02x) in string", c);
        }
        r->p++;
        if (c == '\\') {
            if (escape(r, &b)) {
                ptc_buf_free(&b);
                return -1;
            }
        } else {
            ptc_buf_putc(&b, (char)c);
        }
    }
    r->p++;
    *out = ptc_arena_strndup(r->arena, b.data, b.len);
    ptc_buf_free(&b);
    return 0;
}

static bool is_digit(const jreader *r, const char *q) { return q < r->end && *q >= '0' && *q <= '9'; }

static int jnumber(jreader *r, double *out)
{
    const char *s = r->p, *q = s;
    if (q < r->end && *q == '-')
        q++;
    if (!is_digit(r, q))
        return jfail(r, q, "expected a digit");
    if (*q == '0')
        q++;
    else
        while (is_digit(r, q))
            q++;
    if (q < r->end && *q == '.') {
        q++;
        if (!is_digit(r, q))
            return jfail(r, q, "expected a digit after '.'");
        while (is_digit(r, q))
            q++;
    }
    if (q < r->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < r->end && (*q == '+' || *q == '-'))
            q++;
        if (!is_digit(r, q))
            return jfail(r, q, "expected a digit in the exponent");
        while (is_digit(r, q))
            q++;
    }
    /* strtod needs a terminated copy: the text may end right after the number. */
    char tmp[64];
    size_t n = (size_t)(q - s);
    char *copy = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!copy)
        return jfail(r, s, "out of memory");
    memcpy(copy, s, n);
    copy[n] = 0;
    *out = strtod(copy, NULL);
    if (copy != tmp)
        free(copy);
    r->p = q;
    return 0;
}

static int jvalue(jreader *r, ptc_json **out, int depth);

/* Grows an arena array (old copies are abandoned to the arena). */
static void *grow(ptc_arena *a, void *old, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return old;
    int ncap = *cap ? *cap * 2 : 4;
    void *p = ptc_arena_alloc(a, elem * (size_t)ncap);
    if (old)
        memcpy(p, old, elem * (size_t)n);
    *cap = ncap;
    return p;
}

static int jarray(jreader *r, ptc_json *j, int depth)
{
    int cap = 0;
    r->p++;
    jws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return 0;
    }
    for (;;) {
        ptc_json *item;
        if (jvalue(r, &item, depth + 1))
            return -1;
        j->items = grow(r->arena, j->items, j->n, &cap, sizeof *j->items);
        j->items[j->n++] = item;
        jws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return 0;
        }
        return jexpected(r, "',' or ']' in an array");
    }
}

static int jobject(jreader *r, ptc_json *j, int depth)
{
    int cap = 0, kcap = 0;
    r->p++;
    jws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return 0;
    }
    for (;;) {
        jws(r);
        if (r->p >= r->end || *r->p != '"')
            return jexpected(r, "a string key");
        const char *key;
        if (jstring(r, &key))
            return -1;
        jws(r);
        if (r->p >= r->end || *r->p != ':')
            return jexpected(r, "':' after the key");
        r->p++;
        ptc_json *item;
        if (jvalue(r, &item, depth + 1))
            return -1;
        j->keys = grow(r->arena, j->keys, j->n, &kcap, sizeof *j->keys);
        j->items = grow(r->arena, j->items, j->n, &cap, sizeof *j->items);
        j->keys[j->n] = key;
        j->items[j->n++] = item;
        jws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return 0;
        }
        return jexpected(r, "',' or '}' in an object");
    }
}

static bool literal(jreader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, word, n) == 0) {
        r->p += n;
        return true;
    }
    return false;
}

static int jvalue(jreader *r, ptc_json **out, int depth)
{
    jws(r);
    if (depth > READ_MAX_DEPTH)
        return jfail(r, r->p, "nested more than %d levels deep", READ_MAX_DEPTH);
    if (r->p >= r->end)
        return jexpected(r, "a value");
    char c = *r->p;
    ptc_json *j;
    switch (c) {
    case '{':
        j = *out = jnode(r, PTC_JOBJ);
        return jobject(r, j, depth);
    case '[':
        j = *out = jnode(r, PTC_JARR);
        return jarray(r, j, depth);
    case '"':
        j = *out = jnode(r, PTC_JSTR);
        return jstring(r, &j->str);
    case 't':
    case 'f':
    case 'n':
        if (literal(r, "true") || literal(r, "false")) {
            j = *out = jnode(r, PTC_JBOOL);
            j->b = c == 't';
            return 0;
        }
        if (literal(r, "null")) {
            *out = jnode(r, PTC_JNULL);
            return 0;
        }
        return jexpected(r, "a value");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            j = *out = jnode(r, PTC_JNUM);
            return jnumber(r, &j->num);
        }
        return jexpected(r, "a value");
    }
}

ptc_json *ptc_json_parse(ptc_arena *a, const char *text, size_t len, const char *filename,
                         ptc_error *err)
{
    ptc_error local;
    if (!err)
        err = &local;
    ptc_error_clear(err);
    if (!text) {
        text = "";
        len = 0;
    }
    jreader r = {text, text, text + len, text, 1, filename ? filename : "<json>", a, err};
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) /* a UTF-8 byte order mark */
        r.p += 3;
    ptc_json *root;
    if (jvalue(&r, &root, 0))
        return NULL;
    jws(&r);
    if (r.p < r.end) {
        jexpected(&r, "the end of input after the value");
        return NULL;
    }
    return root;
}

const ptc_json *ptc_json_get(const ptc_json *obj, const char *key)
{
    if (!obj || obj->kind != PTC_JOBJ)
        return NULL;
    for (int i = obj->n - 1; i >= 0; i--) /* the last duplicate wins, as in Python */
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

const char *ptc_json_str(const ptc_json *obj, const char *key, const char *dflt)
{
    const ptc_json *j = ptc_json_get(obj, key);
    return j && j->kind == PTC_JSTR ? j->str : dflt;
}

double ptc_json_num(const ptc_json *obj, const char *key, double dflt)
{
    const ptc_json *j = ptc_json_get(obj, key);
    return j && j->kind == PTC_JNUM ? j->num : dflt;
}

void ptc_jw_value(ptc_jw *w, const ptc_json *j, int max_depth)
{
    if (w->depth >= max_depth) {
        ptc_jw_null(w);
        return;
    }
    switch (j->kind) {
    case PTC_JNULL: ptc_jw_null(w); break;
    case PTC_JBOOL: ptc_jw_bool(w, j->b); break;
    case PTC_JNUM: ptc_jw_num(w, j->num); break;
    case PTC_JSTR: ptc_jw_str(w, j->str); break;
    case PTC_JARR:
        ptc_jw_arr_begin(w);
        for (int i = 0; i < j->n; i++)
            ptc_jw_value(w, j->items[i], max_depth);
        ptc_jw_arr_end(w);
        break;
    case PTC_JOBJ:
        ptc_jw_obj_begin(w);
        for (int i = 0; i < j->n; i++) {
            ptc_jw_key(w, j->keys[i]);
            ptc_jw_value(w, j->items[i], max_depth);
        }
        ptc_jw_obj_end(w);
        break;
    }
}
