/* Constants and calls for the CPU code generator (the dtypes' compute and
 * storage types are body.c's): constants splatted to a vector width,
 * intrinsic and libm calls (libm lane by lane, as it has no vector entry
 * points), and allocas placed in the entry block where LLVM's mem2reg finds
 * them.
 */
#include "codegen/cpu/cpu.h"
#include "codegen/llmath.h"

#include <string.h>

/* ---- types and constants ------------------------------------------------------ */

LLVMTypeRef cg_vec(cg *c, LLVMTypeRef t, int w)
{
    (void)c;
    return w == 1 ? t : LLVMVectorType(t, (unsigned)w);
}

LLVMValueRef cg_splat(cg *c, LLVMValueRef v, int w)
{
    return ptc_ll_splat(c->b, v, w);
}

LLVMValueRef cg_const_f(cg *c, LLVMTypeRef t, double v, int w)
{
    (void)c;
    return ptc_ll_splat_const(LLVMConstReal(t, v), w);
}

LLVMValueRef cg_const_i(cg *c, LLVMTypeRef t, int64_t v, int w)
{
    (void)c;
    return ptc_ll_splat_const(LLVMConstInt(t, (unsigned long long)v, 1), w);
}

int cg_width(LLVMValueRef x)
{
    return ptc_ll_width(x);
}

LLVMValueRef cg_call_intrinsic(cg *c, const char *name, LLVMTypeRef *over, int nover,
                               LLVMValueRef *args, int nargs)
{
    return ptc_ll_intrinsic(c->mod, c->b, name, over, nover, args, nargs);
}

LLVMValueRef cg_libm(cg *c, const char *name, LLVMTypeRef scalar, LLVMValueRef *args, int nargs)
{
    LLVMTypeRef params[3] = {scalar, scalar, scalar};
    LLVMTypeRef ft = LLVMFunctionType(scalar, params, (unsigned)nargs, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn)
        fn = LLVMAddFunction(c->mod, name, ft);
    int w = cg_width(args[0]);
    if (w == 1)
        return LLVMBuildCall2(c->b, ft, fn, args, (unsigned)nargs, "");
    LLVMValueRef out = LLVMGetPoison(LLVMTypeOf(args[0]));
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(c->i32, (unsigned)i, 0);
        LLVMValueRef a[3];
        for (int k = 0; k < nargs; k++)
            a[k] = LLVMBuildExtractElement(c->b, args[k], lane, "");
        LLVMValueRef r = LLVMBuildCall2(c->b, ft, fn, a, (unsigned)nargs, "");
        out = LLVMBuildInsertElement(c->b, out, r, lane, "");
    }
    return out;
}

LLVMValueRef cg_alloca(cg *c, LLVMTypeRef t, const char *name)
{
    return ptc_ll_alloca(c->b, c->entry, t, name);
}
