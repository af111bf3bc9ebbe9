/* cuda_adamw: the fused AdamW update over the single parameter buffer:
 * reads grad, m, v and the fp32 master weight, writes m, v, the master
 * weight and (when asked) its bf16 working copy, in one pass with 16-byte
 * accesses when all buffers are aligned.  Per-element math: nn_adamw_elem.
 * Kernels first, launchers after. */
#ifndef CUDA_ADAMW_CUH
#define CUDA_ADAMW_CUH

#include "cuda_common.cuh"

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* Item t covers elements [4t, 4t+4) when vec (and all four exist), else the
 * single element t.  The hyper-parameters and the gradient's sum of squares
 * are read from device memory when the kernel runs, so a captured graph
 * replays with the values of the step it is launched for; every thread
 * computes the same clipping factor from the same two words. */
__global__ void cuda_adamw_kernel(float *param, uint16_t *pbf, const float *grad, float *m,
                                  float *v, long long n, const nn_adamw_hp *hpp,
                                  const float *sumsq, int vec)
{
    nn_adamw_hp hp = *hpp;
    if (sumsq && !nn_adamw_hp_clip(&hp, *sumsq))
        return;   /* non-finite norm: nothing changes */
    long long items = vec ? (n + 3) / 4 : n;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < items;
         t += (long long)gridDim.x * blockDim.x) {
        if (vec && 4 * t + 4 <= n) {
            float4 p4 = reinterpret_cast<float4 *>(param)[t];
            float4 m4 = reinterpret_cast<float4 *>(m)[t];
            float4 v4 = reinterpret_cast<float4 *>(v)[t];
            float4 g4 = reinterpret_cast<const float4 *>(grad)[t];
            nn_adamw_elem(&p4.x, &m4.x, &v4.x, g4.x, &hp);
            nn_adamw_elem(&p4.y, &m4.y, &v4.y, g4.y, &hp);
            nn_adamw_elem(&p4.z, &m4.z, &v4.z, g4.z, &hp);
            nn_adamw_elem(&p4.w, &m4.w, &v4.w, g4.w, &hp);
            reinterpret_cast<float4 *>(param)[t] = p4;
            reinterpret_cast<float4 *>(m)[t] = m4;
            reinterpret_cast<float4 *>(v)[t] = v4;
            if (pbf) {
                uint2 o;
                o.x = (uint32_t)nn_bf16_from_f32(p4.x) | ((uint32_t)nn_bf16_from_f32(p4.y) << 16);
                o.y = (uint32_t)nn_bf16_from_f32(p4.z) | ((uint32_t)nn_bf16_from_f32(p4.w) << 16);
                reinterpret_cast<uint2 *>(pbf)[t] = o;
            }
        } else {
            long long e0 = vec ? 4 * t : t;
            long long e1 = vec ? (4 * t + 4 < n ? 4 * t + 4 : n) : t + 1;
            for (long long e = e0; e < e1; e++) {
                float p = param[e], mm = m[e], vv = v[e];
                nn_adamw_elem(&p, &mm, &vv, grad[e], &hp);
                param[e] = p;
                m[e] = mm;
                v[e] = vv;
                if (pbf)
                    pbf[e] = nn_bf16_from_f32(p);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

static int cuda_adamw(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad,
                      float *m, float *v, size_t n, const nn_adamw_hp *hp, const float *sumsq,
                      gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (n == 0)
        return GT_OK;
    int vec = cuda_aligned(param, 16) && cuda_aligned(grad, 16) && cuda_aligned(m, 16) &&
              cuda_aligned(v, 16) && (!param_bf16 || cuda_aligned(param_bf16, 8));
    long long items = vec ? ((long long)n + 3) / 4 : (long long)n;
    cuda_adamw_kernel<<<cuda_grid(s, items), CUDA_THREADS, 0, s->stream>>>(
        param, param_bf16, grad, m, v, (long long)n, hp, sumsq, vec);
    CUDA_LAUNCHED("cuda_adamw_kernel", err);
    return GT_OK;
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_adamw_ops(nn_backend_ops *o)
{
    o->adamw = ON_DEV(cuda_adamw);
}

#endif
