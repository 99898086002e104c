/* run_model: load a model exported by ptc.export and run it from C, with no
 * Python in the process.
 *
 *   run_model PACKAGE_DIR INPUTS.bin OUTPUTS.bin
 *
 * INPUTS.bin holds the model's inputs in order (a ptc tensor file, as
 * ptc._tensorfile writes them); the outputs are written the same way, named
 * by their paths in the model's result. Build against libptc (CMake target
 * `run_model`, or `cc run_model.c -I<prefix>/include/ptc -lptc -lgomp -lm`
 * plus LLVM's libraries).
 */
#include "export/export.h"

#include <stdio.h>
#include <stdlib.h>

static int fail(const ptc_error *err)
{
    char msg[2048];
    ptc_error_format(err, msg, sizeof msg);
    fprintf(stderr, "run_model: %s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: run_model PACKAGE_DIR INPUTS.bin OUTPUTS.bin\n");
        return 2;
    }
    ptc_error err;
    ptc_model *model = ptc_model_load(argv[1], NULL, &err);
    if (!model)
        return fail(&err);
    ptc_tensorfile in = {0};
    if (ptc_tensorfile_read(argv[2], &in, &err)) {
        ptc_model_free(model);
        return fail(&err);
    }
    int rc = 0, nout = ptc_model_noutputs(model);
    if (in.n != ptc_model_ninputs(model)) {
        fprintf(stderr, "run_model: %s holds %d tensors, the model takes %d inputs\n", argv[2],
                in.n, ptc_model_ninputs(model));
        rc = 2;
    }
    ptc_tensor *out = calloc((size_t)nout + 1, sizeof *out);
    const char **names = calloc((size_t)nout + 1, sizeof *names);
    if (rc == 0 && ptc_model_run(model, in.tensors, out, &err))
        rc = fail(&err);
    for (int i = 0; i < nout; i++)
        names[i] = ptc_model_output_name(model, i);
    if (rc == 0 && ptc_tensorfile_write(argv[3], out, names, nout, &err))
        rc = fail(&err);
    if (rc == 0)
        printf("run_model: %d outputs in %.1f ms of loading\n", nout, ptc_model_load_ms(model));
    for (int i = 0; i < nout; i++)
        if (out[i].storage || out[i].data)
            ptc_tensor_release(&out[i]);
    free(out);
    free(names);
    ptc_tensorfile_free(&in);
    ptc_model_free(model);
    return rc;
}
