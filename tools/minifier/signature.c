/* Failure checks and signatures.
 *
 * A minifier that accepts any failure drifts: halfway through, a candidate
 * fails with some other error (a shape error from the surgery, a different
 * crash) and the "minimal repro" shows a bug nobody asked about. So the first
 * run of the original pins a signature (kind, error class, failing stage and
 * the message with its numbers masked, or the user's regex), and a candidate
 * only counts as failing when it matches all of it.
 *
 * Masking keeps dtype names and identifiers ("f32", "conv1") and masks
 * free-standing numbers ("[1,64,8,8]", "%37", "1e-05", "0x7ffd1234"):
 * shapes and value numbers change as the graph shrinks, the words do not.
 */
#include "minify.h"

#include <ctype.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_names[] = {
#define X(id, name) name,
    MF_KINDS(X)
#undef X
};
_Static_assert(sizeof kind_names / sizeof *kind_names == MF_KIND_COUNT, "kind table out of step");

const char *mf_kind_name(mf_kind k)
{
    return (unsigned)k < MF_KIND_COUNT ? kind_names[k] : "?";
}

static bool ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

void mf_mask(const char *msg, char *out, size_t size)
{
    size_t k = 0;
    const char *p = msg;
    while (*p && k + 4 < size) {
        /* Digits inside a name stay: "conv1", "x_3", "layer1.0.conv1". */
        bool in_name =
            p > msg && (ident_char(p[-1]) || (p[-1] == '.' && p - 1 > msg && ident_char(p[-2])));
        bool starts_number = isdigit((unsigned char)*p) && !in_name;
        if (!starts_number) {
            out[k++] = *p++;
            continue;
        }
        if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && isxdigit((unsigned char)p[2])) {
            p += 2;
            while (isxdigit((unsigned char)*p))
                p++;
            memcpy(out + k, "0x#", 3);
            k += 3;
            continue;
        }
        while (isdigit((unsigned char)*p))
            p++;
        if (*p == '.' && isdigit((unsigned char)p[1]))
            for (p++; isdigit((unsigned char)*p); p++)
                ;
        if ((*p == 'e' || *p == 'E') &&
            (isdigit((unsigned char)p[1]) ||
             ((p[1] == '-' || p[1] == '+') && isdigit((unsigned char)p[2]))))
            for (p += 2; isdigit((unsigned char)*p); p++)
                ;
        out[k++] = '#';
    }
    out[k] = 0;
}

/* ---- checks ------------------------------------------------------------------ */

static int parse_tol(const char *s, double *v, const char *what, ptc_error *err)
{
    char *end;
    *v = strtod(s, &end);
    if (end == s || (*end && *end != ':') || !(*v >= 0))
        return ptc_errorf(err, PTC_ERR_PARSE, "args",
                          "--check accuracy: %s '%s' is not a non-negative number", what, s);
    return 0;
}

int mf_check_parse(const char *s, mf_check *c, ptc_error *err)
{
    memset(c, 0, sizeof *c);
    c->rtol = c->atol = -1;
    if (strcmp(s, "crash") == 0) {
        c->kind = MF_CRASH;
    } else if (strcmp(s, "hang") == 0) {
        c->kind = MF_HANG;
    } else if (strcmp(s, "error") == 0 || strncmp(s, "error:", 6) == 0) {
        c->kind = MF_ERROR;
        if (s[5] == ':') {
            if (strlen(s + 6) >= sizeof c->regex)
                return ptc_errorf(err, PTC_ERR_PARSE, "args", "--check error: regex too long");
            snprintf(c->regex, sizeof c->regex, "%s", s + 6);
            regex_t re;
            int rc = regcomp(&re, c->regex, REG_EXTENDED | REG_NOSUB);
            if (rc) {
                char msg[256];
                regerror(rc, &re, msg, sizeof msg);
                return ptc_errorf(err, PTC_ERR_PARSE, "args", "--check error: bad regex '%s': %s",
                                  c->regex, msg);
            }
            regfree(&re);
        }
    } else if (strcmp(s, "accuracy") == 0 || strncmp(s, "accuracy:", 9) == 0) {
        c->kind = MF_ACCURACY;
        if (s[8] == ':') {
            const char *atol = strchr(s + 9, ':');
            if (parse_tol(s + 9, &c->rtol, "RTOL", err) ||
                (atol && parse_tol(atol + 1, &c->atol, "ATOL", err)))
                return -1;
            if (atol && strchr(atol + 1, ':'))
                return ptc_errorf(err, PTC_ERR_PARSE, "args",
                                  "--check accuracy takes at most RTOL and ATOL, got '%s'", s);
        }
    } else {
        return ptc_errorf(err, PTC_ERR_PARSE, "args",
                          "--check expects crash, hang, error[:REGEX] or accuracy[:RTOL[:ATOL]], "
                          "got '%s'",
                          s);
    }
    return 0;
}

/* "ErrorClass: message": what error:REGEX is matched against. */
static void error_text(const mf_result *r, char *buf, size_t size)
{
    snprintf(buf, size, "%s: %s", ptc_errclass_name((ptc_errclass)r->errclass), r->message);
}

static bool regex_matches(const char *src, const mf_result *r)
{
    regex_t re;
    if (regcomp(&re, src, REG_EXTENDED | REG_NOSUB))
        return false;
    char text[1200];
    error_text(r, text, sizeof text);
    bool ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

bool mf_check_accepts(const mf_check *c, const mf_result *r)
{
    if (r->kind == MF_PASS || r->kind == MF_INVALID)
        return false;
    if (c->any)
        return true;
    switch (c->kind) {
    case MF_CRASH:
        return r->kind == MF_CRASH || r->kind == MF_HANG || r->kind == MF_OOM;
    case MF_ERROR:
        return r->kind == MF_ERROR && (!c->regex[0] || regex_matches(c->regex, r));
    default:
        return r->kind == (int)c->kind;
    }
}

/* ---- signatures -------------------------------------------------------------- */

int mf_signature_pin(mf_signature *sig, const mf_result *r, const mf_check *c, ptc_error *err)
{
    memset(sig, 0, sizeof *sig);
    sig->kind = (mf_kind)r->kind;
    sig->errclass = r->errclass;
    sig->signal = r->signal;
    sig->exit_status = r->exit_status;
    snprintf(sig->stage, sizeof sig->stage, "%s", r->stage);
    if (r->kind == MF_ERROR && c && c->kind == MF_ERROR && c->regex[0]) {
        sig->has_regex = true;
        snprintf(sig->regex_src, sizeof sig->regex_src, "%s", c->regex);
        int rc = regcomp(&sig->regex, sig->regex_src, REG_EXTENDED | REG_NOSUB);
        if (rc) {
            sig->has_regex = false;
            return ptc_errorf(err, PTC_ERR_PARSE, "args", "bad regex '%s'", sig->regex_src);
        }
    } else if (r->kind == MF_ERROR || r->kind == MF_CRASH) {
        /* Accuracy mismatches carry numbers only, hangs and OOMs no message. */
        mf_mask(r->message, sig->pattern, sizeof sig->pattern);
    }
    if (r->kind == MF_ACCURACY || r->kind == MF_OOM)
        sig->stage[0] = 0;
    return 0;
}

bool mf_signature_match(const mf_signature *sig, const mf_result *r)
{
    if ((int)sig->kind != r->kind)
        return false;
    if (sig->kind == MF_ERROR && sig->errclass != r->errclass)
        return false;
    if (sig->kind == MF_CRASH &&
        (sig->signal != r->signal || (!sig->signal && sig->exit_status != r->exit_status)))
        return false;
    if (sig->stage[0] && strcmp(sig->stage, r->stage) != 0)
        return false;
    if (sig->has_regex) {
        char text[1200];
        error_text(r, text, sizeof text);
        return regexec(&sig->regex, text, 0, NULL, 0) == 0;
    }
    if (sig->pattern[0]) {
        char masked[1024];
        mf_mask(r->message, masked, sizeof masked);
        return strcmp(masked, sig->pattern) == 0;
    }
    return true;
}

void mf_signature_free(mf_signature *sig)
{
    if (sig->has_regex)
        regfree(&sig->regex);
    sig->has_regex = false;
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGABRT:
        return "SIGABRT";
    case SIGBUS:
        return "SIGBUS";
    case SIGFPE:
        return "SIGFPE";
    case SIGILL:
        return "SIGILL";
    case SIGKILL:
        return "SIGKILL";
    case SIGTERM:
        return "SIGTERM";
    case SIGTRAP:
        return "SIGTRAP";
    default:
        return NULL;
    }
}

static void crash_what(int sig, int status, char *buf, size_t size)
{
    const char *name = signal_name(sig);
    if (sig == 0)
        snprintf(buf, size, "exit status %d", status);
    else if (name)
        snprintf(buf, size, "%s", name);
    else
        snprintf(buf, size, "signal %d", sig);
}

static void stage_suffix(const char *stage, char *buf, size_t size)
{
    snprintf(buf, size, stage[0] ? " in %s" : "", stage);
}

void mf_result_format(const mf_result *r, char *buf, size_t size)
{
    char where[48], what[64];
    stage_suffix(r->stage, where, sizeof where);
    switch ((mf_kind)r->kind) {
    case MF_ERROR:
        snprintf(buf, size, "error %s%s: %s", ptc_errclass_name((ptc_errclass)r->errclass), where,
                 r->message);
        break;
    case MF_CRASH:
        crash_what(r->signal, r->exit_status, what, sizeof what);
        snprintf(buf, size, "crash (%s)%s%s%s", what, where, r->message[0] ? ": " : "", r->message);
        break;
    case MF_HANG:
        snprintf(buf, size, "hang%s (%s)", where, r->message);
        break;
    case MF_OOM:
        snprintf(buf, size, "out of memory%s (%s)", where, r->message);
        break;
    case MF_ACCURACY:
        snprintf(buf, size, "accuracy: %s", r->message);
        break;
    case MF_INVALID:
        snprintf(buf, size, "not a valid test: %s", r->message);
        break;
    default:
        snprintf(buf, size, "pass");
        break;
    }
}

void mf_signature_format(const mf_signature *sig, char *buf, size_t size)
{
    char where[48], what[64] = "";
    stage_suffix(sig->stage, where, sizeof where);
    if (sig->kind == MF_ERROR)
        snprintf(what, sizeof what, " %s", ptc_errclass_name((ptc_errclass)sig->errclass));
    else if (sig->kind == MF_CRASH) {
        what[0] = ' ';
        crash_what(sig->signal, sig->exit_status, what + 1, sizeof what - 1);
    }
    const char *msg = sig->has_regex ? sig->regex_src : sig->pattern;
    snprintf(buf, size, "%s%s%s%s%s%s", mf_kind_name(sig->kind), what, where,
             msg[0] ? (sig->has_regex ? " matching /" : ": ") : "", msg,
             msg[0] && sig->has_regex ? "/" : "");
}
