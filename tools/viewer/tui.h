/* ptview's terminal front end (ncurses): a sidebar of compiles and stages,
 * one or two graph panes, a detail pane and a status line, all drawn from
 * the view model (view.h). Keys are listed by '?' and in man/ptview.1.
 */
#ifndef PTC_VIEW_TUI_H
#define PTC_VIEW_TUI_H

#include "tools/viewer/view.h"

typedef struct ptv_tui_opts {
    bool mono;              /* no colours even if the terminal has them */
    const char *compile;    /* compile id to open first (NULL: the first) */
    const char *stage;      /* stage to open first (NULL: captured, else the first) */
    double started_ms;      /* when ptview started, for "opened in N ms" */
} ptv_tui_opts;

/* Runs until the user quits. Returns 0, or -1 with err when the terminal
 * cannot be set up. */
int ptv_tui_run(ptv_trace *t, const ptv_tui_opts *o, ptc_error *err);

#endif /* PTC_VIEW_TUI_H */
