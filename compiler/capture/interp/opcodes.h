/* The opcode table of the capture interpreter: every opcode name of CPython
 * 3.11 and 3.12, each mapped to one handler. Numbers and inline-cache sizes are
 * not written here: cap_opcodes_init reads them from `dis`/`opcode` of the
 * running interpreter, so this table is the only place that knows about
 * per-version differences (which names exist, which jump backwards).
 *
 * X(name, handler, flags)
 *   name     the opcode's name in dis.opmap
 *   handler  the handler id (H_<handler>): several names may share one
 *   flags    J_FWD / J_BACK: relative jump forward / backward (its target is
 *            computed at decode time); NOTRACE: never valid in the function
 *            bodies ptc interprets (generators, coroutines, except*), such
 *            code runs untouched by CPython.
 */
#ifndef PTC_CAP_OPCODES_H
#define PTC_CAP_OPCODES_H

#define J_FWD 0x1
#define J_BACK 0x2
#define NOTRACE 0x4

#define CAP_OPCODES(X)                                                          \
    X(CACHE, NOP, 0)                                                            \
    X(NOP, NOP, 0)                                                              \
    X(RESUME, NOP, 0)                                                           \
    X(EXTENDED_ARG, NOP, 0)                                                     \
    X(PRECALL, NOP, 0)                                                          \
    X(RESERVED, NOP, 0)                                                         \
    X(POP_TOP, POP_TOP, 0)                                                      \
    X(END_FOR, END_FOR, 0)                                                      \
    X(PUSH_NULL, PUSH_NULL, 0)                                                  \
    X(COPY, COPY, 0)                                                            \
    X(SWAP, SWAP, 0)                                                            \
    X(UNARY_POSITIVE, UNARY_POSITIVE, 0)                                        \
    X(UNARY_NEGATIVE, UNARY_NEGATIVE, 0)                                        \
    X(UNARY_NOT, UNARY_NOT, 0)                                                  \
    X(UNARY_INVERT, UNARY_INVERT, 0)                                            \
    X(BINARY_OP, BINARY_OP, 0)                                                  \
    X(COMPARE_OP, COMPARE_OP, 0)                                                \
    X(IS_OP, IS_OP, 0)                                                          \
    X(CONTAINS_OP, CONTAINS_OP, 0)                                              \
    X(BINARY_SUBSCR, BINARY_SUBSCR, 0)                                          \
    X(BINARY_SLICE, BINARY_SLICE, 0)                                            \
    X(STORE_SUBSCR, STORE_SUBSCR, 0)                                            \
    X(STORE_SLICE, STORE_SLICE, 0)                                              \
    X(DELETE_SUBSCR, DELETE_SUBSCR, 0)                                          \
    X(LOAD_CONST, LOAD_CONST, 0)                                                \
    X(RETURN_CONST, RETURN_CONST, 0)                                            \
    X(RETURN_VALUE, RETURN_VALUE, 0)                                            \
    X(LOAD_FAST, LOAD_FAST, 0)                                                  \
    X(LOAD_FAST_CHECK, LOAD_FAST, 0)                                            \
    X(LOAD_FAST_AND_CLEAR, LOAD_FAST_AND_CLEAR, 0)                              \
    X(STORE_FAST, STORE_FAST, 0)                                                \
    X(DELETE_FAST, DELETE_FAST, 0)                                              \
    X(MAKE_CELL, MAKE_CELL, 0)                                                  \
    X(COPY_FREE_VARS, COPY_FREE_VARS, 0)                                        \
    X(LOAD_CLOSURE, LOAD_CLOSURE, 0)                                            \
    X(LOAD_DEREF, LOAD_DEREF, 0)                                                \
    X(STORE_DEREF, STORE_DEREF, 0)                                              \
    X(DELETE_DEREF, DELETE_DEREF, 0)                                            \
    X(LOAD_CLASSDEREF, LOAD_FROM_DICT_OR_DEREF, 0)                              \
    X(LOAD_FROM_DICT_OR_DEREF, LOAD_FROM_DICT_OR_DEREF, 0)                      \
    X(LOAD_GLOBAL, LOAD_GLOBAL, 0)                                              \
    X(STORE_GLOBAL, STORE_GLOBAL, 0)                                            \
    X(DELETE_GLOBAL, DELETE_GLOBAL, 0)                                          \
    X(LOAD_NAME, LOAD_NAME, 0)                                                  \
    X(STORE_NAME, STORE_NAME, 0)                                                \
    X(DELETE_NAME, DELETE_NAME, 0)                                              \
    X(LOAD_LOCALS, LOAD_LOCALS, 0)                                              \
    X(LOAD_FROM_DICT_OR_GLOBALS, LOAD_FROM_DICT_OR_GLOBALS, 0)                  \
    X(LOAD_ATTR, LOAD_ATTR, 0)                                                  \
    X(LOAD_METHOD, LOAD_METHOD, 0)                                              \
    X(LOAD_SUPER_ATTR, LOAD_SUPER_ATTR, 0)                                      \
    X(STORE_ATTR, STORE_ATTR, 0)                                                \
    X(DELETE_ATTR, DELETE_ATTR, 0)                                              \
    X(BUILD_TUPLE, BUILD_TUPLE, 0)                                              \
    X(BUILD_LIST, BUILD_LIST, 0)                                                \
    X(BUILD_SET, BUILD_SET, 0)                                                  \
    X(BUILD_MAP, BUILD_MAP, 0)                                                  \
    X(BUILD_CONST_KEY_MAP, BUILD_CONST_KEY_MAP, 0)                              \
    X(BUILD_STRING, BUILD_STRING, 0)                                            \
    X(BUILD_SLICE, BUILD_SLICE, 0)                                              \
    X(LIST_APPEND, LIST_APPEND, 0)                                              \
    X(SET_ADD, SET_ADD, 0)                                                      \
    X(MAP_ADD, MAP_ADD, 0)                                                      \
    X(LIST_EXTEND, LIST_EXTEND, 0)                                              \
    X(SET_UPDATE, SET_UPDATE, 0)                                                \
    X(DICT_UPDATE, DICT_UPDATE, 0)                                              \
    X(DICT_MERGE, DICT_MERGE, 0)                                                \
    X(LIST_TO_TUPLE, LIST_TO_TUPLE, 0)                                          \
    X(UNPACK_SEQUENCE, UNPACK_SEQUENCE, 0)                                      \
    X(UNPACK_EX, UNPACK_EX, 0)                                                  \
    X(FORMAT_VALUE, FORMAT_VALUE, 0)                                            \
    X(GET_LEN, GET_LEN, 0)                                                      \
    X(MATCH_MAPPING, MATCH_MAPPING, 0)                                          \
    X(MATCH_SEQUENCE, MATCH_SEQUENCE, 0)                                        \
    X(MATCH_KEYS, MATCH_KEYS, 0)                                                \
    X(MATCH_CLASS, MATCH_CLASS, 0)                                              \
    X(JUMP_FORWARD, JUMP, J_FWD)                                                \
    X(JUMP_BACKWARD, JUMP, J_BACK)                                              \
    X(JUMP_BACKWARD_NO_INTERRUPT, JUMP, J_BACK)                                 \
    X(POP_JUMP_FORWARD_IF_FALSE, POP_JUMP_IF_FALSE, J_FWD)                      \
    X(POP_JUMP_BACKWARD_IF_FALSE, POP_JUMP_IF_FALSE, J_BACK)                    \
    X(POP_JUMP_IF_FALSE, POP_JUMP_IF_FALSE, J_FWD)                              \
    X(POP_JUMP_FORWARD_IF_TRUE, POP_JUMP_IF_TRUE, J_FWD)                        \
    X(POP_JUMP_BACKWARD_IF_TRUE, POP_JUMP_IF_TRUE, J_BACK)                      \
    X(POP_JUMP_IF_TRUE, POP_JUMP_IF_TRUE, J_FWD)                                \
    X(POP_JUMP_FORWARD_IF_NONE, POP_JUMP_IF_NONE, J_FWD)                        \
    X(POP_JUMP_BACKWARD_IF_NONE, POP_JUMP_IF_NONE, J_BACK)                      \
    X(POP_JUMP_IF_NONE, POP_JUMP_IF_NONE, J_FWD)                                \
    X(POP_JUMP_FORWARD_IF_NOT_NONE, POP_JUMP_IF_NOT_NONE, J_FWD)                \
    X(POP_JUMP_BACKWARD_IF_NOT_NONE, POP_JUMP_IF_NOT_NONE, J_BACK)              \
    X(POP_JUMP_IF_NOT_NONE, POP_JUMP_IF_NOT_NONE, J_FWD)                        \
    X(JUMP_IF_FALSE_OR_POP, JUMP_IF_FALSE_OR_POP, J_FWD)                        \
    X(JUMP_IF_TRUE_OR_POP, JUMP_IF_TRUE_OR_POP, J_FWD)                          \
    X(GET_ITER, GET_ITER, 0)                                                    \
    X(FOR_ITER, FOR_ITER, J_FWD)                                                \
    X(CALL, CALL, 0)                                                            \
    X(KW_NAMES, KW_NAMES, 0)                                                    \
    X(CALL_FUNCTION_EX, CALL_FUNCTION_EX, 0)                                    \
    X(CALL_INTRINSIC_1, CALL_INTRINSIC_1, 0)                                    \
    X(CALL_INTRINSIC_2, CALL_INTRINSIC_2, 0)                                    \
    X(MAKE_FUNCTION, MAKE_FUNCTION, 0)                                          \
    X(LOAD_BUILD_CLASS, LOAD_BUILD_CLASS, 0)                                    \
    X(LOAD_ASSERTION_ERROR, LOAD_ASSERTION_ERROR, 0)                            \
    X(IMPORT_NAME, IMPORT_NAME, 0)                                              \
    X(IMPORT_FROM, IMPORT_FROM, 0)                                              \
    X(SETUP_ANNOTATIONS, SETUP_ANNOTATIONS, 0)                                  \
    X(BEFORE_WITH, BEFORE_WITH, 0)                                              \
    X(WITH_EXCEPT_START, WITH_EXCEPT_START, 0)                                  \
    X(PUSH_EXC_INFO, PUSH_EXC_INFO, 0)                                          \
    X(POP_EXCEPT, POP_EXCEPT, 0)                                                \
    X(CHECK_EXC_MATCH, CHECK_EXC_MATCH, 0)                                      \
    X(RERAISE, RERAISE, 0)                                                      \
    X(RAISE_VARARGS, RAISE_VARARGS, 0)                                          \
    X(PRINT_EXPR, UNSUPPORTED, NOTRACE)                                         \
    X(IMPORT_STAR, UNSUPPORTED, NOTRACE)                                        \
    X(CHECK_EG_MATCH, UNSUPPORTED, NOTRACE)                                     \
    X(PREP_RERAISE_STAR, UNSUPPORTED, NOTRACE)                                  \
    X(RETURN_GENERATOR, RETURN_GENERATOR, 0)                                    \
    X(YIELD_VALUE, YIELD_VALUE, 0)                                              \
    X(SEND, SEND, J_FWD)                                                        \
    X(END_SEND, END_SEND, 0)                                                    \
    X(CLEANUP_THROW, CLEANUP_THROW, 0)                                          \
    X(GET_YIELD_FROM_ITER, GET_ITER, 0)                                         \
    X(GET_AWAITABLE, UNSUPPORTED, NOTRACE)                                      \
    X(GET_AITER, UNSUPPORTED, NOTRACE)                                          \
    X(GET_ANEXT, UNSUPPORTED, NOTRACE)                                          \
    X(BEFORE_ASYNC_WITH, UNSUPPORTED, NOTRACE)                                  \
    X(END_ASYNC_FOR, UNSUPPORTED, NOTRACE)                                      \
    X(ASYNC_GEN_WRAP, UNSUPPORTED, NOTRACE)                                     \
    X(INTERPRETER_EXIT, UNSUPPORTED, NOTRACE)

/* Handler ids: one per distinct handler name above. */
#define CAP_HANDLERS(X)                                                         \
    X(NOP) X(POP_TOP) X(END_FOR) X(PUSH_NULL) X(COPY) X(SWAP)                   \
    X(UNARY_POSITIVE) X(UNARY_NEGATIVE) X(UNARY_NOT) X(UNARY_INVERT)            \
    X(BINARY_OP) X(COMPARE_OP) X(IS_OP) X(CONTAINS_OP)                          \
    X(BINARY_SUBSCR) X(BINARY_SLICE) X(STORE_SUBSCR) X(STORE_SLICE)             \
    X(DELETE_SUBSCR) X(LOAD_CONST) X(RETURN_CONST) X(RETURN_VALUE)              \
    X(LOAD_FAST) X(LOAD_FAST_AND_CLEAR) X(STORE_FAST) X(DELETE_FAST)            \
    X(MAKE_CELL) X(COPY_FREE_VARS) X(LOAD_CLOSURE) X(LOAD_DEREF)                \
    X(STORE_DEREF) X(DELETE_DEREF) X(LOAD_FROM_DICT_OR_DEREF)                   \
    X(LOAD_GLOBAL) X(STORE_GLOBAL) X(DELETE_GLOBAL) X(LOAD_NAME)                \
    X(STORE_NAME) X(DELETE_NAME) X(LOAD_LOCALS) X(LOAD_FROM_DICT_OR_GLOBALS)    \
    X(LOAD_ATTR) X(LOAD_METHOD) X(LOAD_SUPER_ATTR) X(STORE_ATTR)                \
    X(DELETE_ATTR) X(BUILD_TUPLE) X(BUILD_LIST) X(BUILD_SET) X(BUILD_MAP)       \
    X(BUILD_CONST_KEY_MAP) X(BUILD_STRING) X(BUILD_SLICE) X(LIST_APPEND)        \
    X(SET_ADD) X(MAP_ADD) X(LIST_EXTEND) X(SET_UPDATE) X(DICT_UPDATE)           \
    X(DICT_MERGE) X(LIST_TO_TUPLE) X(UNPACK_SEQUENCE) X(UNPACK_EX)              \
    X(FORMAT_VALUE) X(GET_LEN) X(MATCH_MAPPING) X(MATCH_SEQUENCE)               \
    X(MATCH_KEYS) X(MATCH_CLASS) X(JUMP) X(POP_JUMP_IF_FALSE)                   \
    X(POP_JUMP_IF_TRUE) X(POP_JUMP_IF_NONE) X(POP_JUMP_IF_NOT_NONE)             \
    X(JUMP_IF_FALSE_OR_POP) X(JUMP_IF_TRUE_OR_POP) X(GET_ITER) X(FOR_ITER)      \
    X(CALL) X(KW_NAMES) X(CALL_FUNCTION_EX) X(CALL_INTRINSIC_1)                 \
    X(RETURN_GENERATOR) X(YIELD_VALUE) X(SEND) X(END_SEND) X(CLEANUP_THROW)     \
    X(CALL_INTRINSIC_2) X(MAKE_FUNCTION) X(LOAD_BUILD_CLASS)                    \
    X(LOAD_ASSERTION_ERROR) X(IMPORT_NAME) X(IMPORT_FROM)                       \
    X(SETUP_ANNOTATIONS) X(BEFORE_WITH) X(WITH_EXCEPT_START) X(PUSH_EXC_INFO)   \
    X(POP_EXCEPT) X(CHECK_EXC_MATCH) X(RERAISE) X(RAISE_VARARGS)                \
    X(UNSUPPORTED)

typedef enum {
#define X(h) H_##h,
    CAP_HANDLERS(X)
#undef X
    H_COUNT
} cap_handler_id;

#endif /* PTC_CAP_OPCODES_H */
