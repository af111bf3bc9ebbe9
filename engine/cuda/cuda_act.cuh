/* cuda_act: elementwise ops: SiLU and leaky ReLU (forward and backward),
 * the residual add, the elementwise product, the per-row axpby of the samplers, the bf16 cast, and
 * the bias broadcast used when a
 * matmul cannot fuse its bias.  Functors first (the per-element math comes
 * from nn_math.h), launchers after. */
#ifndef CUDA_ACT_CUH
#define CUDA_ACT_CUH

#include "cuda_common.cuh"

/* ------------------------------------------------------------------------ */
/* functors                                                                 */
/* ------------------------------------------------------------------------ */

/* y = op(x), element by element: SiLU and leaky ReLU forward.  Op is a
 * per-element operation: a __device__ float operator()(float) const.  Out
 * is y's element: float, or uint16_t for bf16, each value then rounded as
 * the CPU rounds it (nn_bf16_from_f32, cuda_st's bf16 store; 4-wide it
 * reads 16 bytes and writes 8). */
template <class Op, class Out = float> struct cuda_map_f {
    Out *y; int ldy;
    const float *x; int ldx;
    Op op;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V];
        cuda_ld<V>(a, cuda_row(x, ldx, i) + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            a[k] = op(a[k]);
        cuda_st<V>(cuda_row(y, ldy, i) + j, a);
    }
};

/* dx = dy * grad(x), element by element: SiLU and leaky ReLU backward. */
template <class Grad> struct cuda_grad_f {
    float *dx; int lddx;
    const float *dy; int lddy;
    const float *x; int ldx;
    Grad grad;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V], g[V];
        cuda_ld<V>(a, cuda_row(x, ldx, i) + j);
        cuda_ld<V>(g, cuda_row(dy, lddy, i) + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            g[k] *= grad(a[k]);
        cuda_st<V>(cuda_row(dx, lddx, i) + j, g);
    }
};

/* the per-element operations (nn_math.h) */
struct cuda_silu_op {
    __device__ float operator()(float v) const { return nn_silu(v); }
};
struct cuda_silu_grad_op {
    __device__ float operator()(float v) const { return nn_silu_grad(v); }
};
struct cuda_leaky_op {
    float slope;
    __device__ float operator()(float v) const { return nn_leaky(v, slope); }
};
struct cuda_leaky_grad_op {
    float slope;
    __device__ float operator()(float v) const { return nn_leaky_grad(v, slope); }
};

/* y = op(x1, x2), or y = op(x1, y) when x2 is NULL (add: accumulating
 * copies); y may alias either.  The two binary ops: */
struct cuda_plus {
    __device__ float operator()(float a, float c) const { return a + c; }
};
struct cuda_times {
    __device__ float operator()(float a, float c) const { return a * c; }
};
template <class Op> struct cuda_zip_f {
    float *y; int ldy;
    const float *x1; int ld1;
    const float *x2; int ld2;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V], c[V];
        cuda_ld<V>(a, cuda_row(x1, ld1, i) + j);
        if (x2)
            cuda_ld<V>(c, cuda_row(x2, ld2, i) + j);
        else
            cuda_ld<V>(c, cuda_row((const float *)y, ldy, i) + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            a[k] = Op()(a[k], c[k]);
        cuda_st<V>(cuda_row(y, ldy, i) + j, a);
    }
};
typedef cuda_zip_f<cuda_plus> cuda_add_f;
typedef cuda_zip_f<cuda_times> cuda_mul_f;

/* y[i, :] = alpha[i] x[i, :] + beta[i] z[i, :] (y may alias x or z: each
 * element is read before it is written by the same thread). */
struct cuda_axpby_rows_f {
    float *y; int ldy;
    const float *alpha;
    const float *x; int ldx;
    const float *beta;
    const float *z; int ldz;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V], c[V];
        cuda_ld<V>(a, cuda_row(x, ldx, i) + j);
        cuda_ld<V>(c, cuda_row(z, ldz, i) + j);
        const float al = alpha[i], be = beta[i];
#pragma unroll
        for (int k = 0; k < V; k++)
            a[k] = al * a[k] + be * c[k];
        cuda_st<V>(cuda_row(y, ldy, i) + j, a);
    }
};

/* y[i, j] = scale[j] x[i, j] + shift[j] (shift may be NULL; y may alias x). */
struct cuda_affine_cols_f {
    float *y; int ldy;
    const float *x; int ldx;
    const float *scale, *shift;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V];
        cuda_ld<V>(a, cuda_row(x, ldx, i) + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            a[k] = scale[j + k] * a[k] + (shift ? shift[j + k] : 0.0f);
        cuda_st<V>(cuda_row(y, ldy, i) + j, a);
    }
};

/* y[i, j] (+)= bias[j] */
struct cuda_bias_f {
    float *y; int ldy;
    const float *bias;
    int accumulate;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V], bb[V];
        cuda_ld<V>(bb, bias + j);
        if (accumulate) {
            cuda_ld<V>(a, cuda_row((const float *)y, ldy, i) + j);
#pragma unroll
            for (int k = 0; k < V; k++)
                a[k] += bb[k];
            cuda_st<V>(cuda_row(y, ldy, i) + j, a);
        } else {
            cuda_st<V>(cuda_row(y, ldy, i) + j, bb);
        }
    }
};

/* The bf16 cast is cuda_map_f into bf16 with the identity; SiLU into bf16
 * is the trunk's SiLU output under bf16, which feeds only a matmul, in one
 * pass. */
struct cuda_ident_op {
    __device__ float operator()(float v) const { return v; }
};

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

template <class Op>
static int cuda_map(nn_backend *b, nn_tensor y, nn_tensor x, Op op, gt_error *err)
{
    cuda_map_f<Op> f = {(float *)y.data, y.ld, (const float *)x.data, x.ld, op};
    return cuda_ew2d(cuda_st(b), f, x.rows, x.cols, cuda_vec4_ok(y) && cuda_vec4_ok(x), err);
}

template <class Grad>
static int cuda_grad(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, Grad grad,
                     gt_error *err)
{
    cuda_grad_f<Grad> f = {(float *)dx.data, dx.ld, (const float *)dy.data, dy.ld,
                           (const float *)x.data, x.ld, grad};
    return cuda_ew2d(cuda_st(b), f, x.rows, x.cols,
                     cuda_vec4_ok(dx) && cuda_vec4_ok(dy) && cuda_vec4_ok(x), err);
}

static int cuda_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    if (y.dtype == NN_BF16) {
        cuda_map_f<cuda_silu_op, uint16_t> f = {(uint16_t *)y.data, y.ld, (const float *)x.data,
                                                x.ld, cuda_silu_op{}};
        return cuda_ew2d(cuda_st(b), f, x.rows, x.cols, cuda_vec4_ok(x) && cuda_vec4_out_ok(y),
                         err);
    }
    return cuda_map(b, y, x, cuda_silu_op{}, err);
}

static int cuda_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    return cuda_grad(b, dx, dy, x, cuda_silu_grad_op{}, err);
}

static int cuda_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err)
{
    return cuda_map(b, y, x, cuda_leaky_op{slope}, err);
}

static int cuda_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                          gt_error *err)
{
    return cuda_grad(b, dx, dy, x, cuda_leaky_grad_op{slope}, err);
}

static int cuda_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    cuda_add_f f = {(float *)y.data, y.ld, (const float *)x1.data, x1.ld,
                    (const float *)x2.data, x2.ld};
    return cuda_ew2d(cuda_st(b), f, y.rows, y.cols,
                     cuda_vec4_ok(y) && cuda_vec4_ok(x1) && cuda_vec4_ok(x2), err);
}

static int cuda_mul(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    cuda_mul_f f = {(float *)y.data, y.ld, (const float *)x1.data, x1.ld,
                    (const float *)x2.data, x2.ld};
    return cuda_ew2d(cuda_st(b), f, y.rows, y.cols,
                     cuda_vec4_ok(y) && cuda_vec4_ok(x1) && cuda_vec4_ok(x2), err);
}

static int cuda_axpby_rows(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                           const float *beta, nn_tensor z, gt_error *err)
{
    cuda_axpby_rows_f f = {(float *)y.data, y.ld, alpha, (const float *)x.data, x.ld,
                           beta, (const float *)z.data, z.ld};
    return cuda_ew2d(cuda_st(b), f, y.rows, y.cols,
                     cuda_vec4_ok(y) && cuda_vec4_ok(x) && cuda_vec4_ok(z), err);
}

static int cuda_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                            const float *shift, gt_error *err)
{
    cuda_affine_cols_f f = {(float *)y.data, y.ld, (const float *)x.data, x.ld, scale, shift};
    return cuda_ew2d(cuda_st(b), f, y.rows, y.cols, cuda_vec4_ok(y) && cuda_vec4_ok(x), err);
}

/* y (+)= bias broadcast over rows. */
static int cuda_bias_rows(cuda_state *s, nn_tensor y, const float *bias, int accumulate,
                          gt_error *err)
{
    cuda_bias_f f = {(float *)y.data, y.ld, bias, accumulate};
    return cuda_ew2d(s, f, y.rows, y.cols, cuda_vec4_ok(y) && cuda_aligned(bias, 16), err);
}

/* C = 0 over a (possibly strided) view. */
static int cuda_fill_zero(cuda_state *s, nn_tensor c, gt_error *err)
{
    if (c.rows <= 0 || c.cols <= 0)
        return GT_OK;
    CUDA_TRY(cudaMemset2DAsync(c.data, (size_t)c.ld * sizeof(float), 0,
                               (size_t)c.cols * sizeof(float), (size_t)c.rows, s->stream),
             err);
    return GT_OK;
}

static int cuda_cast_bf16(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    cuda_map_f<cuda_ident_op, uint16_t> f = {(uint16_t *)y.data, y.ld, (const float *)x.data,
                                             x.ld, cuda_ident_op{}};
    int vec = cuda_vec4_ok(x) && cuda_aligned(y.data, 8) && y.ld % 4 == 0;
    return cuda_ew2d(cuda_st(b), f, x.rows, x.cols, vec, err);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_act_ops(nn_backend_ops *o)
{
    o->silu_fwd = ON_DEV(cuda_silu_fwd);
    o->silu_bwd = ON_DEV(cuda_silu_bwd);
    o->leaky_fwd = ON_DEV(cuda_leaky_fwd);
    o->leaky_bwd = ON_DEV(cuda_leaky_bwd);
    o->add = ON_DEV(cuda_add);
    o->mul = ON_DEV(cuda_mul);
    o->cast_bf16 = ON_DEV(cuda_cast_bf16);
    o->axpby_rows = ON_DEV(cuda_axpby_rows);
    o->affine_cols = ON_DEV(cuda_affine_cols);
}

#endif
