/* Internal to compiler/codegen/cpu: the IR emitter's state and helpers. */
#ifndef PTC_CPU_H
#define PTC_CPU_H

#include "codegen/asan.h"
#include "codegen/body.h"
#include "codegen/codegen.h"

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

typedef struct cg {
    PTC_EMITTER_UNION;        /* ctx, mod, b, fn, entry, s, k, W, vec_var, ... (body.h) */
    int lanes;                /* vector width of the kernel's vector loops */
    const char *vec_libm;     /* glibc libmvec's prefix for `lanes` f32 lanes
                               * ("_ZGVeN16v_"), or NULL: none on this host */
    LLVMValueRef params;      /* the i64 block: rng offset, params, status record address */
    int acc_set;              /* which set of lane accumulators an unrolled step uses */
    int unroll;               /* PTC_UNROLL_*: reductions' accumulator sets (codegen.h) */
    bool inject_wrong;        /* PTC_INJECT codegen:<op>:wrong: every stored value is off */
} cg;

/* Types and constants. */
LLVMTypeRef cg_vec(cg *c, LLVMTypeRef t, int w);       /* t itself when w == 1 */
LLVMValueRef cg_splat(cg *c, LLVMValueRef v, int w);   /* scalar -> vector (no-op for w 1) */
int cg_width(LLVMValueRef x);                          /* lanes of a value (1: scalar) */
LLVMValueRef cg_const_f(cg *c, LLVMTypeRef t, double v, int w);
LLVMValueRef cg_const_i(cg *c, LLVMTypeRef t, int64_t v, int w);
LLVMValueRef cg_call_intrinsic(cg *c, const char *name, LLVMTypeRef *over, int nover,
                               LLVMValueRef *args, int nargs);
/* Calls a scalar libm function on every lane. */
LLVMValueRef cg_libm(cg *c, const char *name, LLVMTypeRef scalar, LLVMValueRef *args, int nargs);
LLVMValueRef cg_alloca(cg *c, LLVMTypeRef t, const char *name);

/* Math on float / double values of any width (mathfn.c). */
LLVMValueRef cg_exp(cg *c, LLVMValueRef x, ptc_dtype dt);
LLVMValueRef cg_log(cg *c, LLVMValueRef x, ptc_dtype dt);
LLVMValueRef cg_tanh(cg *c, LLVMValueRef x, ptc_dtype dt);
LLVMValueRef cg_erf(cg *c, LLVMValueRef x, ptc_dtype dt);
LLVMValueRef cg_log1p(cg *c, LLVMValueRef x, ptc_dtype dt);
LLVMValueRef cg_expm1(cg *c, LLVMValueRef x, ptc_dtype dt);
/* a normal draw of the shared counter RNG (ops.h) */
LLVMValueRef cg_randn(cg *c, LLVMValueRef key, LLVMValueRef idx);

/* Emits the kernel function `name` into c->mod (emit.c). */
int cg_emit_kernel(cg *c, const char *name, ptc_error *err);

#endif /* PTC_CPU_H */
