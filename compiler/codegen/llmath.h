/* LLVM IR for the arithmetic the CPU and CUDA code generators share
 * (llmath.c): integer division and remainder without traps, torch's
 * floating floor division and remainder, comparisons, NaN-propagating
 * min/max, small constant powers, intrinsic calls. Everything works on
 * scalars and vectors alike: types come from the operands and constants are
 * splatted to their width. What differs between the targets stays with
 * each generator (fmod, general pow, loads and stores, loops).
 */
#ifndef PTC_CODEGEN_LLMATH_H
#define PTC_CODEGEN_LLMATH_H

#include "lower/lower.h"

#include <llvm-c/Core.h>
#include <stdbool.h>

/* Lanes of a value (1: scalar). */
int ptc_ll_width(LLVMValueRef x);
/* A scalar broadcast to w lanes (a vector or w == 1: itself). */
LLVMValueRef ptc_ll_splat(LLVMBuilderRef b, LLVMValueRef v, int w);
/* A scalar constant as a w-lane constant vector (w == 1: itself; w <= 64). */
LLVMValueRef ptc_ll_splat_const(LLVMValueRef k, int w);
/* An alloca of t at the top of block entry (where LLVM promotes it to a
 * register); the builder goes back to where it was. */
LLVMValueRef ptc_ll_alloca(LLVMBuilderRef b, LLVMBasicBlockRef entry, LLVMTypeRef t,
                           const char *name);
/* A constant of type t (scalar or vector): f for floats, i for integers. */
LLVMValueRef ptc_ll_const(LLVMTypeRef t, double f, int64_t i);
/* A call of the intrinsic `name` overloaded on over[0..nover). */
LLVMValueRef ptc_ll_intrinsic(LLVMModuleRef m, LLVMBuilderRef b, const char *name,
                              LLVMTypeRef *over, int nover, LLVMValueRef *args, int nargs);
LLVMValueRef ptc_ll_isnan(LLVMBuilderRef b, LLVMValueRef x);
/* PTC_L_DIV (truncating), PTC_L_FLOOR_DIVIDE, PTC_L_REMAINDER or PTC_L_FMOD
 * (truncating) on integers;
 * a zero divisor gives 0. */
LLVMValueRef ptc_ll_int_divmod(LLVMBuilderRef b, int op, bool is_unsigned, LLVMValueRef x,
                               LLVMValueRef y);
/* PTC_L_FLOOR_DIVIDE or PTC_L_REMAINDER on floats as torch computes them,
 * given mod = fmod(x, y) (the target's own). */
LLVMValueRef ptc_ll_float_floordiv_rem(LLVMModuleRef m, LLVMBuilderRef b, int op, LLVMValueRef x,
                                       LLVMValueRef y, LLVMValueRef mod);
/* maximum / minimum: a NaN in x propagates (as torch's). */
LLVMValueRef ptc_ll_minmax(LLVMBuilderRef b, bool max, ptc_dtype dt, LLVMValueRef x,
                           LLVMValueRef y);
/* x ** e for the exponents with an exact short form (1, 2, 3, 0.5, -1) on
 * floats, or NULL. */
LLVMValueRef ptc_ll_pow_const(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, double e);

/* The pieces of the math functions both targets emit the same way, on f32
 * or f64 lanes (constants take x's type): x * y + z (llvm.fmuladd, fused
 * where the target has it), Horner's coeffs[0] x^(n-1) + ... + coeffs[n-1],
 * and Cephes' logf (about 1 ulp; subnormals, 0, inf, nan and negatives by
 * selects, no branches). */
LLVMValueRef ptc_ll_fmuladd(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y,
                            LLVMValueRef z);
LLVMValueRef ptc_ll_poly(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, const double *coeffs,
                         int n);
LLVMValueRef ptc_ll_log_f32(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x);

/* bf16 as integer arithmetic on its bits (i16 lanes), for targets without a
 * conversion instruction: f32 -> bf16 rounds to nearest even and quiets a
 * nan (as ptc_f32_to_bf16), bf16 -> f32 is exact. */
LLVMValueRef ptc_ll_f32_to_bf16_bits(LLVMBuilderRef b, LLVMValueRef v);
LLVMValueRef ptc_ll_bf16_bits_to_f32(LLVMBuilderRef b, LLVMValueRef v);

/* f32 sin(x) or cos(x) of any width as straight-line code (llmath.c): within
 * 2.5 ulp for |x| <= PTC_LL_SINCOS_RANGE, meaningless beyond (the caller
 * takes another path there); nan for nan. */
#define PTC_LL_SINCOS_RANGE 1000.0
LLVMValueRef ptc_ll_sincos(LLVMModuleRef m, LLVMBuilderRef b, LLVMValueRef x, bool cosine);

/* A CHECK entry (lower.h): ok ? v : 0, and where ok is false in some lane,
 * the first such lane's (code, v, bound) written to the status record
 * (ptc_check_status, i64 words) unless an earlier failure holds it. The hot
 * path is the select and one branch that is never taken; the report is in a
 * cold block, where status_ptr(ctx) is called to get the record's address
 * (so a kernel without a failing check never reads it). */
LLVMValueRef ptc_ll_check(LLVMModuleRef m, LLVMBuilderRef b, int64_t code, LLVMValueRef ok,
                          LLVMValueRef v, LLVMValueRef bound, LLVMValueRef (*status_ptr)(void *ctx),
                          void *ctx);

#endif
