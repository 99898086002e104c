/* ptview's Graphviz renderer: one stage drawn as a dataflow graph through
 * libcgraph (building) and libgvc (layout with dot, output as SVG or PNG;
 * .dot files are written by cgraph itself, without layout).
 *
 * Graph stages draw their nodes, clustered by module path; kernel and code
 * stages draw the captured graph clustered by the kernel each node ended up
 * in. A graph too large to read is collapsed by module beyond a depth (one
 * box per module, edges merged); the focused node and every node sharing its
 * provenance are highlighted and never folded away.
 */
#ifndef PTC_VIEW_RENDER_H
#define PTC_VIEW_RENDER_H

#include "tools/viewer/view.h"

typedef struct ptv_render_opts {
    const char *out;        /* .svg, .png or .dot: the format is the extension */
    ptv_stage *focus_stage; /* the focused item's stage (NULL: no focus) */
    int focus_item;
    int depth;              /* modules nested deeper than this are folded; -1: auto */
    int max_nodes;          /* auto depth keeps the drawing under this (0: 300) */
    bool honour_collapse;   /* fold what the stage has folded (the TUI's 'r') */
} ptv_render_opts;

/* Renders stage s (loaded) to o->out. On success fills `summary` with one
 * line (nodes, edges, clusters, depth used); -1 with err otherwise. */
int ptv_render(ptv_stage *s, const ptv_render_opts *o, char *summary, size_t size, ptc_error *err);

/* Resolves "[STAGE:]%name" (or a kernel "kernel:3") against a compile for
 * --focus; default_stage is used without a prefix. */
int ptv_resolve_focus(ptv_compile *c, ptv_stage *default_stage, const char *spec,
                      ptv_stage **stage, int *item, ptc_error *err);

#endif /* PTC_VIEW_RENDER_H */
