/* cpu_embed: the sinusoidal embedding of scalar conditions. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* The frequencies w_j depend on the column only: computed once per call
 * (the same nn_embed_freq, so the same bits as nn_embed_elem), they save an
 * expf and a logf per element.  Up to this many (emb_dim 512, the config's
 * ceiling); a larger embedding computes them per element. */
#define EMBED_FREQS 256

static int embed_freqs(float *w, int emb_dim, float max_period)
{
    int half = emb_dim / 2;
    if (half > EMBED_FREQS)
        return 0;
    for (int j = 0; j < half; j++)
        w[j] = nn_embed_freq(j, emb_dim, max_period);
    return 1;
}

static int cpu_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                         float max_period, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = cond.rows, nc = cond.cols, half = emb_dim / 2;
    float w[EMBED_FREQS];
    int cached = embed_freqs(w, emb_dim, max_period);
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        const float *cr = ROW(cond, i);
        float *yr = ROW(y, i);
        for (int c = 0; c < nc; c++) {
            float t = cr[c] * scale, *yc = yr + (size_t)c * emb_dim;
            if (!cached) {
                for (int j = 0; j < emb_dim; j++)
                    yc[j] = nn_embed_elem(t, j, emb_dim, max_period);
                continue;
            }
            for (int j = 0; j < half; j++)
                yc[j] = sinf(t * w[j]);
            for (int j = 0; j < half; j++)
                yc[half + j] = cosf(t * w[j]);
        }
    }
    return GT_OK;
}

static int cpu_embed_bwd(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond,
                         int emb_dim, float scale, float max_period, int accumulate,
                         gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = cond.rows, nc = cond.cols, half = emb_dim / 2;
    float w[EMBED_FREQS];
    int cached = embed_freqs(w, emb_dim, max_period);
    CPU_FOR_ROWS(i, rows, NUMEL(dy)) {
        const float *cr = ROW(cond, i), *dyr = ROW(dy, i);
        float *dr = ROW(dcond, i);
        for (int c = 0; c < nc; c++) {
            float t = cr[c] * scale, acc = 0.0f;
            const float *dyc = dyr + (size_t)c * emb_dim;
            for (int j = 0; j < emb_dim; j++) {
                float g;
                if (!cached)
                    g = nn_embed_elem_grad(t, j, emb_dim, max_period);
                else if (j < half)
                    g = w[j] * cosf(t * w[j]);
                else
                    g = -w[j - half] * sinf(t * w[j - half]);
                acc += dyc[j] * g;
            }
            acc *= scale;
            dr[c] = accumulate ? dr[c] + acc : acc;
        }
    }
    return GT_OK;
}

void cpu_embed_ops(nn_backend_ops *o)
{
    o->embed_fwd = cpu_embed_fwd;
    o->embed_bwd = cpu_embed_bwd;
}
