/* Internal to compiler/codegen/cpu: the IR emitter's state and helpers. */
#ifndef PTC_CPU_H
#define PTC_CPU_H

#include "codegen/codegen.h"

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

typedef struct cg {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMValueRef fn; /* the kernel body function */
    const ptc_schedule *s;
    const ptc_kernel *k;
    int lanes;                /* vector width of the kernel's vector loops */
    LLVMValueRef *bufptr;     /* per buffer id: base address (NULL: unused) */
    LLVMValueRef *param;      /* per kernel param: i64 */
    LLVMValueRef params;      /* the i64 block: rng offset, params, status record address */
    LLVMValueRef rng_offset;  /* i64 */
    LLVMValueRef vars[3 * PTC_MAX_DIMS]; /* i64 value of each kernel variable */
    int vec_var;              /* the variable of the current vector loop, -1 none */
    int W;                    /* lanes of values being emitted (1: scalar) */
    LLVMValueRef lane_mask;   /* <W x i1> active lanes of a masked tail, or NULL */
    int acc_set;              /* which set of lane accumulators an unrolled step uses */
    LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, void_;
    LLVMBasicBlockRef entry;  /* allocas go here */
    bool inject_wrong;        /* PTC_INJECT codegen:<op>:wrong: every stored value is off */
} cg;

/* Types and constants. */
LLVMTypeRef cg_compute_type(cg *c, ptc_dtype dt);      /* scalar: f16 -> float, bool -> i1 */
LLVMTypeRef cg_storage_type(cg *c, ptc_dtype dt);      /* scalar: f16 -> half, bool -> i8 */
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
/* uniform [0,1) and normal draws of the shared counter RNG (ops.h) */
LLVMValueRef cg_rng_uniform(cg *c, LLVMValueRef key, LLVMValueRef idx);
LLVMValueRef cg_rng_key(cg *c, int64_t seed);
LLVMValueRef cg_randn(cg *c, LLVMValueRef key, LLVMValueRef idx, ptc_dtype dt);

/* Emits the kernel function `name` into c->mod (emit.c). */
int cg_emit_kernel(cg *c, const char *name, ptc_error *err);

#endif /* PTC_CPU_H */
