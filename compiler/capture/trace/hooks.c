/* The trace's rows of the interpreter's hook table (interp.h, cap_hooks).
 *
 * The interpreter reaches tracing only through that table, so that it
 * includes nothing above its own layer; this file is the one place that says
 * which trace function answers which row. The tensor rows are the torch
 * layer's, and so is the trace's own table of torch hooks (cap_thooks,
 * defined with the torch objects in torch_objects.c, below every file that
 * reads it): cap_torch_hooks_install fills both.
 */
#include "capture/trace/trace.h"

/* cap_is_tensor is inline in trace.h; a row needs a function. */
static bool is_tensor(PyObject *obj)
{
    return cap_is_tensor(obj);
}

static PyObject *handled_stack(cap_trace *T)
{
    return T->exc_stack;
}

void cap_trace_hooks_install(void)
{
    cap_trace_hooks *h = &cap_hooks;
    h->brk = cap_t_break;
    h->break_again = cap_t_break_again;
    h->error = cap_trace_error;
    h->call = cap_t_call;
    h->expand_call_args = cap_t_expand_call_args;
    h->enter_frame = cap_t_enter_frame;
    h->note_function = cap_t_note_function;
    h->before_with = cap_t_before_with;
    h->gen_suspend = cap_gen_suspend;
    h->source_of = cap_t_source_of;
    h->is_constant = cap_is_constant;
    h->is_tensor = is_tensor;
    h->is_real_tensor = cap_t_is_real_tensor;
    h->is_outside_array = cap_t_is_outside_array;
    h->current = cap_t_current;
    h->flow = cap_t_flow;
    h->handled_stack = handled_stack;
    h->load_state = cap_t_load_state;
    h->closure_cell = cap_t_closure_cell;
    h->load_cell = cap_t_load_cell;
    h->write_cell = cap_t_write_cell;
    h->load_global = cap_t_load_global;
    h->global_write = cap_t_global_write;
    h->global_written = cap_t_global_written;
    h->getattr = cap_t_getattr;
    h->setattr = cap_t_setattr;
    h->getitem = cap_t_getitem;
    h->setitem = cap_t_setitem;
    h->dict_lookup = cap_t_dict_lookup;
    h->iter = cap_t_iter;
    h->next = cap_t_next;
    h->iter_sync = cap_t_iter_sync;
    h->next_sync = cap_t_next_sync;
    h->iter_contains = cap_t_iter_contains;
    h->yield_from = cap_t_yield_from;
    h->outside_mutator = cap_t_outside_mutator;
    h->list_iadd = cap_t_list_iadd;
    h->truth_guard = cap_t_truth_guard;
    h->contains_guard = cap_t_contains_guard;
    h->check_operands = cap_t_check_operands;
    h->check_format = cap_t_check_format;
}
