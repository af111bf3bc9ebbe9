/* nn_math: the per-element and per-row arithmetic of every op.
 *
 * Each function is `static inline NN_HD`, i.e. __host__ __device__ under
 * nvcc, so the CPU backend and the CUDA kernels run the same formulas and the
 * CPU tests cover the arithmetic of both.  Only what is the same on both
 * sides lives here: reductions that a GPU does in parallel (row sums, column
 * sums) use these functions per element and their own summation order.
 *
 * This header is valid C11 and C++ (nvcc compiles .cu files as C++). */
#ifndef NN_MATH_H
#define NN_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define NN_HD __host__ __device__
#else
#define NN_HD
#endif

/* Added inside log() of the router entropy.  1e-8 is representable in fp32
 * and bf16 alike; the entropy is always computed in fp32. */
#define NN_ENTROPY_EPS 1e-8f

/* ------------------------------------------------------------------------ */
/* bf16: bit-exact conversions                                              */
/* ------------------------------------------------------------------------ */

/* fp32 -> bf16, round to nearest, ties to even; NaN stays a (quiet) NaN,
 * infinities stay infinite, values past the largest bf16 round to inf. */
NN_HD static inline uint16_t nn_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

NN_HD static inline float nn_f32_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 value rounded through bf16 (the emulated matmul input). */
NN_HD static inline float nn_bf16_round(float f)
{
    return nn_f32_from_bf16(nn_bf16_from_f32(f));
}

/* ------------------------------------------------------------------------ */
/* activations                                                              */
/* ------------------------------------------------------------------------ */

/* e^x as one fixed sequence of IEEE operations (no libm), so that scalar
 * and vector code compute the same bits on every CPU; every SiLU uses it
 * (the fixed-order linear layer's, engine/cpu/cpu_fixed.h, and training's
 * elementwise ops).  Inputs are clamped to
 * [-87, 88] first (with the compare-select semantics of SSE min/max, so a
 * NaN input becomes 88 as it does in the vector code); in that range
 * x = n ln2 + r, |r| <= ln2/2, e^r by Cephes' expf polynomial (about
 * 1 ulp), times 2^n built in the exponent field. */
#define NN_EXP_FIXED_HI 88.0f
#define NN_EXP_FIXED_LO -87.0f
#define NN_EXP_FIXED_LOG2E 1.44269504f
#define NN_EXP_FIXED_SHIFT 12582912.0f        /* 1.5 * 2^23: rounds to an integer */
#define NN_EXP_FIXED_LN2_HI 0.693359375f      /* 8 significant bits: n * it is exact */
#define NN_EXP_FIXED_LN2_LO -2.12194440e-4f   /* ln2 - LN2_HI */
#define NN_EXP_FIXED_P5 1.9875691500e-4f
#define NN_EXP_FIXED_P4 1.3981999507e-3f
#define NN_EXP_FIXED_P3 8.3334519073e-3f
#define NN_EXP_FIXED_P2 4.1665795894e-2f
#define NN_EXP_FIXED_P1 1.6666665459e-1f
#define NN_EXP_FIXED_P0 5.0000001201e-1f

NN_HD static inline float nn_exp_fixed(float x)
{
    x = x < NN_EXP_FIXED_HI ? x : NN_EXP_FIXED_HI;   /* _mm_min_ps(x, HI) */
    x = x > NN_EXP_FIXED_LO ? x : NN_EXP_FIXED_LO;   /* _mm_max_ps(x, LO) */
    float n = (x * NN_EXP_FIXED_LOG2E + NN_EXP_FIXED_SHIFT) - NN_EXP_FIXED_SHIFT;
    float r = fmaf(n, -NN_EXP_FIXED_LN2_HI, x);
    r = fmaf(n, -NN_EXP_FIXED_LN2_LO, r);
    float p = NN_EXP_FIXED_P5;
    p = fmaf(p, r, NN_EXP_FIXED_P4);
    p = fmaf(p, r, NN_EXP_FIXED_P3);
    p = fmaf(p, r, NN_EXP_FIXED_P2);
    p = fmaf(p, r, NN_EXP_FIXED_P1);
    p = fmaf(p, r, NN_EXP_FIXED_P0);
    float y = fmaf(p, r * r, r) + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return y * scale;
}

/* SiLU of the fixed-order linear layer: x / (1 + e^-x), one division;
 * below -88, where e^-x is past the clamp, -0 (the true value is under
 * 6e-37 in magnitude).  NaN stays NaN, +inf stays +inf. */
#define NN_SILU_FIXED_FLOOR -88.0f

NN_HD static inline float nn_silu_fixed(float x)
{
    float s = x / (1.0f + nn_exp_fixed(-x));
    return x < NN_SILU_FIXED_FLOOR ? -0.0f : s;
}

/* Training's SiLU is the same function, so a trunk computes one SiLU
 * whether it trains, validates or samples; and with no libm call in it the
 * CPU's elementwise loops vectorise (engine/cpu/cpu_act.c) and give the
 * same bits at every vector width. */
NN_HD static inline float nn_silu(float x)
{
    return nn_silu_fixed(x);
}

/* 1 / (1 + e^-x) on the same exponential; past the clamp, about 1.6e-38
 * below -87 and exactly 1 above 88. */
NN_HD static inline float nn_sigmoid(float x)
{
    return 1.0f / (1.0f + nn_exp_fixed(-x));
}

/* d silu / dx = s (1 + x (1 - s)), s = sigmoid(x) */
NN_HD static inline float nn_silu_grad(float x)
{
    float s = nn_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

NN_HD static inline float nn_leaky(float x, float slope)
{
    return x > 0.0f ? x : slope * x;
}

NN_HD static inline float nn_leaky_grad(float x, float slope)
{
    return x > 0.0f ? 1.0f : slope;
}

/* ------------------------------------------------------------------------ */
/* LayerNorm                                                                */
/* ------------------------------------------------------------------------ */

/* Two-pass fp32 statistics of one row (the two passes avoid the
 * cancellation of E[x^2] - E[x]^2 when the mean is large). */
NN_HD static inline void nn_ln_row_stats(const float *x, int n, float eps, float *mean,
                                         float *rstd)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += x[i];
    float mu = s / (float)n;
    float v = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = x[i] - mu;
        v += d * d;
    }
    v /= (float)n;
    *mean = mu;
    *rstd = 1.0f / sqrtf(v + eps);
}

NN_HD static inline float nn_ln_elem(float x, float mean, float rstd, float gamma, float beta)
{
    return (x - mean) * rstd * gamma + beta;
}

/* Partial sums of the backward's row sums: element i goes to lane
 * i % NN_LN_BWD_LANES, and the lanes are added in a fixed pairwise tree.
 * Sixteen independent chains instead of one let a CPU vectorise the sums
 * (one serial chain of fp32 adds was most of the backward's time), and the
 * order, fixed here, does not depend on the vector width. */
#define NN_LN_BWD_LANES 16

/* dx for one row: with xhat = (x - mean) rstd and g = dy * gamma,
 * dx = rstd (g - mean(g) - xhat mean(g xhat)).  accumulate: dx += ... */
NN_HD static inline void nn_ln_row_bwd(const float *x, const float *dy, const float *gamma,
                                       float mean, float rstd, int n, float *dx, int accumulate)
{
    float pg[NN_LN_BWD_LANES], pgx[NN_LN_BWD_LANES];
    for (int k = 0; k < NN_LN_BWD_LANES; k++)
        pg[k] = pgx[k] = 0.0f;
    int body = n - n % NN_LN_BWD_LANES;
    for (int i = 0; i < body; i += NN_LN_BWD_LANES)
        for (int k = 0; k < NN_LN_BWD_LANES; k++) {
            float g = dy[i + k] * gamma[i + k];
            float xh = (x[i + k] - mean) * rstd;
            pg[k] += g;
            pgx[k] += g * xh;
        }
    for (int i = body; i < n; i++) {
        float g = dy[i] * gamma[i];
        float xh = (x[i] - mean) * rstd;
        pg[i - body] += g;
        pgx[i - body] += g * xh;
    }
    for (int w = NN_LN_BWD_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) {
            pg[k] += pg[k + w];
            pgx[k] += pgx[k + w];
        }
    float sg = pg[0] / (float)n, sgx = pgx[0] / (float)n;
    for (int i = 0; i < n; i++) {
        float g = dy[i] * gamma[i];
        float xh = (x[i] - mean) * rstd;
        float d = rstd * (g - sg - xh * sgx);
        dx[i] = accumulate ? dx[i] + d : d;
    }
}

/* ------------------------------------------------------------------------ */
/* softmax and router losses                                                */
/* ------------------------------------------------------------------------ */

NN_HD static inline void nn_softmax_row(const float *x, float *y, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        s += y[i];
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++)
        y[i] *= inv;
}

/* -p log(p + eps), one term of the gate entropy */
NN_HD static inline float nn_entropy_term(float p)
{
    return -p * logf(p + NN_ENTROPY_EPS);
}

/* d(-p log(p + eps))/dp */
NN_HD static inline float nn_entropy_grad(float p)
{
    return -(logf(p + NN_ENTROPY_EPS) + p / (p + NN_ENTROPY_EPS));
}

/* ------------------------------------------------------------------------ */
/* sinusoidal embedding of a scalar condition                               */
/* ------------------------------------------------------------------------ */

/* Feature j of emb_dim (even): the first half sin(t w_j), the second half
 * cos(t w_j), with w_j = max_period^(-j/half), j < half. */
NN_HD static inline float nn_embed_freq(int j, int emb_dim, float max_period)
{
    int half = emb_dim / 2;
    return expf(-logf(max_period) * (float)j / (float)half);
}

NN_HD static inline float nn_embed_elem(float t, int j, int emb_dim, float max_period)
{
    int half = emb_dim / 2;
    if (j < half)
        return sinf(t * nn_embed_freq(j, emb_dim, max_period));
    return cosf(t * nn_embed_freq(j - half, emb_dim, max_period));
}

/* d nn_embed_elem / dt */
NN_HD static inline float nn_embed_elem_grad(float t, int j, int emb_dim, float max_period)
{
    int half = emb_dim / 2;
    if (j < half) {
        float w = nn_embed_freq(j, emb_dim, max_period);
        return w * cosf(t * w);
    }
    float w = nn_embed_freq(j - half, emb_dim, max_period);
    return -w * sinf(t * w);
}

/* ------------------------------------------------------------------------ */
/* stick-breaking: L-1 logits <-> L layer fractions                          */
/* ------------------------------------------------------------------------ */

/* u_l = sigmoid(z_l) for l < L-1, u_{L-1} = 1;
 * f_l = u_l R_l with R_l = prod_{j<l} (1 - u_j), an fp32 cumulative
 * product, so sum_l f_l = 1 exactly in real arithmetic. */
NN_HD static inline void nn_sb_fwd_row(const float *z, float *f, int L)
{
    float rem = 1.0f;
    for (int l = 0; l < L - 1; l++) {
        float u = nn_sigmoid(z[l]);
        f[l] = u * rem;
        rem *= 1.0f - u;
    }
    f[L - 1] = rem;
}

/* dz from df.  dL/du_m = R_m (df_m - G_m) with
 * G_m = sum_{l>m} df_l u_l prod_{m<j<l} (1 - u_j), computed backwards as
 * G_{m} = df_{m+1} u_{m+1} + (1 - u_{m+1}) G_{m+1}, G_{L-1} = 0 (u_{L-1} = 1),
 * which needs no division by (1 - u).  dz_m = dL/du_m u_m (1 - u_m).
 * scratch: L floats (holds R_m between the passes). */
NN_HD static inline void nn_sb_bwd_row(const float *z, const float *df, float *dz, int L,
                                       float *scratch, int accumulate)
{
    float rem = 1.0f;
    for (int l = 0; l < L - 1; l++) {
        scratch[l] = rem;
        rem *= 1.0f - nn_sigmoid(z[l]);
    }
    /* G_{L-2} = df_{L-1} * u_{L-1} (= 1) */
    float G = df[L - 1];
    for (int m = L - 2; m >= 0; m--) {
        float u = nn_sigmoid(z[m]);
        float du = scratch[m] * (df[m] - G);
        float d = du * u * (1.0f - u);
        dz[m] = accumulate ? dz[m] + d : d;
        G = df[m] * u + (1.0f - u) * G;
    }
}

/* Inverse: u_l = f_l / sum_{j>=l} f_j (suffix sums, not 1 - prefix, so small
 * tails keep their precision), clamped to [eps, 1 - eps], z_l = logit(u_l). */
NN_HD static inline void nn_sb_inv_row(const float *f, float *z, int L, float eps,
                                       float *scratch)
{
    float s = 0.0f;
    for (int l = L - 1; l >= 0; l--) {
        s += f[l];
        scratch[l] = s;
    }
    for (int l = 0; l < L - 1; l++) {
        float u = scratch[l] > 0.0f ? f[l] / scratch[l] : 0.5f;
        u = u < eps ? eps : (u > 1.0f - eps ? 1.0f - eps : u);
        z[l] = logf(u) - logf(1.0f - u);
    }
}

/* ------------------------------------------------------------------------ */
/* routing: top-k of one row of gate probabilities                          */
/* ------------------------------------------------------------------------ */

/* The k largest of p[0..E) in descending order (ties: lower index first)
 * into ix[0..k), and their weights renormalised to sum 1 into w[0..k).
 * Selection by k passes: E is a handful of experts. */
NN_HD static inline void nn_topk_row(const float *p, int E, int k, int32_t *ix, float *w)
{
    float sum = 0.0f;
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < s; q++)
                taken |= ix[q] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        if (best < 0)
            best = 0; /* k > E: the wrapper rejects it before here */
        ix[s] = best;
        w[s] = p[best];
        sum += p[best];
    }
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int s = 0; s < k; s++)
        w[s] *= inv;
}

/* Gradient of the renormalised weights w.r.t. the probabilities, zero
 * outside the top k: dp_j (+)= (dw_j - sum_i dw_i w_i) / S, S = sum of the
 * selected p. */
NN_HD static inline void nn_topk_bwd_row(const float *p, const int32_t *ix, const float *w,
                                         const float *dw, int E, int k, int accumulate,
                                         float *dp)
{
    if (!accumulate)
        for (int e = 0; e < E; e++)
            dp[e] = 0.0f;
    float S = 0.0f, dot = 0.0f;
    for (int s = 0; s < k; s++) {
        S += p[ix[s]];
        dot += dw[s] * w[s];
    }
    if (S <= 0.0f)
        return;
    for (int s = 0; s < k; s++)
        dp[ix[s]] += (dw[s] - dot) / S;
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                    */
/* ------------------------------------------------------------------------ */

/* Hyper-parameters of one AdamW update, with the bias corrections folded in
 * (nn_adamw_hp_make).  The update matches torch.optim.AdamW:
 *   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps),  g = grad * grad_scale */
typedef struct nn_adamw_hp {
    float beta1, beta2, eps;
    float decay;          /* 1 - lr * weight_decay */
    float step_size;      /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2;   /* 1 / sqrt(1 - beta2^t) */
    float grad_scale;     /* multiplies the gradient (1 = as it is) */
    float clip_norm;      /* > 0: nn_adamw_hp_clip clips the norm to this */
} nn_adamw_hp;

/* t >= 1 is the step number after this update. */
static inline nn_adamw_hp nn_adamw_hp_make(float lr, float beta1, float beta2, float eps,
                                           float weight_decay, long long t, float grad_scale)
{
    nn_adamw_hp hp;
    hp.beta1 = beta1;
    hp.beta2 = beta2;
    hp.eps = eps;
    hp.decay = 1.0f - lr * weight_decay;
    hp.step_size = (float)((double)lr / (1.0 - pow((double)beta1, (double)t)));
    hp.inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow((double)beta2, (double)t)));
    hp.grad_scale = grad_scale;
    hp.clip_norm = 0.0f;
    return hp;
}

/* Clipping by global norm, decided where the update runs (on the device:
 * no read-back between the gradient and the update, so one captured graph
 * holds a whole training step).  sumsq is the sum of squares of the raw
 * gradient; the norm is of grad_scale * grad.  Returns 0 when the norm is
 * not finite (the update must then leave everything unchanged), else
 * folds the clipping factor into hp->grad_scale (unchanged when the norm
 * is within clip_norm or clipping is off) and returns 1.  The host's
 * nn_adamw_step once did exactly this arithmetic, so a run's bits are the
 * same as before it moved. */
NN_HD static inline int nn_adamw_hp_clip(nn_adamw_hp *hp, float sumsq)
{
    float norm = sqrtf(sumsq);
    if (hp->grad_scale != 1.0f)
        norm *= hp->grad_scale;
    if (!(norm <= 3.40282347e38f))   /* NaN or infinity (a norm is >= 0) */
        return 0;
    if (hp->clip_norm > 0.0f && norm > hp->clip_norm)
        hp->grad_scale = hp->grad_scale * (hp->clip_norm / (norm + 1e-6f));
    return 1;
}

NN_HD static inline void nn_adamw_elem(float *p, float *m, float *v, float grad,
                                       const nn_adamw_hp *hp)
{
    float g = grad * hp->grad_scale;
    float mm = hp->beta1 * *m + (1.0f - hp->beta1) * g;
    float vv = hp->beta2 * *v + (1.0f - hp->beta2) * g * g;
    float pp = *p * hp->decay;
    pp -= hp->step_size * mm / (sqrtf(vv) * hp->inv_sqrt_bc2 + hp->eps);
    *m = mm;
    *v = vv;
    *p = pp;
}

#endif
