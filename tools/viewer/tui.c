/* The ncurses front end.
 *
 * All state that matters lives in the view model: the TUI keeps which
 * compile is open, the two panes (ptv_view), which area has the keyboard,
 * the detail list of the selected item and a stack of jumps for going back.
 * Every key changes that state and then the whole screen is redrawn from
 * it (only the visible lines are formatted, so a redraw costs the same at
 * ten nodes or ten thousand). Colours are a layer over attributes that also
 * read in monochrome: selection is reverse video, headers are bold.
 */
#define _XOPEN_SOURCE_EXTENDED 1
#include "logs/logs.h"
#include "tools/viewer/tui.h"
#include "tools/viewer/render.h"

#include <curses.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

enum area { SIDEBAR, LEFT, RIGHT, DETAIL };

enum { C_NAME = 1, C_OP, C_TYPE, C_MODULE, C_LOC, C_PROV, C_BAR, C_ERROR, C_HERE, C_CARET, C_NOTE,
       C_LINK, C_DIM, C_COUNT };

typedef struct jump {
    ptv_stage *stage;
    int item;
} jump;

typedef struct sbrow {
    int compile;
    ptv_stage *stage;       /* NULL: the compile's own row (or its reason) */
    int reason_at, reason_len; /* len > 0: a line of the compile's reason */
} sbrow;

typedef struct ui {
    ptv_trace *t;
    ptv_compile *c;         /* the open compile */
    ptv_view pane[2];
    bool split;
    int active;             /* the graph pane keys go to: 0 or 1 */
    enum area focus;
    bool color, utf8;
    int rows, cols;
    /* sidebar */
    sbrow *sb;
    int nsb, sb_sel, sb_top, sb_width;
    /* detail: rebuilt when the selection it shows changes */
    ptv_detail detail;
    const void *d_stage;
    int d_value;
    bool d_wide, d_dirty;    /* dirty: rebuild, keeping the position */
    int d_sel, d_top;
    /* search, jumps, messages */
    char query[256];
    jump history[64];
    int nhistory;
    char status[1024];
    bool status_error;
    bool help;
    bool quit;
} ui;

__attribute__((format(printf, 3, 4))) static void say(ui *u, bool error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(u->status, sizeof u->status, fmt, ap);
    va_end(ap);
    u->status_error = error;
}

/* ---- attributes ------------------------------------------------------------------ */

static attr_t attr(const ui *u, int c)
{
    static const attr_t mono[C_COUNT] = {
        [C_OP] = A_BOLD, [C_MODULE] = A_UNDERLINE, [C_LOC] = A_DIM, [C_PROV] = A_DIM,
        [C_BAR] = A_REVERSE, [C_ERROR] = A_BOLD, [C_HERE] = A_BOLD, [C_CARET] = A_BOLD,
        [C_NOTE] = A_DIM, [C_LINK] = A_UNDERLINE, [C_DIM] = A_DIM,
    };
    if (!u->color)
        return mono[c];
    attr_t extra = c == C_OP || c == C_HERE || c == C_CARET || c == C_ERROR ? A_BOLD : 0;
    return COLOR_PAIR(c) | extra;
}

static void init_colors(ui *u, bool mono)
{
    u->color = !mono && has_colors() && !getenv("NO_COLOR");
    if (!u->color)
        return;
    start_color();
    use_default_colors();
    init_pair(C_NAME, COLOR_CYAN, -1);
    init_pair(C_OP, COLOR_YELLOW, -1);
    init_pair(C_TYPE, COLOR_GREEN, -1);
    init_pair(C_MODULE, COLOR_MAGENTA, -1);
    init_pair(C_LOC, COLOR_BLUE, -1);
    init_pair(C_PROV, COLOR_WHITE, -1);
    init_pair(C_BAR, COLOR_BLACK, COLOR_CYAN);
    init_pair(C_ERROR, COLOR_RED, -1);
    init_pair(C_HERE, COLOR_YELLOW, -1);
    init_pair(C_CARET, COLOR_RED, -1);
    init_pair(C_NOTE, COLOR_MAGENTA, -1);
    init_pair(C_LINK, COLOR_CYAN, -1);
    init_pair(C_DIM, COLOR_WHITE, -1);
}

/* ---- geometry ---------------------------------------------------------------------- */

typedef struct rect {
    int y, x, h, w;
} rect;

static int sidebar_width(const ui *u)
{
    return u->cols >= 160 ? 40 : u->cols >= 120 ? 32 : u->cols >= 60 ? 24 : 0;
}

static rect main_box(const ui *u)
{
    int sw = sidebar_width(u);
    return (rect){1, sw ? sw + 1 : 0, u->rows - 2, u->cols - (sw ? sw + 1 : 0)};
}

static int detail_height(const ui *u)
{
    int h = main_box(u).h;
    return h >= 24 ? h * 2 / 5 : h >= 12 ? h / 3 : 0;
}

static rect pane_box(const ui *u, int p)
{
    rect m = main_box(u);
    int gh = m.h - detail_height(u);
    if (!u->split)
        return (rect){m.y, m.x, gh, m.w};
    int lw = (m.w - 1) / 2;
    return p == 0 ? (rect){m.y, m.x, gh, lw} : (rect){m.y, m.x + lw + 1, gh, m.w - lw - 1};
}

static rect detail_box(const ui *u)
{
    rect m = main_box(u);
    int dh = detail_height(u);
    return (rect){m.y + m.h - dh, m.x, dh, m.w};
}

/* ---- text ---------------------------------------------------------------------------- */

/* Writes at most w display columns of s (UTF-8) at (y, x); returns columns used. */
static int put_text(int y, int x, int w, const char *s, size_t n, attr_t a)
{
    int cols = 0;
    size_t bytes = 0;
    while (bytes < n && s[bytes]) {
        if (((unsigned char)s[bytes] & 0xC0) != 0x80) {
            if (cols == w)
                break;
            cols++;
        }
        bytes++;
    }
    attr_t old;
    short pair;
    attr_get(&old, &pair, NULL);
    attrset(a);
    mvaddnstr(y, x, s, (int)bytes);
    attrset(old);
    return cols;
}

static void fill(int y, int x, int w, attr_t a)
{
    attrset(a);
    for (int i = 0; i < w; i++)
        mvaddch(y, x + i, ' ');
    attrset(A_NORMAL);
}

static void put_line(int y, int x, int w, const char *s, attr_t a)
{
    fill(y, x, w, a);
    put_text(y, x, w, s, strlen(s), a);
}

/* A vertical rule: box drawing in a UTF-8 locale, '|' elsewhere (the
 * terminal's line-drawing charset is not reliable under multiplexers). */
static void vline_at(const ui *u, int y, int x, int h)
{
    attrset(A_DIM);
    for (int r = 0; r < h; r++)
        mvaddstr(y + r, x, u->utf8 ? "\u2502" : "|");
    attrset(A_NORMAL);
}

/* ---- panes ------------------------------------------------------------------------------ */

static ptv_view *active_view(ui *u) { return &u->pane[u->active]; }

static void stage_title(const ptv_stage *s, char *buf, size_t size)
{
    if (!s) {
        snprintf(buf, size, " (no stage) ");
        return;
    }
    const char *unit = s->kind == 'G' ? "nodes" : s->id == PTV_KERNELS ? "kernels"
                       : s->kind == 'C' ? "kernel files" : s->kind == 'I' ? "lines" : "buffers";
    if (s->state == PTV_LOADED)
        snprintf(buf, size, " %s · %s · %d %s%s ", s->name, s->compile->id, s->nnodes, unit,
                 s->error[0] ? " · some files unreadable" : "");
    else
        snprintf(buf, size, " %s · %s · %s ", s->name, s->compile->id,
                 s->state == PTV_MISSING ? "missing" : "unreadable");
}

static void draw_formatted(const ui *u, int y, int x, int w, const ptv_linefmt *f, attr_t base)
{
    static const int col_color[PTV_COL_COUNT] = {C_NAME, C_OP, C_TYPE, C_MODULE, C_LOC, C_PROV};
    fill(y, x, w, base);
    size_t len = strlen(f->text);
    size_t at = 0;
    int cx = 0;
    while (at < len && cx < w) {
        /* The run up to the next span boundary, in one attribute. */
        int color = f->header ? C_MODULE : 0;
        size_t end = len;
        for (int c = 0; c < PTV_COL_COUNT; c++) {
            size_t s0 = (size_t)f->span[c][0], s1 = (size_t)f->span[c][1];
            if (s0 == s1)
                continue;
            if (at >= s0 && at < s1) {
                color = col_color[c];
                end = end < s1 ? end : s1;
            } else if (s0 > at && s0 < end) {
                end = s0;
            }
        }
        attr_t a = base | (color ? attr(u, color) : 0) | (f->header ? A_BOLD : 0);
        if (base & A_REVERSE)
            a = base | (f->header ? A_BOLD : 0);
        cx += put_text(y, x + cx, w - cx, f->text + at, end - at, a);
        at = end;
    }
}

static void draw_pane(ui *u, int p)
{
    ptv_view *v = &u->pane[p];
    rect b = pane_box(u, p);
    if (b.h < 2 || b.w < 4)
        return;
    char title[512];
    stage_title(v->stage, title, sizeof title);
    bool focused = u->focus == (p == 0 ? LEFT : RIGHT);
    put_line(b.y, b.x, b.w, title, focused ? attr(u, C_BAR) | A_BOLD : A_REVERSE);
    int rows = b.h - 1;
    if (!v->stage || v->stage->state != PTV_LOADED) {
        const char *why = v->stage ? v->stage->error : "nothing to show";
        put_line(b.y + 1, b.x, b.w, why, attr(u, C_ERROR));
        for (int r = 2; r < b.h; r++)
            fill(b.y + r, b.x, b.w, A_NORMAL);
        return;
    }
    ptv_view_sync(v);
    ptv_view_scroll(v, rows);
    for (int r = 0; r < rows; r++) {
        int line = v->top + r;
        if (line >= v->nlines) {
            fill(b.y + 1 + r, b.x, b.w, A_NORMAL);
            continue;
        }
        ptv_linefmt f;
        ptv_format_line(v, line, b.w, &f);
        attr_t base = A_NORMAL;
        if (line == v->sel)
            base = focused ? A_REVERSE : (u->split ? A_UNDERLINE | A_BOLD : A_REVERSE | A_DIM);
        draw_formatted(u, b.y + 1 + r, b.x, b.w, &f, base);
    }
}

/* ---- sidebar ------------------------------------------------------------------------------ */

/* Rows of the sidebar for its width: each compile, its reason wrapped on up
 * to three dim lines, its stages. Rebuilt on resize; the selection keeps
 * pointing at the same compile or stage. */
static void build_sidebar(ui *u, int width)
{
    sbrow keep = u->sb && u->nsb ? u->sb[u->sb_sel] : (sbrow){0, NULL, 0, 0};
    int n = 0;
    for (int i = 0; i < u->t->ncompiles; i++)
        n += 4 + u->t->compiles[i]->nstages;
    free(u->sb);
    u->sb = calloc((size_t)n + 1, sizeof *u->sb);
    u->nsb = 0;
    int room = width > 8 ? width - 4 : 4;
    for (int i = 0; i < u->t->ncompiles; i++) {
        ptv_compile *c = u->t->compiles[i];
        u->sb[u->nsb++] = (sbrow){i, NULL, 0, 0};
        int len = c->reason ? (int)strlen(c->reason) : 0;
        for (int at = 0, lines = 0; at < len && lines < 3; lines++) {
            int take = len - at < room ? len - at : room;
            if (at + take < len)
                for (int k = take; k > room / 2; k--)
                    if (c->reason[at + k] == ' ') {
                        take = k;
                        break;
                    }
            u->sb[u->nsb++] = (sbrow){i, NULL, at, take};
            at += take;
            while (at < len && c->reason[at] == ' ')
                at++;
        }
        for (int k = 0; k < c->nstages; k++)
            u->sb[u->nsb++] = (sbrow){i, c->stages[k], 0, 0};
    }
    u->sb_sel = 0;
    for (int i = 0; i < u->nsb; i++)
        if (u->sb[i].compile == keep.compile && u->sb[i].stage == keep.stage && !u->sb[i].reason_len)
            u->sb_sel = i;
    u->sb_width = width;
}

/* Moves the sidebar selection by delta rows, over the reason lines. */
static void sidebar_move(ui *u, int delta)
{
    int dir = delta < 0 ? -1 : 1, at = u->sb_sel;
    for (int i = u->sb_sel + dir; i >= 0 && i < u->nsb && delta != 0; i += dir) {
        if (u->sb[i].reason_len)
            continue;
        at = i;
        delta -= dir;
    }
    u->sb_sel = at;
}

/* A compile's row in width columns: its id in the user's names, then its
 * function when both fit; else the id alone, elided in the middle when long
 * (the recompile number at its end tells compiles of one function apart). */
static void compile_row(const ptv_compile *c, int width, char *buf, size_t size)
{
    char id[512], fn[512] = "", row[1100];
    ptv_user_name(c->id, id, sizeof id);
    if (c->function) {
        ptv_user_name(c->function, fn, sizeof fn - 2);
        strcat(fn, "()");
    }
    const char *tail = c->incomplete ? " (unfinished)" : "";
    int room = width - (int)strlen(tail);
    if (fn[0] && (int)(strlen(id) + 2 + strlen(fn)) > room)
        fn[0] = 0; /* the id first: it is what tells compiles apart */
    snprintf(row, sizeof row, "%s%s%s", id, fn[0] ? "  " : "", fn);
    ptv_elide_middle(row, room, buf, size);
    snprintf(buf + strlen(buf), size - strlen(buf), "%s", tail);
}

static void sidebar_text(const ui *u, const sbrow *r, char *buf, size_t size, attr_t *a)
{
    ptv_compile *c = u->t->compiles[r->compile];
    *a = A_NORMAL;
    if (r->reason_len) {
        snprintf(buf, size, "    %.*s", r->reason_len, c->reason + r->reason_at);
        *a = attr(u, C_DIM);
        return;
    }
    if (!r->stage) {
        compile_row(c, u->sb_width - 1, buf, size);
        *a = A_BOLD | (c->error[0] ? attr(u, C_ERROR) : 0);
        return;
    }
    const ptv_stage *s = r->stage;
    char mark = s == u->pane[0].stage ? '>' : (u->split && s == u->pane[1].stage) ? '=' : ' ';
    char count[32];
    switch (s->state) {
    case PTV_LOADED: snprintf(count, sizeof count, "%d%s", s->nnodes, s->error[0] ? " !" : ""); break;
    case PTV_UNLOADED: snprintf(count, sizeof count, "."); break;
    case PTV_MISSING: snprintf(count, sizeof count, "missing"); break;
    default: snprintf(count, sizeof count, "broken"); break;
    }
    snprintf(buf, size, " %c %-9s %s", mark, s->name, count);
    if (s->state == PTV_MISSING || s->state == PTV_BROKEN || s->error[0])
        *a = attr(u, C_ERROR);
    else if (mark != ' ')
        *a = A_BOLD;
}

static void draw_sidebar(ui *u)
{
    int w = sidebar_width(u);
    if (w == 0)
        return;
    if (w != u->sb_width)
        build_sidebar(u, w);
    int rows = u->rows - 2;
    put_line(1, 0, w, " compiles", u->focus == SIDEBAR ? attr(u, C_BAR) | A_BOLD : A_REVERSE);
    rows--;
    if (u->sb_sel < u->sb_top)
        u->sb_top = u->sb_sel;
    if (u->sb_sel >= u->sb_top + rows)
        u->sb_top = u->sb_sel - rows + 1;
    for (int r = 0; r < rows; r++) {
        int i = u->sb_top + r;
        if (i >= u->nsb) {
            fill(2 + r, 0, w, A_NORMAL);
            continue;
        }
        char buf[512];
        attr_t a;
        sidebar_text(u, &u->sb[i], buf, sizeof buf, &a);
        if (i == u->sb_sel)
            a = u->focus == SIDEBAR ? A_REVERSE : a | A_UNDERLINE;
        put_line(2 + r, 0, w, buf, a);
    }
    vline_at(u, 1, w, u->rows - 2);
}

/* ---- detail ---------------------------------------------------------------------------------- */

static void refresh_detail(ui *u)
{
    const void *key;
    int value;
    if (u->focus == SIDEBAR) {
        key = u->t->compiles[u->sb[u->sb_sel].compile];
        value = -1;
    } else {
        ptv_view *v = active_view(u);
        key = v->stage;
        value = v->stage && v->nlines > 0 ? v->lines[v->sel] : 0x7fffffff;
    }
    bool same = key == u->d_stage && value == u->d_value;
    if (same && !u->d_dirty && u->detail.n > 0)
        return;
    u->d_stage = key;
    u->d_value = value;
    u->d_dirty = false;
    if (!same)
        u->d_sel = u->d_top = 0;
    u->detail.n = 0;
    if (u->focus == SIDEBAR) {
        ptv_detail_compile(&u->detail, (ptv_compile *)key);
        return;
    }
    ptv_view *v = active_view(u);
    if (!v->stage || v->nlines == 0)
        return;
    if (value < 0)
        ptv_detail_group(&u->detail, v->stage, -value - 1);
    else
        ptv_detail_item(&u->detail, v->stage, value, u->d_wide ? 12 : 3);
    if (u->d_sel >= u->detail.n)
        u->d_sel = u->d_top = 0;
}

static bool selectable(const ptv_dline *l)
{
    return l->kind == PTV_DL_LINK || l->kind == PTV_DL_SOURCE_HERE;
}

static attr_t dline_attr(const ui *u, const ptv_dline *l)
{
    switch (l->kind) {
    case PTV_DL_TITLE: return A_BOLD;
    case PTV_DL_LINK: return attr(u, C_LINK);
    case PTV_DL_SOURCE: return attr(u, C_DIM);
    case PTV_DL_SOURCE_HERE: return attr(u, C_HERE);
    case PTV_DL_CARET: return attr(u, C_CARET);
    case PTV_DL_NOTE: return attr(u, C_NOTE);
    default: return A_NORMAL;
    }
}

static void draw_detail(ui *u)
{
    rect b = detail_box(u);
    if (b.h < 2)
        return;
    refresh_detail(u);
    put_line(b.y, b.x, b.w, u->focus == DETAIL ? " detail · Enter follows a link, b goes back " : " detail ",
             u->focus == DETAIL ? attr(u, C_BAR) | A_BOLD : A_REVERSE);
    int rows = b.h - 1;
    if (u->d_sel < u->d_top)
        u->d_top = u->d_sel;
    if (u->d_sel >= u->d_top + rows)
        u->d_top = u->d_sel - rows + 1;
    for (int r = 0; r < rows; r++) {
        int i = u->d_top + r;
        if (i >= u->detail.n) {
            fill(b.y + 1 + r, b.x, b.w, A_NORMAL);
            continue;
        }
        const ptv_dline *l = &u->detail.lines[i];
        attr_t a = dline_attr(u, l);
        if (u->focus == DETAIL && i == u->d_sel)
            a = A_REVERSE;
        put_line(b.y + 1 + r, b.x, b.w, l->text, a);
    }
}

/* ---- bars and help ----------------------------------------------------------------------------- */

static void draw_bars(ui *u)
{
    char top[1024];
    snprintf(top, sizeof top, " ptview  %s  ·  %d compile%s%s%s", u->t->path, u->t->ncompiles,
             u->t->ncompiles == 1 ? "" : "s", u->t->nwarnings ? "  ·  warnings: " : "",
             u->t->nwarnings ? u->t->warnings[0] : "");
    put_line(0, 0, u->cols, top, attr(u, C_BAR) | A_BOLD);
    put_line(u->rows - 1, 0, u->cols, u->status,
             u->status_error ? attr(u, C_ERROR) | A_BOLD : A_NORMAL);
}

static const char *help_lines[] = {
    "ptview keys",
    "",
    "  Up/Down j/k   move            PgUp/PgDn   page       Home/End  first/last",
    "  Tab/S-Tab     next area: sidebar, graph pane(s), detail",
    "  Enter         sidebar: open stage; graph: fold/unfold module or go to detail;",
    "                detail: follow the link (or widen the source)",
    "  s / S         next / previous stage (selection follows provenance)",
    "  v             split: two stages side by side, linked selection",
    "  g             provenance: what the node came from and became",
    "  b, Backspace  go back after a jump",
    "  c             fold/unfold the module here      C / E   fold all / unfold all",
    "  / n N         search op names, module paths, source; next / previous",
    "  r             render the current view to a file (svg, png or dot)",
    "  ?             this help          q   quit",
    "",
    "  press any key",
};

static void draw_help(ui *u)
{
    int n = (int)(sizeof help_lines / sizeof *help_lines);
    int w = 80 < u->cols - 2 ? 80 : u->cols - 2, h = n + 2 < u->rows ? n + 2 : u->rows;
    int y = (u->rows - h) / 2, x = (u->cols - w) / 2;
    for (int r = 0; r < h; r++)
        put_line(y + r, x, w, r > 0 && r <= n ? help_lines[r - 1] : "", A_REVERSE);
}

static void draw(ui *u)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    /* After a resize the terminal may have reflowed what it showed (tmux
     * does), so ncurses' idea of the screen is stale: repaint it all rather
     * than sending only the differences. (Resizes that arrive while ptview
     * is busy coalesce into one KEY_RESIZE, possibly back to the old size,
     * so key() and prompt() force the repaint too.) */
    if (rows != u->rows || cols != u->cols)
        clearok(curscr, TRUE);
    u->rows = rows;
    u->cols = cols;
    erase();
    if (u->rows < 6 || u->cols < 30) {
        mvaddstr(0, 0, "ptview: terminal too small");
        refresh();
        return;
    }
    if (sidebar_width(u) == 0 && u->focus == SIDEBAR)
        u->focus = u->active ? RIGHT : LEFT;
    draw_bars(u);
    draw_sidebar(u);
    draw_pane(u, 0);
    if (u->split) {
        rect b = pane_box(u, 1);
        vline_at(u, b.y, b.x - 1, b.h);
        draw_pane(u, 1);
    }
    draw_detail(u);
    if (u->help)
        draw_help(u);
    refresh();
}

/* After a jump the target shows a third of the way down, with what leads
 * to it above, rather than on the pane's last line. */
static void reveal(ui *u, int p)
{
    ptv_view *v = &u->pane[p];
    int rows = pane_box(u, p).h - 1;
    if (rows > 0 && (v->sel < v->top || v->sel >= v->top + rows))
        v->top = v->sel - rows / 3 > 0 ? v->sel - rows / 3 : 0;
}

/* ---- actions ------------------------------------------------------------------------------------ */

/* The other pane follows the active one's selection through provenance. */
static void link_panes(ui *u)
{
    if (!u->split)
        return;
    ptv_view *a = &u->pane[u->active], *o = &u->pane[1 - u->active];
    if (!a->stage || !o->stage || a->stage->state != PTV_LOADED)
        return;
    int j = ptv_link(a->stage, ptv_view_item(a), o->stage);
    if (j >= 0) {
        ptv_view_select_item(o, j);
        reveal(u, 1 - u->active);
    }
}

static void sidebar_follow(ui *u)
{
    for (int i = 0; i < u->nsb; i++)
        if (u->sb[i].stage && u->sb[i].stage == active_view(u)->stage)
            u->sb_sel = i;
}

/* Shows stage s in pane p, selecting the item related to `from` (or item). */
static void open_stage(ui *u, int p, ptv_stage *s, const ptv_stage *from, int item)
{
    ptv_view *v = &u->pane[p];
    int target = item;
    if (from && item >= 0 && from != s)
        target = ptv_link(from, item, s);
    ptv_view_init(v, s);
    if (s->state != PTV_LOADED)
        say(u, true, "%s", s->error);
    if (target >= 0) {
        ptv_view_select_item(v, target);
        reveal(u, p);
    }
    if (s->compile != u->c) {
        u->c = s->compile;
        /* Both panes show one compile. */
        int other = 1 - p;
        if (u->split && u->pane[other].stage && u->pane[other].stage->compile != u->c) {
            ptv_stage *os = ptv_compile_stage(u->c, u->pane[other].stage->name);
            if (!os)
                os = u->c->stages[u->c->nstages > 1 ? 1 : 0];
            ptv_view_init(&u->pane[other], os);
        }
    }
    sidebar_follow(u);
}

static ptv_stage *neighbour_stage(const ptv_stage *s, int dir)
{
    ptv_compile *c = s->compile;
    int i = ptv_stage_index(c, s);
    return c->stages[((i + dir) % c->nstages + c->nstages) % c->nstages];
}

static void switch_stage(ui *u, int dir)
{
    ptv_view *v = active_view(u);
    if (!v->stage)
        return;
    ptv_stage *from = v->stage;
    int item = ptv_view_item(v);
    ptv_stage *to = neighbour_stage(from, dir);
    open_stage(u, u->active, to, from, item);
    if (to->state == PTV_LOADED)
        say(u, false, "stage %s of %s", to->name, to->compile->id);
    link_panes(u);
}

static void toggle_split(ui *u)
{
    u->split = !u->split;
    if (!u->split) {
        u->active = 0;
        if (u->focus == RIGHT)
            u->focus = LEFT;
        say(u, false, "single pane");
        return;
    }
    ptv_view *l = &u->pane[0];
    if (!l->stage)
        return;
    ptv_stage *right = neighbour_stage(l->stage, 1);
    ptv_view_init(&u->pane[1], right);
    u->active = 0;
    link_panes(u);
    say(u, false, "split: %s | %s, selection linked through provenance (Tab switches)",
        l->stage->name, right->name);
}

static void push_jump(ui *u)
{
    ptv_view *v = active_view(u);
    if (!v->stage)
        return;
    if (u->nhistory == 64) {
        memmove(u->history, u->history + 1, sizeof(jump) * 63);
        u->nhistory--;
    }
    u->history[u->nhistory++] = (jump){v->stage, ptv_view_item(v)};
}

static void go_back(ui *u)
{
    if (u->nhistory == 0) {
        say(u, false, "no earlier place to go back to");
        return;
    }
    jump j = u->history[--u->nhistory];
    open_stage(u, u->active, j.stage, NULL, j.item);
    u->focus = u->active ? RIGHT : LEFT;
    link_panes(u);
    say(u, false, "back to %s", j.stage->name);
}

static void follow_link(ui *u)
{
    if (u->d_sel >= u->detail.n)
        return;
    ptv_dline *l = &u->detail.lines[u->d_sel];
    if (l->kind == PTV_DL_SOURCE_HERE) {
        u->d_wide = !u->d_wide;
        u->d_dirty = true;
        say(u, false, u->d_wide ? "source: wide context" : "source: narrow context");
        return;
    }
    if (l->kind != PTV_DL_LINK || !l->stage)
        return;
    push_jump(u);
    ptv_stage *s = l->stage;
    int item = l->item;
    open_stage(u, u->active, s, NULL, item);
    u->focus = u->active ? RIGHT : LEFT;
    link_panes(u);
    if (s->items[item].name)
        say(u, false, "jumped to %s %%%s  (b goes back)", s->name, s->items[item].name);
    else
        say(u, false, "jumped to %s line %d  (b goes back)", s->name, s->items[item].line);
}

static void provenance(ui *u)
{
    ptv_view *v = active_view(u);
    int item = ptv_view_item(v);
    if (item < 0)
        return;
    if (ptv_compile_unloaded(v->stage->compile) > 0) {
        say(u, false, "loading the other stages of %s ...", v->stage->compile->id);
        draw(u);
        ptv_compile_load(v->stage->compile);
    }
    u->d_dirty = true;
    refresh_detail(u);
    int first = -1, n = 0;
    bool after_users = false;
    for (int i = 0; i < u->detail.n; i++) {
        const ptv_dline *l = &u->detail.lines[i];
        if (l->kind == PTV_DL_FIELD &&
            (strcmp(l->text, "came from") == 0 || strcmp(l->text, "became") == 0))
            after_users = true;
        if (after_users && l->kind == PTV_DL_LINK) {
            n++;
            if (first < 0)
                first = i;
        }
    }
    if (first < 0) {
        say(u, false, "provenance: no other stage refers to this item");
        return;
    }
    u->focus = DETAIL;
    u->d_sel = first;
    say(u, false, "provenance: %d place%s in other stages; Enter jumps, b goes back", n,
        n == 1 ? "" : "s");
}

/* Reads a line on the status row; false if cancelled (Esc). */
static bool prompt(ui *u, const char *label, char *buf, size_t size)
{
    size_t len = strlen(buf);
    curs_set(1);
    for (;;) {
        char line[1024];
        snprintf(line, sizeof line, "%s%s", label, buf);
        put_line(u->rows - 1, 0, u->cols, line, A_BOLD);
        move(u->rows - 1, (int)strlen(line) < u->cols ? (int)strlen(line) : u->cols - 1);
        refresh();
        int ch = getch();
        if (ch == '\n' || ch == KEY_ENTER || ch == '\r')
            break;
        if (ch == 27) {
            curs_set(0);
            return false;
        }
        if ((ch == KEY_BACKSPACE || ch == 127 || ch == 8) && len > 0)
            buf[--len] = 0;
        else if (ch >= 32 && ch < 256 && ch != 127 && len + 1 < size)
            buf[len++] = (char)ch, buf[len] = 0;
        else if (ch == KEY_RESIZE) {
            clearok(curscr, TRUE);
            draw(u);
        }
    }
    curs_set(0);
    return true;
}

static void search(ui *u, int dir)
{
    ptv_view *v = active_view(u);
    if (!u->query[0] || !v->stage)
        return;
    int item = ptv_view_search(v, u->query, dir);
    reveal(u, u->active);
    if (item < 0) {
        say(u, true, "search: '%s' not found in %s", u->query, v->stage->name);
        return;
    }
    int total = 0, rank = 0;
    for (int i = 0; i < v->stage->nitems; i++)
        if (ptv_item_matches(v->stage, i, u->query)) {
            total++;
            rank += i <= item;
        }
    if (u->focus != LEFT && u->focus != RIGHT)
        u->focus = u->active ? RIGHT : LEFT;
    link_panes(u);
    say(u, false, "search '%s': match %d of %d in %s (n next, N previous)", u->query, rank, total,
        v->stage->name);
}

static void render(ui *u)
{
    ptv_view *v = active_view(u);
    if (!v->stage || v->stage->state != PTV_LOADED)
        return;
    char path[512];
    snprintf(path, sizeof path, "ptview-%s-%s.svg", v->stage->compile->id, v->stage->name);
    if (!prompt(u, "render to (.svg .png .dot): ", path, sizeof path) || !path[0]) {
        say(u, false, "render cancelled");
        return;
    }
    ptv_render_opts o = {.out = path, .focus_stage = v->stage, .focus_item = ptv_view_item(v),
                         .depth = -1, .honour_collapse = true};
    char summary[1024];
    ptc_error err;
    say(u, false, "rendering %s ...", path);
    draw(u);
    if (ptv_render(v->stage, &o, summary, sizeof summary, &err) != 0)
        say(u, true, "render: %s", err.msg);
    else
        say(u, false, "rendered %s", summary);
}

/* ---- keys ------------------------------------------------------------------------------------ */

static void move_focus(ui *u, int dir)
{
    enum area order[4];
    int n = 0;
    if (sidebar_width(u))
        order[n++] = SIDEBAR;
    order[n++] = LEFT;
    if (u->split)
        order[n++] = RIGHT;
    if (detail_height(u))
        order[n++] = DETAIL;
    int at = 0;
    for (int i = 0; i < n; i++)
        if (order[i] == u->focus)
            at = i;
    u->focus = order[((at + dir) % n + n) % n];
    if (u->focus == LEFT || u->focus == RIGHT)
        u->active = u->focus == RIGHT;
    u->d_stage = NULL;
}

static void sidebar_key(ui *u, int ch, int page)
{
    switch (ch) {
    case KEY_UP: case 'k': sidebar_move(u, -1); break;
    case KEY_DOWN: case 'j': sidebar_move(u, 1); break;
    case KEY_PPAGE: sidebar_move(u, -page); break;
    case KEY_NPAGE: sidebar_move(u, page); break;
    case KEY_HOME: sidebar_move(u, -u->nsb); break;
    case KEY_END: sidebar_move(u, u->nsb); break;
    case '\n': case '\r': case KEY_ENTER: {
        sbrow *r = &u->sb[u->sb_sel];
        ptv_stage *s = r->stage ? r->stage : u->t->compiles[r->compile]->stages[0];
        ptv_view *v = active_view(u);
        open_stage(u, u->active, s, v->stage, ptv_view_item(v));
        u->focus = u->active ? RIGHT : LEFT;
        link_panes(u);
        if (s->state == PTV_LOADED)
            say(u, false, "opened %s of %s", s->name, s->compile->id);
        break;
    }
    }
}

static void pane_key(ui *u, int ch, int page)
{
    ptv_view *v = active_view(u);
    switch (ch) {
    case KEY_UP: case 'k': ptv_view_move(v, -1); break;
    case KEY_DOWN: case 'j': ptv_view_move(v, 1); break;
    case KEY_PPAGE: ptv_view_move(v, -page); break;
    case KEY_NPAGE: ptv_view_move(v, page); break;
    case KEY_HOME: v->sel = 0; break;
    case KEY_END: ptv_view_move(v, v->nlines); break;
    case '\n': case '\r': case KEY_ENTER:
        if (v->nlines > 0 && ptv_line_is_group(v, v->sel))
            ptv_view_toggle(v);
        else if (detail_height(u))
            u->focus = DETAIL;
        break;
    default: return;
    }
    link_panes(u);
}

static void detail_key(ui *u, int ch)
{
    int dir = ch == KEY_UP || ch == 'k' ? -1 : ch == KEY_DOWN || ch == 'j' ? 1 : 0;
    if (dir) {
        for (int i = u->d_sel + dir; i >= 0 && i < u->detail.n; i += dir)
            if (selectable(&u->detail.lines[i])) {
                u->d_sel = i;
                break;
            }
        return;
    }
    if (ch == KEY_NPAGE || ch == KEY_PPAGE) {
        int rows = detail_box(u).h - 1;
        u->d_top += ch == KEY_NPAGE ? rows : -rows;
        if (u->d_top > u->detail.n - rows)
            u->d_top = u->detail.n - rows;
        if (u->d_top < 0)
            u->d_top = 0;
        u->d_sel = u->d_top;
    } else if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        follow_link(u);
    }
}

static void collapse_all(ui *u, bool fold)
{
    ptv_view *v = active_view(u);
    if (!v->stage || v->stage->state != PTV_LOADED)
        return;
    ptv_stage_collapse_all(v->stage, fold);
    ptv_view_sync(v);
    say(u, false, fold ? "all groups folded (E unfolds)" : "all groups unfolded");
}

static void key(ui *u, int ch)
{
    if (ch == KEY_RESIZE) {
        /* The caller redraws at the new size, all of it (see draw()); help stays open. */
        clearok(curscr, TRUE);
        return;
    }
    if (u->help) {
        u->help = false;
        return;
    }
    int page = pane_box(u, 0).h - 2;
    switch (ch) {
    case 'q': u->quit = true; return;
    case '?': u->help = true; return;
    case '\t': move_focus(u, 1); return;
    case KEY_BTAB: move_focus(u, -1); return;
    case 's': switch_stage(u, 1); return;
    case 'S': switch_stage(u, -1); return;
    case 'v': toggle_split(u); return;
    case 'g': provenance(u); return;
    case 'b': case KEY_BACKSPACE: case 127: go_back(u); return;
    case 'r': render(u); return;
    case 'C': collapse_all(u, true); return;
    case 'E': collapse_all(u, false); return;
    case 'c': {
        ptv_view *v = active_view(u);
        if (!ptv_view_toggle(v))
            say(u, false, "not inside a module or kernel: nothing to fold");
        link_panes(u);
        return;
    }
    case '/': {
        char q[256] = "";
        if (prompt(u, "/", q, sizeof q) && q[0]) {
            snprintf(u->query, sizeof u->query, "%s", q);
            search(u, 1);
        }
        return;
    }
    case 'n': search(u, 1); return;
    case 'N': search(u, -1); return;
    }
    if (u->focus == SIDEBAR)
        sidebar_key(u, ch, page);
    else if (u->focus == DETAIL)
        detail_key(u, ch);
    else
        pane_key(u, ch, page);
}

/* Loads the next stage of the open compile (the background loader). */
static void load_one(ui *u)
{
    for (int i = 0; i < u->c->nstages; i++) {
        ptv_stage *s = u->c->stages[i];
        if (s->state != PTV_UNLOADED || s->kind == 'I')
            continue;
        ptv_stage_load(s);
        u->d_dirty = true; /* the detail's provenance grows */
        draw(u);
        return;
    }
}

/* ---- main loop ------------------------------------------------------------------------------- */

static ptv_stage *first_stage(ptv_trace *t, const ptv_tui_opts *o)
{
    ptv_compile *c = t->compiles[0];
    for (int i = 0; o->compile && i < t->ncompiles; i++)
        if (strcmp(t->compiles[i]->id, o->compile) == 0)
            c = t->compiles[i];
    ptv_stage *s = ptv_compile_stage(c, o->stage ? o->stage : "captured");
    return s ? s : c->stages[0];
}

int ptv_tui_run(ptv_trace *t, const ptv_tui_opts *o, ptc_error *err)
{
    if (t->ncompiles == 0 || t->compiles[0]->nstages == 0)
        return ptc_errorf(err, PTC_ERR_IO, "", "%s: no compiles to show", t->path);
    setlocale(LC_ALL, "");
    SCREEN *screen = newterm(NULL, stdout, stdin);
    if (!screen)
        return ptc_errorf(err, PTC_ERR_IO, "", "cannot open the terminal (TERM=%s)",
                          getenv("TERM") ? getenv("TERM") : "");
    set_escdelay(25);
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    ui u = {0};
    u.t = t;
    u.focus = LEFT;
    init_colors(&u, o->mono);
    u.utf8 = MB_CUR_MAX > 1;
    build_sidebar(&u, 30);
    ptv_stage *s = first_stage(t, o);
    open_stage(&u, 0, s, NULL, -1);
    if (s->state == PTV_LOADED) {
        /* Start on the first node rather than the graph header. */
        for (int i = 0; i < s->nitems; i++)
            if (s->items[i].kind == PTV_ITEM_NODE || s->items[i].kind == PTV_ITEM_KERNEL) {
                ptv_view_select_item(&u.pane[0], i);
                break;
            }
    }
    draw(&u);
    if (s->state == PTV_LOADED) {
        /* Time to the first full screen, redrawn with it in the status line. */
        say(&u, false, "opened in %.0f ms  ·  ? for help, q quits", ptc_now_ms() - o->started_ms);
        draw(&u);
    }
    while (!u.quit) {
        /* While stages of the open compile are unloaded, load one whenever
         * no key is waiting, so provenance fills in without a pause. */
        bool pending = ptv_compile_unloaded(u.c) > 0;
        timeout(pending ? 20 : -1);
        int ch = getch();
        if (ch == ERR) {
            if (pending)
                load_one(&u);
            continue;
        }
        key(&u, ch);
        draw(&u);
    }
    endwin();
    delscreen(screen);
    ptv_view_free(&u.pane[0]);
    ptv_view_free(&u.pane[1]);
    ptv_detail_free(&u.detail);
    free(u.sb);
    return 0;
}
