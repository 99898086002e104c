/* Internal to the view model (view_*.c): the name -> items map and the
 * helpers the model's files share. Not included from outside tools/viewer. */
#ifndef PTC_VIEW_INT_H
#define PTC_VIEW_INT_H

#include "tools/viewer/view.h"

/* A string -> list-of-items map sized once (no rehashing): the builder knows
 * how many (name, item) pairs it will add. Items of one key keep the order
 * they were added in. Everything lives in the arena. */
ptv_strmap *ptv_strmap_new(ptc_arena *a, int npairs);
void ptv_strmap_add(ptv_strmap *m, const char *key, int item);
/* Fills out with up to max items of key; returns how many there are. */
int ptv_strmap_get(const ptv_strmap *m, const char *key, int *out, int max);
int ptv_strmap_first(const ptv_strmap *m, const char *key); /* -1 if absent */

/* Stage loaders (view_stage.c). */
int ptv_load_graph(ptv_stage *s);
int ptv_load_text(ptv_stage *s);
int ptv_load_code(ptv_stage *s);
int ptv_load_info(ptv_stage *s);

/* A new stage of a compile (view_trace.c). */
ptv_stage *ptv_stage_new(ptv_compile *c, ptv_stageid id, const char *name);
void ptv_stage_add_file(ptv_stage *s, const char *path);

/* Trace and compile folders (view_trace.c, view_index.c). */
ptv_compile *ptv_compile_new(ptv_trace *t, const char *id, const char *dir);
int ptv_scan_compile(ptv_compile *c);             /* stage files on disk; count used */
int ptv_scan_trace(ptv_trace *t, bool from_index); /* compile folders not yet known */
/* Reads index.json into t->compiles (folders are scanned for their files).
 * -1 with err when it is missing or cannot be parsed. */
int ptv_read_index(ptv_trace *t, const char *path, ptc_error *err);
/* Which stage a file of a compile folder belongs to (other: the stem of an
 * unknown .ptir); false if none. */
bool ptv_classify(const char *name, ptv_stageid *id, char *other, size_t size);
ptv_stage *ptv_stage_for(ptv_compile *c, ptv_stageid id, const char *name); /* find or add */
void ptv_sort_files(ptv_stage *s);
void ptv_warn(ptv_trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ptv_sources_free(ptv_trace *t);


#endif /* PTC_VIEW_INT_H */
