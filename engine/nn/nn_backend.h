/* API-STABLE */
/* nn_backend: the one op API of the engine, implemented by every backend.
 *
 * A backend is a vtable (nn_backend_ops) plus a little state (nn_backend).
 * The backends are siblings that this core does not know: the CPU backend
 * in engine/cpu/, the CUDA backend in engine/cuda/ (one file per op family
 * in each).
 * Trunks and trainers never call the vtable directly: they call the nn_*
 * wrappers declared at the end of this header, which validate shapes, dtypes
 * and pointers (GT_EINVAL with a message naming the argument) and then call
 * the backend.  A backend's entries may therefore assume valid arguments.
 *
 * Conventions shared by all ops
 *  - Tensors are 2-D, row-major, with a leading dimension ld >= cols (in
 *    elements), so a block of columns of a wider matrix is a plain view.
 *  - Memory passed to an op is backend memory (from ops->alloc), except where
 *    a parameter is documented as host memory or a host scalar.
 *  - Elementwise and row ops read and write fp32.  bf16 appears in exactly
 *    three places: matmul inputs, cast_bf16 outputs, and the optional bf16
 *    working copy written by adamw.  Everything the brief keeps in fp32
 *    (softmax, router losses, stick-breaking, reductions, LayerNorm stats)
 *    is fp32 by construction.
 *  - "accumulate" means out += result; otherwise out = result.  Parameter
 *    gradients are accumulated, so a trainer zeroes the gradient buffer once
 *    per step (one memset over the single gradient allocation).
 *  - Scalars that are results (losses, norms) are written to a float in
 *    backend memory so a GPU backend need not synchronise; read them with
 *    copy_d2h.  Scalars that are inputs (dloss) are host floats.
 *  - Ops may be asynchronous; synchronize() waits for all issued work.
 *  - A backend is used by one thread at a time (it owns caches and
 *    scratch); open one per thread that needs one.
 *  - Per-element and per-row arithmetic comes from nn_math.h so that every
 *    backend computes the same formulas; random numbers come from nn_rng.h.
 *  - Adding an op: its entry in its family of nn_backend_ops and its
 *    validating wrapper in the same place (declared at the end of this
 *    header, defined in the family's file: nn_backend.c, nn_backend_math.c
 *    or nn_backend_fixed.c), its per-element math in nn_math.h, its entry
 *    in each backend's file of the family (engine/cpu/cpu_<family>.c,
 *    engine/cuda/cuda_<family>.cuh, and the tests' reference backend), and
 *    its test.
 *  - Graphs (the last family) are driven by nn_graph.h alone.
 */
#ifndef NN_BACKEND_H
#define NN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gt_error.h"
#include "nn_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* dtypes and tensor views                                                  */
/* ------------------------------------------------------------------------ */

typedef enum nn_dtype {
    NN_F32 = 0,
    NN_BF16 = 1,
} nn_dtype;

/* Bytes per element; 0 for an unknown dtype.  (Inline, like every helper a
 * backend may need, so backends never link against giant_nn itself.) */
static inline size_t nn_dtype_size(nn_dtype dt)
{
    return dt == NN_F32 ? 4 : dt == NN_BF16 ? 2 : 0;
}

/* "f32", "bf16", or "unknown". */
static inline const char *nn_dtype_name(nn_dtype dt)
{
    return dt == NN_F32 ? "f32" : dt == NN_BF16 ? "bf16" : "unknown";
}
/* Parses "fp32"/"f32"/"bf16"; GT_EINVAL for anything else (fp16 included). */
int nn_dtype_parse(const char *s, nn_dtype *out, gt_error *err);

/* A 2-D row-major view: element (i, j) is at data + (i * ld + j) * size. */
typedef struct nn_tensor {
    void *data;
    nn_dtype dtype;
    int rows;
    int cols;
    int ld;       /* leading dimension in elements, >= cols */
} nn_tensor;

static inline nn_tensor nn_tensor_make(void *data, nn_dtype dtype, int rows, int cols)
{
    nn_tensor t;
    t.data = data;
    t.dtype = dtype;
    t.rows = rows;
    t.cols = cols;
    t.ld = cols;
    return t;
}

/* fp32 shorthand. */
static inline nn_tensor nn_f32(float *data, int rows, int cols)
{
    return nn_tensor_make(data, NN_F32, rows, cols);
}

/* Columns [col0, col0 + ncols) of t, sharing its storage. */
nn_tensor nn_tensor_cols(nn_tensor t, int col0, int ncols);
/* Rows [row0, row0 + nrows) of t, sharing its storage. */
nn_tensor nn_tensor_rows(nn_tensor t, int row0, int nrows);

/* Checks dtype, rows >= 0, cols >= 0, ld >= cols, data != NULL when not
 * empty.  `what` names the tensor in the message. */
int nn_tensor_check(nn_tensor t, const char *what, gt_error *err);

/* ------------------------------------------------------------------------ */
/* enums for op arguments                                                   */
/* ------------------------------------------------------------------------ */

typedef enum nn_act {
    NN_ACT_NONE = 0,
    NN_ACT_SILU = 1,     /* fused epilogue, used by forward-only sampling */
} nn_act;

/* A weight packed for linear_fixed, in the layout of the backend that
 * packed it (nn_pack_weight); only that backend may use it. */
typedef struct nn_packed {
    void *data;      /* backend memory, `bytes` long */
    size_t bytes;
    nn_dtype dtype;  /* of the weight, and of the x it multiplies */
    int n, k;        /* the weight is n x k: y[m,n] = x[m,k] . W^T */
    int layout;      /* the backend's tag of its packing */
} nn_packed;

typedef enum nn_dist {
    NN_DIST_NORMAL = 0,  /* a = mean, b = standard deviation */
    NN_DIST_UNIFORM = 1, /* uniform on [a, b) */
} nn_dist;

/* ------------------------------------------------------------------------ */
/* the backend                                                              */
/* ------------------------------------------------------------------------ */

typedef struct nn_backend nn_backend;

typedef struct nn_backend_ops {
    /* Grouped by family, in the order every backend's table and the
     * wrappers (nn_backend.c) follow; tables fill their entries by name. */
    /* ===== memory and copies =========================================== */
    /* --- lifetime and memory ------------------------------------------- */
    void (*destroy)(nn_backend *b);
    /* 64-byte aligned; *out = NULL and GT_ENOMEM on failure.  bytes == 0
     * returns a valid unique pointer.  Must increment b->alloc_count. */
    int (*alloc)(nn_backend *b, size_t bytes, void **out, gt_error *err);
    void (*free)(nn_backend *b, void *p);                       /* NULL ok */
    int (*memset)(nn_backend *b, void *p, int value, size_t bytes, gt_error *err);
    int (*copy_h2d)(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err);
    int (*copy_d2h)(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err);
    int (*copy_d2d)(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err);
    int (*synchronize)(nn_backend *b, gt_error *err);
    /* --- host memory for copies ------------------------------------------
     * Host memory (64-byte aligned; bytes == 0 gives a unique pointer) that
     * copy_h2d / copy_d2h move fastest: page-locked on a GPU, where a copy
     * from ordinary memory goes through a staging buffer at a fraction of
     * the bus's rate.  Pinning is best effort: the memory is valid either
     * way.  host_free takes only what host_alloc gave (NULL ok).  A backend
     * that leaves them NULL gets aligned malloc / free. */
    int (*host_alloc)(nn_backend *b, size_t bytes, void **out, gt_error *err);
    void (*host_free)(nn_backend *b, void *p);

    /* ===== column blocks and padding =================================== */
    /* --- column blocks: concat writes parts[i] into y's columns starting at
     * the sum of the previous parts' cols; split is its backward (copies the
     * blocks out, or adds them when accumulate).  NULL data in a part means
     * "skip this block" (e.g. no gradient wanted for the conditions). */
    int (*concat)(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts,
                  gt_error *err);
    int (*split)(nn_backend *b, nn_tensor *parts, int nparts, nn_tensor y, int accumulate,
                 gt_error *err);
    /* --- padding of variable-length rows ---------------------------------
     * x[r, c] = 0 for c outside [valid[2k], valid[2k + 1]), k = idx[r] (r
     * when idx is NULL): every row's padding cleared in one pass.  valid
     * is int32 [n_valid, 2] and idx int32 [x.rows], backend memory; a row
     * whose k is outside [0, n_valid) is left as it is.  A backend that
     * leaves it NULL gets host copies of valid and idx and a memset per
     * range (a GPU then pays two small copies per row). */
    int (*zero_outside)(nn_backend *b, nn_tensor x, const int32_t *valid, int n_valid,
                        const int32_t *idx, gt_error *err);

    /* ===== matrix product ============================================== */
    /* C[m,n] (+)= op(A)[m,k] . op(B)[k,n] (+ bias[n]), then act.
     * op(X) = X^T when trans_x.  A and B are both NN_F32 or both NN_BF16;
     * C is NN_F32; accumulation is fp32.  bias is fp32 backend memory or
     * NULL.  With accumulate, act must be NN_ACT_NONE (C += A.B + bias is
     * allowed: the residual update of a block in one call).  m, n or k may
     * be 0 (k == 0 writes bias only, or leaves C unchanged when accumulating).
     * Linear layer, weight W[out,in]:  Y = X W^T + b   (trans_b = 1)
     *                       backward:  dX = dY W        (no transposes)
     *                                  dW += dY^T X     (trans_a, accumulate) */
    int (*matmul)(nn_backend *b, nn_tensor c, nn_tensor a, int trans_a,
                  nn_tensor bm, int trans_b, const float *bias, nn_act act,
                  int accumulate, gt_error *err);

    /* ===== elementwise and activations ================================= */
    /* --- activations (y and x may alias; dx and dy may alias) ----------- */
    int (*silu_fwd)(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err);
    int (*silu_bwd)(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err);
    int (*leaky_fwd)(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err);
    int (*leaky_bwd)(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                     gt_error *err);
    /* --- residual add: y = x1 + x2 (y may alias either).  Its backward is
     * the identity on both inputs, done with the accumulate flags. */
    int (*add)(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err);
    /* --- elementwise product (fp32) --------------------------------------
     * y = x1 * x2, element by element; y may alias either.  The gated
     * input skip of a trunk (out += g(cond) * x) and its backward are this
     * op and add.  A backend that leaves it NULL gets GT_EUNSUPPORTED. */
    int (*mul)(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err);
    /* --- precision ------------------------------------------------------- */
    /* y (NN_BF16) = round-to-nearest-even(x (NN_F32)), per nn_bf16_from_f32 */
    int (*cast_bf16)(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err);
    /* --- per-row linear combination (fp32) -------------------------------
     * y[i,:] = alpha[i] * x[i,:] + beta[i] * z[i,:]; alpha and beta are
     * backend arrays of y.rows floats; y may alias x or z.  The noised
     * inputs and targets of flow matching / DDPM and every sampler update
     * are this op.  A backend that leaves it NULL gets GT_EUNSUPPORTED. */
    int (*axpby_rows)(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                      const float *beta, nn_tensor z, gt_error *err);
    /* --- per-column affine map (fp32) ------------------------------------
     * y[i,j] = scale[j] * x[i,j] + (shift ? shift[j] : 0); scale and shift
     * are backend arrays of y.cols floats (shift may be NULL); y may alias
     * x.  (De-)standardising columns inside a graph, as the stick-breaking
     * head of the WGAN generator does; with shift NULL it is also the
     * map's own backward.  A backend that leaves it NULL gets
     * GT_EUNSUPPORTED. */
    int (*affine_cols)(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                       const float *shift, gt_error *err);

    /* ===== condition embedding ========================================= */
    /* --- sinusoidal embedding of scalar conditions -----------------------
     * cond[rows, nc]; y[rows, nc*emb_dim]; y[i, c*emb_dim + j] =
     * nn_embed_elem(cond[i,c] * scale, j, emb_dim, max_period).
     * Backward: dcond[i,c] (+)= sum_j dy[...] * d/dcond.  */
    int (*embed_fwd)(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                     float max_period, gt_error *err);
    int (*embed_bwd)(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond,
                     int emb_dim, float scale, float max_period, int accumulate,
                     gt_error *err);

    /* ===== LayerNorm =================================================== */
    /* --- LayerNorm over each row (cols features) ------------------------ */
    /* y = (x - mean) * rstd * gamma + beta; mean, rstd: fp32 [rows], saved
     * for the backward.  Statistics per nn_ln_row_stats (two-pass, fp32). */
    int (*ln_fwd)(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
                  const float *gamma, const float *beta, float eps, gt_error *err);
    /* dx (+)= ..., dgamma += ..., dbeta += ... (parameter grads always
     * accumulate).  dx must not alias x or dy. */
    int (*ln_bwd)(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
                  nn_tensor x, const float *mean, const float *rstd, const float *gamma,
                  int accumulate_dx, gt_error *err);

    /* ===== reductions and losses ======================================= */
    /* --- linear bias gradient: db[j] (+)= sum_i dy[i,j] ------------------- */
    int (*bias_grad)(nn_backend *b, float *db, nn_tensor dy, int accumulate, gt_error *err);
    /* --- losses and reductions (fp32 accumulation or better) -------------
     * mse: loss = mean over all elements of (pred - target)^2;
     *   bwd: dpred (+)= dloss * 2 (pred - target) / (rows*cols).
     * mean: out = mean of all elements of x; bwd: dx (+)= dout / (rows*cols). */
    int (*mse_fwd)(nn_backend *b, float *loss, nn_tensor pred, nn_tensor target,
                   gt_error *err);
    int (*mse_bwd)(nn_backend *b, nn_tensor dpred, float dloss, nn_tensor pred,
                   nn_tensor target, int accumulate, gt_error *err);
    int (*mean_fwd)(nn_backend *b, float *out, nn_tensor x, gt_error *err);
    int (*mean_bwd)(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err);
    /* --- sum of squares (fp32 or better) ---------------------------------
     * *out = sum of x[i]^2 over n fp32 elements (fp32 or better).  The
     * global gradient norm is sqrt of this over the single gradient buffer. */
    int (*sumsq)(nn_backend *b, float *out, const float *x, size_t n, gt_error *err);

    /* ===== softmax ===================================================== */
    /* --- row softmax (fp32): y = softmax(x); dx = y * (dy - sum(dy*y)) ---- */
    int (*softmax_fwd)(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err);
    int (*softmax_bwd)(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y, gt_error *err);

    /* ===== routing ===================================================== */
    /* --- top-k, gathers and scatters ------------------------------------
     * topk_fwd: per row of probs[rows, E], the k largest (ties: lower index
     * first, in descending order) into idx[rows*k] (int32, backend memory)
     * and their renormalised weights w[rows*k] = p / sum(top-k p).
     * topk_bwd: dprobs (+)= the gradient of w w.r.t. probs (zero outside the
     * top k): dp_j = (dw_j - sum_i dw_i w_i) / S for j in the top k.
     * gather_rows: y[i,:] = (scale ? scale[i] : 1) * x[idx[i],:], i < y.rows
     * scatter_add_rows: y[idx[i],:] += (scale ? scale[i] : 1) * x[i,:];
     *   idx must not repeat within one call (one expert's rows never do),
     *   so no atomics are needed.
     * gather_dot: out[i] = sum_j a[idx[i], j] * x[i, j]  (the gradient of a
     *   scatter weight), i < x.rows.
     * idx and scale are backend memory; scale may be NULL. */
    int (*topk_fwd)(nn_backend *b, int32_t *idx, float *w, nn_tensor probs, int k,
                    gt_error *err);
    int (*topk_bwd)(nn_backend *b, nn_tensor dprobs, const float *dw, const int32_t *idx,
                    const float *w, nn_tensor probs, int k, int accumulate, gt_error *err);
    int (*gather_rows)(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                       const float *scale, gt_error *err);
    int (*scatter_add_rows)(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                            const float *scale, gt_error *err);
    int (*gather_dot)(nn_backend *b, float *out, nn_tensor a, const int32_t *idx,
                      nn_tensor x, gt_error *err);
    /* --- router losses (fp32) --------------------------------------------
     * balance (Switch-style): loss = E * sum_e frac[e] * mean_i probs[i,e];
     *   frac[E] (backend memory) is the fraction of routed slots per expert
     *   (a constant for the gradient).  bwd: dprobs[i,e] += dloss*E*frac[e]/rows.
     * entropy: loss = mean_i ( -sum_e p log(p + NN_ENTROPY_EPS) ); bwd per
     *   nn_entropy_grad.  Both backwards accumulate into dprobs. */
    int (*balance_fwd)(nn_backend *b, float *loss, nn_tensor probs, const float *frac,
                       gt_error *err);
    int (*balance_bwd)(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                       gt_error *err);
    int (*entropy_fwd)(nn_backend *b, float *loss, nn_tensor probs, gt_error *err);
    int (*entropy_bwd)(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                       gt_error *err);

    /* ===== stick-breaking ============================================== */
    /* --- stick-breaking (fp32), see nn_sb_*_row in nn_math.h -------------
     * fwd: logits z[rows, L-1] -> fractions f[rows, L] (sum to 1).
     * bwd: dz (+)= from df, recomputing from z.
     * inv: fractions f[rows, L] -> logits z[rows, L-1] (a data transform,
     *   u clamped to [eps, 1-eps] before the logit). */
    int (*sb_fwd)(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err);
    int (*sb_bwd)(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
                  gt_error *err);
    int (*sb_inv)(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err);

    /* ===== optimizer =================================================== */
    /* --- AdamW -----------------------------------------------------------
     * Fused AdamW over n elements, per nn_adamw_elem: updates param, m, v
     * (fp32) from grad * hp->grad_scale; when param_bf16 != NULL also writes
     * the bf16 working copy in the same pass.  hp is backend memory, read
     * when the update runs (so a captured graph replays whatever the host
     * wrote there last).  When sumsq (backend memory: the whole gradient's
     * sum of squares) is not NULL, nn_adamw_hp_clip first clips by the
     * global norm, and a non-finite norm leaves every buffer unchanged. */
    int (*adamw)(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad,
                 float *m, float *v, size_t n, const nn_adamw_hp *hp, const float *sumsq,
                 gt_error *err);

    /* ===== random numbers ============================================== */
    /* --- random fill from Philox4x32-10 (nn_rng.h) -----------------------
     * x[i] for i < n uses block (offset + i/4) of (seed, stream), lane i%4,
     * per nn_rng_fill_elem.  The caller advances offset by nn_rng_blocks(n). */
    int (*rand_fill)(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                     uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err);
    /* --- random fill of rows (fp32) --------------------------------------
     * Row r of the view x (x.cols elements, row pitch x.ld) gets exactly
     * what rand_fill(row r, x.cols, ..., offset (row0 + r) * per_row) would
     * write: element (r, j) is lane j % 4 of block (row0 + r) * per_row +
     * j / 4 (uint64 arithmetic), so a row's numbers depend on its index
     * alone, whatever the rows filled with it.  per_row >=
     * nn_rng_blocks(x.cols).  The columns past a view are left alone.  A
     * sampler draws a whole batch's noise, keyed by (seed, row), in one
     * call instead of one fill per row.  A backend that leaves it NULL gets
     * the generic loop of rand_fill calls (the same numbers). */
    int (*rand_rows)(nn_backend *b, nn_tensor x, nn_dist dist, float a, float bb,
                     uint64_t seed, uint64_t stream, uint64_t row0, uint64_t per_row,
                     gt_error *err);

    /* ===== fixed-order linear layer (sampling) ========================= */
    /* --- fixed-order linear layer ----------------------------------------
     * y[m,n] = act(x[m,k] . W^T + bias) (+ y when accumulate), where every
     * element of y is computed by the same sequence of roundings whatever
     * m, the row's position in x and the thread count, so a row's result
     * depends on that row alone.  Samplers use it: a shower must not depend
     * on the batch it was computed in.  The CPU contract (the same bits on
     * every x86-64 CPU) is in engine/cpu/cpu_fixed.h; a GPU backend keeps one
     * algorithm per (n, k, dtype) for every m.
     * pack_bytes: size of a packed n x k weight of dtype dt.
     * pack_weight: fills dst->data (pack_bytes long) from w (n x k, fp32 or
     *   bf16) and sets dst->layout.
     * linear_fixed: x has the packed weight's dtype, y is fp32; bias fp32
     *   or NULL.  Backends that leave these NULL get GT_EUNSUPPORTED. */
    size_t (*pack_bytes)(nn_backend *b, int n, int k, nn_dtype dt);
    int (*pack_weight)(nn_backend *b, nn_packed *dst, nn_tensor w, gt_error *err);
    int (*linear_fixed)(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                        const float *bias, nn_act act, int accumulate, gt_error *err);
    /* --- the fixed-order layer writing bf16 ------------------------------
     * y_bf (bf16, y's shape) = act(x . W^T + bias), each element the bits
     * linear_fixed then cast_bf16 would give; y (fp32) is the product's
     * scratch and holds nothing defined afterwards.  A bf16 sampler's
     * hidden layer feeds the next product this way: one pass over the
     * activations instead of two (no separate cast).  A backend that leaves
     * it NULL gets linear_fixed then cast_bf16. */
    int (*linear_fixed_bf16)(nn_backend *b, nn_tensor y_bf, nn_tensor y, nn_tensor x,
                             const nn_packed *w, const float *bias, nn_act act,
                             gt_error *err);

    /* ===== graphs ====================================================== */
    /* --- capture and replay of a sequence of ops -------------------------
     * Optional: a backend without graphs leaves all four NULL (the CPU
     * backend does).  Callers go through nn_graph.h, never these.
     * graph_begin starts recording the ops issued on b; graph_end stops
     * and hands back the recorded graph, ready to launch (*out; after an
     * error inside the capture it still ends it, discards the graph and
     * returns the error); graph_launch replays one; graph_destroy frees
     * one (NULL ok).  Inside a capture alloc, copy_h2d, copy_d2h,
     * host_alloc and a matmul shape not planned yet are refused, free
     * keeps the block until the backend is closed, and synchronize does
     * nothing.  Arguments are recorded at capture: host scalars replay as
     * captured, so what changes between replays must be read from backend
     * memory when the op runs. */
    int (*graph_begin)(nn_backend *b, gt_error *err);
    int (*graph_end)(nn_backend *b, void **out, gt_error *err);
    int (*graph_launch)(nn_backend *b, void *graph, gt_error *err);
    void (*graph_destroy)(nn_backend *b, void *graph);
} nn_backend_ops;

struct nn_backend {
    const nn_backend_ops *ops;
    char name[32];         /* "cpu", "cuda" */
    int device;            /* device index; 0 for the CPU */
    int has_bf16;          /* 1 when bf16 matmuls run natively (no emulation) */
    int bf16_emulated;     /* 1 when bf16 matmuls are exact-rounding emulation */
    size_t alloc_count;    /* successful alloc() calls: tests assert a step
                              does not move it */
    size_t bytes_live;     /* bytes currently allocated through alloc() */
    void *impl;            /* backend-private state */
    size_t plan_count;     /* per-shape plans created (oneDNN primitives,
                              cuBLASLt algorithm searches): tests assert a
                              step after warm-up does not move it */
};

/* ------------------------------------------------------------------------ */
/* closing                                                                  */
/* ------------------------------------------------------------------------ */

/* Backends are created by their own libraries (cpu_backend_create in
 * engine/cpu, cuda_backend_create in engine/cuda) or by name a level up
 * (model_backend_open in engine/model); every backend is closed here. */
void nn_backend_close(nn_backend *b);                   /* NULL ok */

/* ------------------------------------------------------------------------ */
/* validating wrappers: what the engine calls (same meaning as the vtable)  */
/* ------------------------------------------------------------------------ */

/* memory and copies */
int nn_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err);
void nn_free(nn_backend *b, void *p);
int nn_memset(nn_backend *b, void *p, int value, size_t bytes, gt_error *err);
int nn_copy_h2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err);
int nn_copy_d2h(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err);
int nn_copy_d2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err);
int nn_sync(nn_backend *b, gt_error *err);
/* Host memory for copies (the host_alloc op, else aligned malloc); *out is
 * NULL and GT_ENOMEM on failure.  Free it with nn_host_free on the same
 * backend, before the backend is closed. */
int nn_host_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err);
void nn_host_free(nn_backend *b, void *p);

/* column blocks and padding */
int nn_concat(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts, gt_error *err);
int nn_split(nn_backend *b, nn_tensor *parts, int nparts, nn_tensor y, int accumulate,
             gt_error *err);
/* The zero_outside op (see nn_backend_ops): x f32; valid int32 [n_valid,
 * 2], idx int32 [x.rows] or NULL, both backend memory. */
int nn_zero_outside(nn_backend *b, nn_tensor x, const int32_t *valid, int n_valid,
                    const int32_t *idx, gt_error *err);

/* matrix product */
int nn_matmul(nn_backend *b, nn_tensor c, nn_tensor a, int trans_a, nn_tensor bm,
              int trans_b, const float *bias, nn_act act, int accumulate, gt_error *err);

/* elementwise and activations */
int nn_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err);
int nn_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err);
int nn_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err);
int nn_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                 gt_error *err);
int nn_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err);
int nn_mul(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err);
int nn_cast_bf16(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err);
int nn_axpby_rows(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                  const float *beta, nn_tensor z, gt_error *err);
int nn_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                   const float *shift, gt_error *err);

/* condition embedding */
int nn_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                 float max_period, gt_error *err);
int nn_embed_bwd(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond, int emb_dim,
                 float scale, float max_period, int accumulate, gt_error *err);

/* LayerNorm */
int nn_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
              const float *gamma, const float *beta, float eps, gt_error *err);
int nn_ln_bwd(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
              nn_tensor x, const float *mean, const float *rstd, const float *gamma,
              int accumulate_dx, gt_error *err);

/* reductions and losses */
int nn_bias_grad(nn_backend *b, float *db, nn_tensor dy, int accumulate, gt_error *err);
int nn_mse_fwd(nn_backend *b, float *loss, nn_tensor pred, nn_tensor target, gt_error *err);
int nn_mse_bwd(nn_backend *b, nn_tensor dpred, float dloss, nn_tensor pred, nn_tensor target,
               int accumulate, gt_error *err);
int nn_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err);
int nn_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err);
int nn_sumsq(nn_backend *b, float *out, const float *x, size_t n, gt_error *err);

/* softmax */
int nn_softmax_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err);
int nn_softmax_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y, gt_error *err);

/* routing */
int nn_topk_fwd(nn_backend *b, int32_t *idx, float *w, nn_tensor probs, int k, gt_error *err);
int nn_topk_bwd(nn_backend *b, nn_tensor dprobs, const float *dw, const int32_t *idx,
                const float *w, nn_tensor probs, int k, int accumulate, gt_error *err);
int nn_gather_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                   const float *scale, gt_error *err);
int nn_scatter_add_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                        const float *scale, gt_error *err);
int nn_gather_dot(nn_backend *b, float *out, nn_tensor a, const int32_t *idx, nn_tensor x,
                  gt_error *err);
int nn_balance_fwd(nn_backend *b, float *loss, nn_tensor probs, const float *frac,
                   gt_error *err);
int nn_balance_bwd(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                   gt_error *err);
int nn_entropy_fwd(nn_backend *b, float *loss, nn_tensor probs, gt_error *err);
int nn_entropy_bwd(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                   gt_error *err);

/* stick-breaking */
int nn_sb_fwd(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err);
int nn_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
              gt_error *err);
int nn_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err);

/* optimizer */
int nn_adamw(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad, float *m,
             float *v, size_t n, const nn_adamw_hp *hp, const float *sumsq, gt_error *err);

/* random numbers */
int nn_rand_fill(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                 uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err);
int nn_rand_rows(nn_backend *b, nn_tensor x, nn_dist dist, float a, float bb, uint64_t seed,
                 uint64_t stream, uint64_t row0, uint64_t per_row, gt_error *err);

/* fixed-order linear layer (sampling) */
/* Allocates out->data and packs w into it (see linear_fixed). */
int nn_pack_weight(nn_backend *b, nn_tensor w, nn_packed *out, gt_error *err);
void nn_packed_free(nn_backend *b, nn_packed *p);       /* NULL or empty ok */
int nn_linear_fixed(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                    const float *bias, nn_act act, int accumulate, gt_error *err);
int nn_linear_fixed_bf16(nn_backend *b, nn_tensor y_bf, nn_tensor y, nn_tensor x,
                         const nn_packed *w, const float *bias, nn_act act, gt_error *err);

#ifdef __cplusplus
}
#endif

#endif

/* API CHANGES: an op is added to its family in nn_backend_ops (every table
 * fills its entries by name, so the place carries no meaning to a backend)
 * and a field at the end of struct nn_backend; both are listed here with
 * the date.
 *  - 2026-12-02: axpby_rows (per-row y = alpha x + beta z), for the stage
 *    trainers and samplers of engine/model.
 *  - 2026-12-02: affine_cols (per-column y = scale x + shift), for the
 *    stick-breaking head of the WGAN generator (engine/model).
 *  - 2026-12-02: struct nn_backend gained `size_t plan_count` (last field):
 *    a backend increments it whenever it creates a per-shape plan (a oneDNN
 *    primitive, a cuBLASLt matmul descriptor/heuristic), so tests can check
 *    that no plan is made inside a step after warm-up.  Optional: leaving
 *    it 0 is correct for a backend without such plans.
 *  - 2026-12-03: pack_bytes, pack_weight, linear_fixed (and nn_packed): the
 *    fixed-order linear layer that makes sampling batch-invariant.
 *  - 2026-12-04: rand_rows (a rows x cols fill, each row at its own Philox
 *    offset), so a sampler draws a batch's noise in one call; optional
 *    (NULL falls back to one rand_fill per row).
 *  - 2026-12-07: linear_fixed_bf16 (the fixed-order layer writing its
 *    activation in bf16 for the next product); optional (NULL falls back
 *    to linear_fixed then cast_bf16: the same bits).
 *  - 2026-12-07: host_alloc / host_free (host memory the backend copies
 *    fastest: page-locked on CUDA), for the sampler's copies back;
 *    optional (NULL falls back to aligned malloc / free).
 *  - 2026-12-07: zero_outside (the padding of a batch's variable-length
 *    rows cleared in one pass, for the autoregressive stage's noise);
 *    optional (NULL falls back to host copies and one memset per range).
 *  - 2026-12-07: the entries grouped by family (memory and copies, column
 *    blocks, matmul, elementwise, embedding, LayerNorm, reductions,
 *    softmax, routing, stick-breaking, optimizer, random numbers, the
 *    fixed-order layer); the backends' tables, the reference backend of
 *    the tests and the wrappers follow the same order.
 *  - 2026-12-07: graph_begin, graph_end, graph_launch, graph_destroy (the
 *    graphs family: capture and replay, driven by nn_graph.h); optional
 *    (NULL: no graphs, every piece of work runs as it is issued). */
