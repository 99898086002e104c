/* The shareable report: a trace (and optionally ptexplain's report text) as
 * one self-contained HTML page, every graph drawn as inline SVG and every
 * item linked to what it came from and became in the other stages (html.c). */
#ifndef PTC_VIEW_HTML_H
#define PTC_VIEW_HTML_H

#include "tools/viewer/view.h"

/* Writes the page for trace t to `out`, headed by title (NULL: the trace's
 * path); report (may be NULL) is shown first as preformatted text. 0, or -1
 * with err naming the file. */
int ptv_write_html(ptv_trace *t, const char *title, const char *report, const char *out,
                   ptc_error *err);

/* A trace of a page of several, and its label ("rank 1"; NULL: none). */
typedef struct ptv_html_trace {
    ptv_trace *trace;
    const char *label;
} ptv_html_trace;

/* The page of several traces (a distributed job's ranks), each with its
 * compiles, after the report; anchors name the trace ("r1c0-prims-12"). */
int ptv_write_html_traces(const ptv_html_trace *traces, int ntraces, const char *title,
                          const char *report, const char *out, ptc_error *err);

#endif /* PTC_VIEW_HTML_H */
