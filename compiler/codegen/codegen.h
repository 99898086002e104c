/* ptc codegen: kernels into machine code, and the on-disk kernel cache.
 *
 * Owns: the CPU backend (compiler/codegen/cpu: LLVM IR for each kernel of a
 * schedule, optimised and compiled for the host CPU with the LLVM C API, then
 * linked into one process-wide ORC LLJIT), the kernel cache (compiled objects
 * keyed by the kernel's loop IR, the target and the ptc version), and the
 * description of the host target. LLVM types never leave this module: other
 * modules see kernels as plain C function pointers. The GPU backend
 * (compiler/codegen/cuda) turns each kernel into PTX for NVPTX targets
 * together with its launch plan; loading and launching are the runtime's.
 * Both backends emit kernel bodies with one scalar-body emitter (body.c,
 * with a table of what each target does its own way) and share the LLVM IR
 * helpers of llmath.c; each keeps its loops, memory accesses and reductions.
 */
#ifndef PTC_CODEGEN_H
#define PTC_CODEGEN_H

#include "lower/lower.h"

/* A compiled kernel: runs outer iterations [begin, end) of the kernel's
 * parallel range. bufs[i] is the element-0 address of kernel arg i; params[0]
 * is the run's RNG offset, params[1 + j] the value of the kernel's symbolic
 * parameter j. */
typedef void (*ptc_kernel_fn)(int64_t begin, int64_t end, void *const *bufs, const int64_t *params);

typedef struct ptc_cpu_kernel {
    ptc_kernel_fn fn;
    void *entry; /* the JIT registry entry (reference counted) */
    bool cached; /* came from the disk cache or was already loaded */
} ptc_cpu_kernel;

typedef struct ptc_codegen_opts {
    bool no_cache;          /* neither read nor write the disk cache */
    const char *kernel_dir; /* the cache directory of this compile instead of
                             * ptc_cache_dir() (an exported package's kernels):
                             * every kernel's object is read from it or built and
                             * written to it, also one this process has loaded */
    bool want_text;         /* return the LLVM IR of each kernel */
    ptc_metrics *metrics;
    /* CUDA: 64-bit index arithmetic whatever the sizes (the variant a
     * symbolic kernel's calls past the 32-bit bound run, ptc_cuda_fits_i32) */
    bool wide_index;
    /* CUDA: the PTX only from the cache (kernel_dir), never generated: a
     * kernel not there is ptc_cuda_codegen's 1 (an export package's 64-bit
     * variants, which its loader must not need LLVM to make) */
    bool no_generate;
} ptc_codegen_opts;

/* Compiles (or loads) every kernel of s into out[s->nkernels]. With
 * want_text, texts[k] receives malloc'd LLVM IR whose first line is
 * "; ptc kernel <n> <name>  <- %a, %b". On error nothing is kept. */
int ptc_cpu_compile(const ptc_schedule *s, const ptc_codegen_opts *o, ptc_cpu_kernel *out,
                    char **texts, ptc_error *err);
/* ptc_cpu_compile for schedules ss[0..n) together (a training step's
 * forward and backward), with options os[p], into outs[p] and texts[p] (an
 * array of n; texts[p] NULL for no text): the kernels of all of them that
 * need LLVM are built in one batch (one compile worker, one pool of
 * threads), a kernel identical to an earlier one of the batch once. Its
 * LLVM time goes to os[0]'s metrics. All or nothing: on error no program
 * keeps a kernel, and err is the first failure in program order. */
int ptc_cpu_compile_all(const ptc_schedule *const *ss, const ptc_codegen_opts *const *os, int n,
                        ptc_cpu_kernel *const *outs, char **const *texts, ptc_error *err);
void ptc_cpu_kernel_release(ptc_cpu_kernel *k);

/* A form of a kernel's CPU code that max-autotune may pick: the vector width
 * of its vector loops (0: the host's, ptc_cpu_lanes()) and whether its
 * reductions keep two accumulator sets (unrolled by two). Zero is the form
 * ptc_cpu_compile builds. */
enum { PTC_UNROLL_AUTO, PTC_UNROLL_OFF, PTC_UNROLL_ON };
typedef struct ptc_cpu_code {
    int lanes;
    int unroll; /* PTC_UNROLL_*: AUTO unrolls reductions with cheap bodies */
} ptc_cpu_code;
/* Compiles (or loads) kernel ki of s in forms codes[n], in parallel, each
 * cached on disk apart from the default form; out[i] is released with
 * ptc_cpu_kernel_release. On error nothing is kept. */
int ptc_cpu_compile_forms(const ptc_schedule *s, int ki, const ptc_cpu_code *codes, int n,
                          ptc_cpu_kernel *out, ptc_error *err);

/* "x86_64-pc-linux-gnu skylake-avx512 +avx512f,..." (static string). */
const char *ptc_cpu_target(void);
/* SIMD lanes used for 4-byte elements (16 with AVX-512, 8 with AVX2, ...). */
int ptc_cpu_lanes(void);

/* ---- CUDA: PTX for each kernel (compiler/codegen/cuda) --------------------- */

typedef struct ptc_cuda_target {
    int sm;  /* compute capability x 10: 80, 86, 89, 90 (LLVM 16 knows up to 90) */
    int sms; /* multiprocessors, for launch planning (0: PTC_CUDA_DEFAULT_SMS) */
} ptc_cuda_target;

/* The multiprocessors planned for when no device is asked (PTX emitted for an
 * --cuda-arch): an H100 SXM's 132. With a device, the runtime plans for its own
 * count (cuDeviceGetAttribute, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT). */
enum { PTC_CUDA_DEFAULT_SMS = 132 };

/* How a kernel is launched, fixed when its code is generated. The runtime
 * runs ceil(outer iterations / vec / (block / team)) teams, capped, as a
 * grid-stride loop; every thread of a block runs the same iterations. */
typedef struct ptc_cuda_launch {
    int team;             /* threads per outer iteration (a power of two) */
    int block;            /* threads per block, a multiple of team */
    int vec;              /* elements per thread of the vectorised entry (1: none) */
    bool vec_rows;        /* the vectorised entry keeps one team per outer iteration
                           * (row mode, vectorised reductions: kernels that are not
                           * flat); otherwise a thread covers vec iterations */
    int row_ahead;        /* row mode: rows each team is given at least, so that the
                           * loads of its next row overlap the current one's work
                           * (0: any number) */
    int smem;             /* dynamic shared memory per block, bytes */
    int64_t scratch_team; /* global scratch per resident team, bytes (0: none) */
    uint8_t *valign;      /* per kernel arg: alignment in bytes the vectorised
                           * entry needs (0: none); malloc'd */
} ptc_cuda_launch;

/* A kernel whose team size depends on symbolic sizes (a reduction over a row
 * of run-time length: a warp per short row, a block per long one) is
 * compiled in a few forms, each an entry of its module with its own team;
 * form 0 is the default (entry, launch), and ptc_cuda_pick chooses per call. */
enum { PTC_CUDA_MAX_FORMS = 4 };
typedef struct ptc_cuda_form {
    char entry[72]; /* form 0: the kernel's entry; others: entry + "_t<team>" (or
                     * "_c<team>" for column mode) */
    int team, block, smem;
    int64_t scratch_team;
    bool col;            /* column mode (plan.c): a block of column tiles x row slices */
    int split;           /* split rows (plan.c): blocks per row (0: one team per row) */
    int64_t split_bytes; /* split rows: the partial states' scratch, bytes */
} ptc_cuda_form;

/* A split-rows kernel (plan.c) counts the blocks of each row that are done
 * in an i32 per row at the start of the scratch area, which the runtime
 * zeroes once a run and each row's last block resets: this many bytes, so
 * at most PTC_CUDA_SPLIT_COUNTERS / 4 rows. Its partial states follow; the
 * scratch of other kernels starts after the counters. */
enum { PTC_CUDA_SPLIT_COUNTERS = 4096 };

/* How one member of a horizontal combination runs in its launch: its team,
 * and in the vectorised entry its vectorised form (vec > 1; vec_rows and
 * row_ahead as in ptc_cuda_launch). */
typedef struct ptc_cuda_member {
    int team, vec;
    bool vec_rows;
    int row_ahead;
    int split; /* blocks per outer iteration (split rows; 0: none, never in a combination) */
} ptc_cuda_member;

typedef struct ptc_cuda_code {
    char entry[64];  /* the kernel's symbol in its PTX: ptc_<ops>_<hash> */
    char ventry[72]; /* the vectorised entry ("" when launch.vec == 1) */
    ptc_cuda_launch launch;
    int nforms; /* >= 1 */
    ptc_cuda_form forms[PTC_CUDA_MAX_FORMS];
    bool outer_contig, inner_contig, pointwise; /* what the team choice weighs (plan.c) */
    /* i32: the entries' index arithmetic is 32-bit; i32_symbolic: so for
     * symbolic sizes, and a call whose sizes fail ptc_cuda_fits_i32 runs the
     * kernel's 64-bit variant (ptc_codegen_opts.wide_index), made when one
     * first does */
    bool i32, i32_symbolic;
    struct ptc_cuda_member *members; /* a combination's, per member; malloc'd, else NULL */
    char *ptx;                       /* NUL-terminated PTX of one module holding both entries */
    char *key;                       /* the cache key the PTX is stored under (cubins extend it) */
    bool cached;                     /* the PTX came from the disk cache */
} ptc_cuda_code;

/* "sm_90" for 90 (static string for the known targets). */
const char *ptc_cuda_arch_name(int sm);
/* Generates (or loads from the disk cache) the PTX of kernel k of s. Thread
 * safe: kernels of one schedule may be compiled in parallel. With want_text,
 * *text receives "; ptc kernel <n> <name>  <- %a\n" followed by the PTX.
 * With o->no_generate, 1 (err set, out freed) when the cache lacks it. */
int ptc_cuda_codegen(const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *t,
                     const ptc_codegen_opts *o, ptc_cuda_code *out, char **text, ptc_error *err);
/* One module for ptc_cuda_codegen_all: kernel k of s (ptc_cuda_codegen),
 * or with combo its combination k (ptc_cuda_codegen_combo), for target t
 * with options o, into *out. */
typedef struct ptc_cuda_gen {
    const ptc_schedule *s;
    int k;
    bool combo;
    const ptc_cuda_target *t;
    const ptc_codegen_opts *o;
    ptc_cuda_code *out;
} ptc_cuda_gen;
/* ptc_cuda_codegen and ptc_cuda_codegen_combo for items[0..n) (kernels and
 * combinations of one schedule or of several: a batch of programs), whose
 * PTX not in the cache is generated in one compile worker on nthreads
 * threads (one fork for all of them, from this thread alone; the caller's
 * threads only load), once per cache key: an item whose code an earlier
 * item has takes a copy of its PTX. The LLVM time goes to items[0].o's
 * metrics. -1 with err: the first failure in item order; every out is then
 * freed or whole. */
int ptc_cuda_codegen_all(const ptc_cuda_gen *items, int n, int nthreads, ptc_error *err);
/* The block kernel k of s must run with as a member of a horizontal
 * combination on target t (ptc_combo_launch.block): 0 for a thread per
 * element (any block), -1 where it cannot share a launch (several forms, or
 * a scratch area sized by its own grid). */
int ptc_cuda_combo_block(const ptc_schedule *s, const ptc_kernel *k, const ptc_cuda_target *t);
/* The code of horizontal combination c of s (lower/combo.c: kernels over
 * static sizes of one block size, ptc_cuda_combo_block) as one module: its
 * entry takes (the buffers of ptc_combo_args, the rng offset and cell, per member i
 * the i32 end of its blocks) and runs member i on blocks end[i-1] ..
 * end[i]-1 as if launched alone on that many blocks of launch.block threads
 * with launch.smem bytes of shared memory; its vectorised entry (ventry,
 * where a member has one) runs those members' vectorised forms
 * (members[i]). */
int ptc_cuda_codegen_combo(const ptc_schedule *s, const ptc_combo *c, const ptc_cuda_target *t,
                           const ptc_codegen_opts *o, ptc_cuda_code *out, ptc_error *err);
void ptc_cuda_code_free(ptc_cuda_code *c);
/* The form of c for a call whose kernel runs `outer` outer iterations of at
 * most `work` elements each, on a device of `sms` multiprocessors: its
 * column-mode form where these sizes suit one (ptc_cuda_col_fits), else the
 * one whose team is nearest the team the plan would choose for them. */
int ptc_cuda_pick(const ptc_cuda_code *c, double outer, double work, int sms);
/* Whether column mode suits a call with `outer` iterations of `rows` each. */
bool ptc_cuda_col_fits(double outer, double rows);
/* The one rule for 32-bit index arithmetic in kernel k of prog, with
 * value(ctx, d) the size d has (at planning time, static sizes; at a launch,
 * the call's): its outer iterations, each group's work per iteration, every
 * size argument and every buffer it takes below 2^30 elements (a factor of 2
 * of headroom for sums of terms). */
typedef double (*ptc_cuda_size_fn)(void *ctx, ptc_dim d);
bool ptc_cuda_fits_i32(const ptc_lprog *prog, const ptc_kernel *k, ptc_cuda_size_fn value,
                       void *ctx);

/* ---- kernel cache ---------------------------------------------------------- */

/* $PTC_CACHE_DIR, else ~/.cache/ptc (static string). */
const char *ptc_cache_dir(void);
/* Looks up an object by key. 1: hit (*obj malloc'd); 0: miss. A corrupt,
 * truncated or mismatching file, or one whose object does not match the
 * SHA-256 stored beside it, counts as a miss and is removed; so is anything
 * but a regular file (never opened in a way that blocks or follows a link).
 * A cache directory others can write to, or owned by another user, is not
 * used at all (one warning on stderr per process). */
int ptc_cache_load(const char *key, size_t keylen, uint8_t **obj, size_t *objlen);
/* Stores atomically (write + rename). Failures are logged, not fatal. */
void ptc_cache_store(const char *key, size_t keylen, const uint8_t *obj, size_t objlen);
/* The file a key maps to (for tests that corrupt it). */
void ptc_cache_path(const char *key, size_t keylen, char *path, size_t size);
/* The same in directory dir (NULL: ptc_cache_dir()). */
int ptc_cache_load_in(const char *dir, const char *key, size_t keylen, uint8_t **obj,
                      size_t *objlen);
void ptc_cache_store_in(const char *dir, const char *key, size_t keylen, const uint8_t *obj,
                        size_t objlen);
void ptc_cache_path_in(const char *dir, const char *key, size_t keylen, char *path, size_t size);

/* ---- compile workers (worker.c) ------------------------------------------- */

/* Work done for item i in a compile worker, a forked child: its result goes
 * into out as bytes the caller decodes; an ordinary failure returns -1 with
 * err. It may use LLVM and plain C, never Python, CUDA or OpenMP. */
typedef int (*ptc_worker_fn)(void *ctx, int item, ptc_buf *out, ptc_error *err);

typedef struct ptc_worker_result {
    int rc;    /* 0: out holds the item's result; -1: err says why */
    bool died; /* the error is the worker's death, not the item's own */
    ptc_buf out;
    ptc_error err;
} ptc_worker_result;

/* True unless PTC_COMPILE_WORKER=0 (in ASan builds: only with
 * PTC_COMPILE_WORKER=1): LLVM runs in a forked compile worker; else in this
 * process. */
bool ptc_worker_enabled(void);
/* Runs fn over items [0, n) in one forked child on nthreads threads of its
 * own (fn must be thread safe), fed one item at a time, and waits for it (PTC_COMPILE_TIMEOUT
 * seconds at most, default 600, 0 = no limit). 0: res[i] holds every item's outcome; an item whose
 * child crashed, exited or was killed at the time limit has rc -1 and a CompileError saying which.
 * 1: no child could be forked; nothing ran (the caller compiles in process). Call with the caller's
 * locks held: the child inherits them, and no other thread of this process. */
int ptc_worker_run(int n, int nthreads, ptc_worker_fn fn, void *ctx, ptc_worker_result *res);

/* The address space one thread of LLVM may need to compile kernel k, over-
 * estimated (worker.c), and whether that much can be mapped now: asked
 * before LLVM runs in this process, which it cannot survive running out of
 * memory in; where it cannot, the compile goes to a worker. */
size_t ptc_llvm_room(const ptc_kernel *k);
bool ptc_llvm_have_room(size_t bytes);
/* LLVM's own fatal-error path (llvm_errors.cpp), for PTC_INJECT's abort:
 * "LLVM ERROR: ..." on stderr and SIGABRT, as a broken invariant in a pass. */
_Noreturn void ptc_llvm_planted_fatal_error(void);

/* ---- SHA-256 (FIPS 180-4; sha256.c) ------------------------------------------ */

enum { PTC_SHA256_LEN = 32 };
typedef struct ptc_sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes so far */
    uint8_t buf[64];
    size_t nbuf;
} ptc_sha256;

void ptc_sha256_init(ptc_sha256 *s);
void ptc_sha256_update(ptc_sha256 *s, const void *data, size_t n);
void ptc_sha256_final(ptc_sha256 *s, uint8_t out[PTC_SHA256_LEN]);
void ptc_sha256_bytes(const void *data, size_t n, uint8_t out[PTC_SHA256_LEN]);

#endif /* PTC_CODEGEN_H */
