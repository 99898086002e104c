/* ptview's view model: a trace directory (or one .ptir file) loaded as
 * compiles of stages of items, and the views (panes) that show them.
 *
 * Owns: reading the trace (index.json, per-compile folders, .ptir stages,
 * loops.txt / kernels.txt / kernel_<n>.ll|.ptx text stages), the module tree
 * and its collapse state, search, provenance (which items of other stages a
 * stage-1 value became, and back), linked selection between two stages, the
 * detail of one item, and the user's source lines. No curses and no Graphviz:
 * the unit tests drive this directly; the TUI (tui.c) and the renderer
 * (render.c) only draw it.
 *
 * Identity across stages is the stage-1 value name: a captured node's
 * "origin" is its own first output name, any later item's origins are its
 * provenance list (`<- %a, %b`). Two items are related when their origins
 * intersect.
 */
#ifndef PTC_VIEW_H
#define PTC_VIEW_H

#include "ir/ir.h"

/* Stages in display order. X(id, name, kind): kind G = .ptir graph, T = text
 * with provenance, C = generated code, I = compile information. */
#define PTV_STAGES(X)                  \
    X(CAPTURED, "captured", 'G')       \
    X(PRIMS, "prims", 'G')             \
    X(JOINT, "joint", 'G')             \
    X(FORWARD, "forward", 'G')         \
    X(BACKWARD, "backward", 'G')       \
    X(LOOPS, "loops", 'T')             \
    X(KERNELS, "kernels", 'T')         \
    X(LLVM, "llvm", 'C')               \
    X(PTX, "ptx", 'C')                 \
    X(INFO, "info", 'I')

typedef enum {
#define X(id, name, kind) PTV_##id,
    PTV_STAGES(X)
#undef X
    PTV_STAGE_COUNT,
    PTV_OTHER = PTV_STAGE_COUNT /* a bare .ptir with another name */
} ptv_stageid;

typedef enum { PTV_UNLOADED, PTV_LOADED, PTV_MISSING, PTV_BROKEN } ptv_state;

typedef enum {
    PTV_ITEM_GRAPH,  /* "graph forward(...)" */
    PTV_ITEM_INPUT,  /* a graph input */
    PTV_ITEM_NODE,   /* a graph node */
    PTV_ITEM_RETURN, /* "return (...)" */
    PTV_ITEM_KERNEL, /* "kernel <n> <name>:" or a code file's "; ptc kernel" line */
    PTV_ITEM_LINE,   /* any other line of a text stage */
} ptv_itemkind;

/* One row of a stage. Strings live in the stage's arena. */
typedef struct ptv_item {
    uint8_t kind;           /* ptv_itemkind */
    int16_t depth;          /* group nesting: the indentation */
    int group;              /* innermost group holding it, -1 for none */
    const char *file;       /* the file it was read from (name within the compile) */
    int line;               /* 1-based line in that file */
    const char *name;       /* value name without '%' (graph items), else NULL */
    const char *op;         /* op name; "input", "return", "kernel"; NULL for text */
    const char *type;       /* printed output types ("f32[2,8]"), NULL if none */
    const char *module;     /* module path, own or inherited; NULL if none */
    ptc_srcloc loc;         /* user source location, own or inherited */
    int inherited_from;     /* captured item the module/loc came from, -1 if own */
    const char *text;       /* the line as read or printed; NULL for graph nodes
                             * (ptv_item_text prints them on demand) */
    int nprov;              /* provenance: stage-1 value names (no '%') */
    const char **prov;
    int kernel;             /* kernel number, -1 */
    int ninputs, nusers;    /* items defining this node's tensor args / using its outputs */
    int *inputs, *users;
    const ptc_node *node;   /* graph nodes: the parsed node (attributes) */
} ptv_item;

/* A collapsible group: a run of items inside one module (graph stages), a
 * block of a text stage (a kernel, a loop node and its body: titled by its
 * first line), or one kernel file (llvm, ptx). Groups nest; they are stored
 * in the order their first items appear, outer before inner. */
typedef struct ptv_group {
    const char *path;       /* "layer1.0.conv1", "kernel 3" */
    const char *label;      /* what the header shows */
    int key;                /* collapse key: groups with one path collapse together */
    int depth, parent;      /* parent group, -1 */
    int first, end;         /* items [first, end) */
    int nops;               /* nodes (or member lines) inside, nested ones included */
    bool titled;            /* its first item is its title: shown on the header line */
} ptv_group;

/* The group path of a graph's inputs (not a module path: it has parentheses). */
#define PTV_INPUTS "(inputs)"

typedef struct ptv_strmap ptv_strmap; /* name -> list of items (view.c) */
struct ptv_compile;

typedef struct ptv_stage {
    ptv_stageid id;
    const char *name;       /* "captured", or the .ptir's stem for PTV_OTHER */
    char kind;              /* 'G', 'T', 'C', 'I' as in PTV_STAGES */
    ptv_state state;
    int nfiles, cap_files;
    const char **files;     /* paths, in order */
    char error[512];        /* one line when MISSING or BROKEN */
    struct ptv_compile *compile;
    ptc_arena *arena;       /* items, groups, strings */
    ptc_module *module;     /* graph stages */
    int nitems;
    ptv_item *items;
    int ngroups;
    ptv_group *groups;
    int nkeys;
    const char **keys;      /* distinct group paths */
    bool *collapsed;        /* by key */
    unsigned generation;    /* bumped when the collapse state changes */
    int nnodes;             /* nodes / kernels / lines: the sidebar's count */
    ptv_strmap *by_origin;  /* origin name -> items */
    ptv_strmap *by_name;    /* value name -> item (graph stages) */
} ptv_stage;

typedef struct ptv_compile {
    const char *id;         /* "forward_0" */
    const char *frame;
    int recompile;
    const char *function, *file;
    int line;
    const char *reason;     /* break / recompile reason */
    bool incomplete;        /* index.json says it never finished ("complete": false) */
    const char *dir;        /* its folder */
    char error[512];        /* non-empty: the folder or its index entry is damaged */
    int nstages;
    ptv_stage *stages[24];  /* in PTV_STAGES order, then other .ptir files */
    struct ptv_trace *trace;
} ptv_compile;

typedef struct ptv_srcfile ptv_srcfile;

typedef struct ptv_trace {
    ptc_arena *arena;
    const char *path;       /* as given */
    const char *dir;        /* trace directory ("" for a bare file's folder) */
    bool single_file;       /* opened from one .ptir */
    int ncompiles;
    ptv_compile **compiles;
    int nwarnings;
    const char *warnings[32]; /* what could not be read, one line each */
    ptv_srcfile *sources;   /* cache of the user's source files */
} ptv_trace;

/* ---- opening ---------------------------------------------------------------- */

/* Opens a trace directory or a .ptir file. A directory needs index.json; when
 * it is missing or damaged, compile folders found in the directory are opened
 * instead and a warning says so. Returns NULL with a one-line error naming
 * the file when nothing is readable. Stages load lazily (ptv_stage_load). */
ptv_trace *ptv_open(const char *path, ptc_error *err);
void ptv_close(ptv_trace *t);
/* Loads a stage (once). 0, or -1 with stage->state MISSING/BROKEN and
 * stage->error set. Loading any stage loads its compile's captured stage
 * first, so later stages can inherit module paths and source locations. */
int ptv_stage_load(ptv_stage *s);
/* Loads every stage of a compile; returns how many failed. */
int ptv_compile_load(ptv_compile *c);
ptv_stage *ptv_compile_stage(const ptv_compile *c, const char *name); /* NULL if absent */
const char *ptv_stage_name(ptv_stageid id);
int ptv_stage_index(const ptv_compile *c, const ptv_stage *s);

/* ---- items ------------------------------------------------------------------ */

/* The item's whole line into b (graph nodes printed as in .ptir). */
void ptv_item_text(const ptv_item *it, ptc_buf *b);

/* Stage-1 names an item stands for: its own name in the captured stage (or a
 * bare file without provenance), else its provenance. For a group: the
 * origins of its items. Returns the count; *names points into the stage. */
int ptv_item_origins(const ptv_stage *s, int item, const char *const **names);
/* Items of s whose origins include `name`; fills out (up to max), returns the
 * total count. */
int ptv_find_origin(const ptv_stage *s, const char *name, int *out, int max);
/* The item defining value `name` (graph stages), -1. */
int ptv_find_value(const ptv_stage *s, const char *name);
/* Kernel header item of kernel n in s, -1. */
int ptv_find_kernel(const ptv_stage *s, int kernel);

/* ---- provenance ------------------------------------------------------------- */

typedef struct ptv_target {
    ptv_stage *stage;
    int item;
    bool back;              /* towards stage 1 (a "came from"), else "became" */
} ptv_target;

/* Where an item came from and what it became in the other stages of its
 * compile, in stage order; at most `per_stage` items of one stage. Kernel
 * headers also reach the code of the same kernel number. With `load`, stages
 * not loaded yet are loaded; without, they are skipped (the TUI loads them in
 * the background). Returns the count written (up to max). */
int ptv_provenance(ptv_stage *s, int item, ptv_target *out, int max, int per_stage, bool load);
/* Stages of c (other than info) not loaded yet. */
int ptv_compile_unloaded(const ptv_compile *c);
/* The item of `to` that best matches item of `from` (linked selection): the
 * first item sharing an origin, else the same kernel; -1 if none. */
int ptv_link(const ptv_stage *from, int item, ptv_stage *to);

/* ---- views ------------------------------------------------------------------ */

/* A pane over one stage: the visible lines (items and group headers, with
 * collapsed groups folded), the selection and the scroll position. */
typedef struct ptv_view {
    ptv_stage *stage;
    int nlines, cap;
    int *lines;             /* >= 0: an item; < 0: group -(line + 1) header */
    unsigned generation;    /* of the stage when lines were built */
    int sel, top;           /* selected line, first line shown */
} ptv_view;

void ptv_view_init(ptv_view *v, ptv_stage *s); /* s may be NULL */
void ptv_view_free(ptv_view *v);
/* Rebuilds the lines if the stage's collapse state changed, keeping the
 * selection on the same item or header. */
void ptv_view_sync(ptv_view *v);
static inline int ptv_line_item(const ptv_view *v, int line) { return v->lines[line]; }
static inline bool ptv_line_is_group(const ptv_view *v, int line) { return v->lines[line] < 0; }
static inline int ptv_line_group(const ptv_view *v, int line) { return -v->lines[line] - 1; }
/* The selected item; for a header, its group's first item. -1 if empty. */
int ptv_view_item(const ptv_view *v);
/* Line showing item (expanding collapsed groups around it), selected. */
int ptv_view_select_item(ptv_view *v, int item);
void ptv_view_move(ptv_view *v, int delta);   /* clamps */
/* Keeps the selection within a window of `rows` lines. */
void ptv_view_scroll(ptv_view *v, int rows);
/* 'c': on a header toggles its group; on an item collapses the innermost
 * group holding it and selects the header. Returns false if nothing to do. */
bool ptv_view_toggle(ptv_view *v);
void ptv_stage_collapse_all(ptv_stage *s, bool collapsed);
bool ptv_group_collapsed(const ptv_stage *s, int group);
void ptv_stage_set_collapsed(ptv_stage *s, const char *path, bool collapsed);

/* Case-insensitive search over op names, value names, module paths, source
 * file and text, and the line text of text stages. Starts after (dir > 0) or
 * before (dir < 0) the selection and wraps. Selects and returns the item, or
 * -1 when nothing matches. */
int ptv_view_search(ptv_view *v, const char *query, int dir);
bool ptv_item_matches(const ptv_stage *s, int item, const char *query);

/* A line laid out in columns for a width; spans are [start, end) offsets into
 * text for colouring (end == start when absent). */
typedef enum { PTV_COL_NAME, PTV_COL_OP, PTV_COL_TYPE, PTV_COL_MODULE, PTV_COL_LOC,
               PTV_COL_PROV, PTV_COL_COUNT } ptv_col;
typedef struct ptv_linefmt {
    char text[1024];
    int span[PTV_COL_COUNT][2];
    bool header, collapsed;
} ptv_linefmt;
void ptv_format_line(const ptv_view *v, int line, int width, ptv_linefmt *out);

/* ---- detail ------------------------------------------------------------------ */

typedef enum {
    PTV_DL_TITLE,           /* the item's own line */
    PTV_DL_FIELD,           /* "module  layer1.0" */
    PTV_DL_LINK,            /* jumps to (stage, item) */
    PTV_DL_SOURCE,          /* a line of the user's source */
    PTV_DL_SOURCE_HERE,     /* the line the item came from */
    PTV_DL_CARET,           /* the caret under it */
    PTV_DL_NOTE,            /* an explanation (file not found, ...) */
} ptv_dlkind;

typedef struct ptv_dline {
    ptv_dlkind kind;
    char text[512];
    ptv_stage *stage;       /* LINK target */
    int item;
} ptv_dline;

typedef struct ptv_detail {
    int n, cap;
    ptv_dline *lines;
} ptv_detail;

/* The detail of an item: title, stage, type, module, source location and
 * the user's source with `context` lines around it (or why it is not
 * shown), attributes, inputs and users, then provenance (came from /
 * became) in the stages loaded so far (a note names the others);
 * inputs, users and provenance are links. Replaces d's content. */
void ptv_detail_item(ptv_detail *d, ptv_stage *s, int item, int context);
/* The detail of a group header: its path, size, and the first source line. */
void ptv_detail_group(ptv_detail *d, ptv_stage *s, int group);
/* The compile's summary (sidebar). */
void ptv_detail_compile(ptv_detail *d, ptv_compile *c);
void ptv_detail_free(ptv_detail *d);

/* ---- user source --------------------------------------------------------------- */

/* Lines [line-context, line+context] of the user's file. Relative names are
 * looked up in the current directory, the trace directory and its parent.
 * Returns the number of lines (first line number in *first), or -1 with
 * `why` saying which paths were tried. */
int ptv_source(ptv_trace *t, const char *file, int line, int context, int *first,
               const char **lines, int max, char *why, size_t why_size);

/* Printf into a fixed buffer, appending at *len (clamped, always terminated). */
void ptv_appendf(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A name as the user wrote it: capture spells a child of a ModuleList or
 * Sequential through its _modules dict (`h._modules_0.ln_1`), shown as the
 * module path `h.0.ln_1`. */
void ptv_user_name(const char *name, char *out, size_t size);

/* s elided in the middle ("head..tail") to at most width columns: long
 * qualified names all start alike, so their ends must stay visible. */
void ptv_elide_middle(const char *s, int width, char *out, size_t size);

#endif /* PTC_VIEW_H */
