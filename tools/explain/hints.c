/* Concrete advice: what to change, in the terms of the user's own code.
 *
 * breaks.def gives every break code a general hint; here each code gets a
 * sentence that names the expression under the caret, the function it is in
 * and what was called, so the advice reads as an edit to make. Recompiles
 * get advice by the kind of guard that kept failing. Nothing here depends on
 * timings, so advice is the same from run to run.
 */
#include "explain.h"

#include <string.h>

/* The expression under the caret ("" when the span is unknown). */
static const char *expr_of(ptc_arena *a, const xp_loc *l)
{
    size_t len = l->text ? strlen(l->text) : 0;
    if (l->col < 1 || (size_t)l->col > len)
        return "";
    size_t end = l->endcol > l->col && (size_t)l->endcol - 1 <= len ? (size_t)l->endcol - 1 : len;
    return ptc_arena_strndup(a, l->text + l->col - 1, end - (size_t)(l->col - 1));
}

/* "call to time.sleep" -> "time.sleep" */
static const char *callee(const char *detail)
{
    static const char *prefixes[] = {"call to ", "calling ", "call of "};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(detail, prefixes[i], strlen(prefixes[i])))
            return detail + strlen(prefixes[i]);
    return detail;
}

typedef struct advice {
    const char *code;
    const char *fmt; /* %1$s expression, %2$s function, %3$s detail, %4$s callee */
} advice;

static const advice table[] = {
    {"PTC-B001",
     "`%1$s` decides a Python branch from a tensor value inside %2$s. Compute both sides and "
     "select with torch.where(cond, a, b) (or multiply by a mask), or compute the condition "
     "before calling %2$s and pass it in as a Python bool."},
    {"PTC-B002",
     "`%1$s` turns a tensor into a Python number on every call of %2$s. Keep it a 0-dim tensor "
     "and use it in tensor ops; if it must steer Python code, compute it before calling %2$s "
     "and pass the number in."},
    {"PTC-B003",
     "`%1$s` hands tensor data to Python (%3$s). Do that work with tensor ops (an array passed "
     "in to %2$s becomes a tensor by torch.from_numpy, which ptc traces), or return the tensor "
     "and convert it after %2$s returns."},
    {"PTC-B004",
     "`%1$s` formats tensor values as text. Log shapes or dtypes instead (they are constants), "
     "or format after %2$s returns."},
    {"PTC-B005",
     "Remove `%1$s` from %2$s, or put it under `if DEBUG:` with a module-level flag that is "
     "False in production: ptc guards the flag and the branch disappears from the graph."},
    {"PTC-B006",
     "`%1$s` calls %4$s, which ptc cannot trace, between two graphs of %2$s. Call it before or "
     "after %2$s, or, if it is your own code, write it in Python so that ptc inlines it."},
    {"PTC-B007",
     "`%1$s` (%3$s) has no ptc op: it runs eagerly and splits %2$s into two graphs. Rewrite "
     "it with supported ops, or move it to the start or end of %2$s so it does not cut a graph "
     "in two."},
    {"PTC-B008",
     "`%1$s` makes a tensor whose shape depends on the data (%3$s). Keep shapes fixed: mask "
     "instead of selecting (torch.where(mask, x, 0), x * mask), and reduce over the masked "
     "tensor."},
    {"PTC-B009",
     "`%1$s` mutates a container that existed before the call. Build a new one inside %2$s and "
     "return it."},
    {"PTC-B010",
     "`%1$s` stores state on an object on every call of %2$s. Return the value instead, or keep "
     "the bookkeeping outside %2$s."},
    {"PTC-B011",
     "`%1$s` writes a global variable. Pass the state in and out of %2$s through arguments and "
     "return values."},
    {"PTC-B012",
     "`%1$s` modifies a tensor that belongs to the caller in place (%3$s). Use the out-of-place "
     "form (x = x + y instead of x += y), or clone the tensor first."},
    {"PTC-B013",
     "`%1$s` raises (%3$s). On an error path nothing needs to change; if it runs on ordinary "
     "calls, do not use exceptions for control flow in %2$s."},
    {"PTC-B014",
     "%3$s, so `%1$s` always runs eagerly. Remove the decorator if it should be compiled."},
    {"PTC-B015",
     "`%1$s` runs a generator ptc does not trace (one left unfinished inside a finally or "
     "with block, or a coroutine). Run the generator to its end or close() it inside %2$s, or return a "
     "list instead of yielding."},
    {"PTC-B016",
     "The with-statement at `%1$s` uses a context manager ptc does not model (%3$s). Move the "
     "block out of %2$s if it need not be inside."},
    {"PTC-B017",
     "`%1$s` runs code ptc's interpreter does not execute (%3$s). Move it out of %2$s."},
    {"PTC-B018",
     "The call stack at `%1$s` is deeper than ptc.config.inline_depth. Raise the limit or "
     "flatten the recursion."},
    {"PTC-B019",
     "`%1$s` needs autograd state (%3$s). Call backward outside the compiled function and "
     "compile only the forward."},
    {"PTC-B020", "Move `%1$s` to the top of its module: an import inside %2$s runs for real."},
    {"PTC-B021",
     "`%1$s` iterates over an object ptc cannot enumerate (%3$s). Iterate over a list, tuple, "
     "range or nn.ModuleList instead."},
    {"PTC-B022", "`%1$s` failed while tracing (%3$s). If eager PyTorch runs this line, it is a ptc "
                 "limitation: report it with the repro PTC_REPRO writes."},
    {"PTC-B023", "`%1$s` works on a tensor subclass (%3$s). Convert it to a plain tensor "
                 "(t.as_subclass(torch.Tensor)) before calling %2$s."},
    {"PTC-B024", "`%1$s` sets a tensor attribute (%3$s). Set it outside %2$s."},
    {"PTC-B025",
     "A generator or iterator made inside %2$s is alive across the break at `%1$s`, so the "
     "surrounding call runs as its own frame. Build a list before the code that breaks."},
    {"PTC-B026",
     "`%1$s` makes a tensor ptc cannot hold (%3$s). Keep such tensors outside %2$s, or convert "
     "them first (torch.view_as_real for complex tensors)."},
    {"PTC-B027",
     "`%1$s` splits the graph on purpose (%3$s). ptc._split.graph_cut cuts a graph into pieces, "
     "one autograd node each, without a break."},
};

/* The function the break is in: the innermost frame of the inlined stack
 * ("Model.forward (f.py:40) > stabilize (f.py:16)" -> "stabilize"), else
 * the compiled frame. */
static const char *innermost(ptc_arena *a, const xp_site *s)
{
    /* Frames are joined by " > "; a file name may hold a '>' ("<string>"). */
    const char *last = s->stack;
    for (const char *p = last ? strstr(last, " > ") : NULL; p; p = strstr(p + 3, " > "))
        last = p + 3;
    if (last) {
        size_t n = strcspn(last, " (");
        if (n)
            return ptc_arena_strndup(a, last, n);
    }
    return s->frame && *s->frame ? s->frame : "the compiled function";
}

const char *xp_advice(ptc_arena *a, const xp_site *s)
{
    const char *expr = expr_of(a, &s->loc);
    if (!*expr)
        expr = s->detail;
    const char *fn = innermost(a, s);
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        if (strcmp(table[i].code, s->code))
            continue;
        ptc_buf b = {0};
        /* Positional arguments by hand: the formats use each at most twice. */
        const char *args[4] = {expr, fn, s->detail, callee(s->detail)};
        for (const char *p = table[i].fmt; *p; p++) {
            if (p[0] == '%' && p[1] >= '1' && p[1] <= '4' && p[2] == '$' && p[3] == 's') {
                ptc_buf_puts(&b, args[p[1] - '1']);
                p += 3;
            } else {
                ptc_buf_putc(&b, *p);
            }
        }
        const char *out = ptc_arena_strdup(a, b.data);
        ptc_buf_free(&b);
        return out;
    }
    return s->hint;
}

const char *xp_recompile_advice(const xp_recompile *rc)
{
    const char *k = rc->kind;
    if (!strcmp(k, "tensor"))
        return "Every new input shape compiles a new graph and, past the limit, the function runs eagerly. "
               "Pad or bucket inputs to a few fixed sizes, or keep the shape constant.";
    if (!strcmp(k, "=="))
        return "A Python value is baked into the graph as a constant and changes between calls. Pass it as a "
               "tensor (torch.tensor(v)) so it becomes a graph input, or keep it constant.";
    if (!strcmp(k, "is"))
        return "A different object arrives on every call. Create it once, outside the loop, and reuse it.";
    if (!strcmp(k, "type is"))
        return "The argument's type changes between calls. Pass the same type every time.";
    if (!strcmp(k, "len =="))
        return "A list or tuple changes length between calls. Stack it into one tensor, or keep its length "
               "fixed.";
    if (!strcmp(k, "size relation") && strstr(rc->expected, " == "))
        return "A use of a symbolic size needs its value (the line above: a loop bound, an index, a hash), so "
               "every size compiles a new graph. Keep that value out of Python control flow (tensor ops "
               "take symbolic sizes), or mark the dimension static.";
    if (!strcmp(k, "size relation") || !strcmp(k, "size is"))
        return "The code relied on a relation of sizes (a branch on a size, or two sizes being equal) that "
               "this call breaks: each side of it compiles once.";
    if (!strcmp(k, "grad mode"))
        return "Grad mode changes between calls. Compile separate functions for training and inference, or "
               "keep the mode fixed.";
    return "The same guard fails on every call. Keep the value it checks stable between calls.";
}
