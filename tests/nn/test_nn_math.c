/* Tests of nn_math.h and nn_rng.h: the arithmetic shared with the CUDA
 * kernels (bf16 conversion bit-exact, Philox known answers, stick-breaking,
 * AdamW element update against a double-precision reference). */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "nn_math.h"
#include "nn_rng.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void)
{
    /* exact values pass through */
    CHECK_EQ_INT(nn_bf16_from_f32(1.0f), 0x3f80);
    CHECK_EQ_INT(nn_bf16_from_f32(-2.0f), 0xc000);
    CHECK_EQ_INT(nn_bf16_from_f32(0.0f), 0x0000);
    CHECK_EQ_INT(nn_bf16_from_f32(-0.0f), 0x8000);
    /* ties go to even: 0x3f808000 is halfway between 0x3f80 and 0x3f81 */
    CHECK_EQ_INT(nn_bf16_from_f32(from_bits(0x3f808000u)), 0x3f80);
    CHECK_EQ_INT(nn_bf16_from_f32(from_bits(0x3f818000u)), 0x3f82);
    /* just above / below halfway */
    CHECK_EQ_INT(nn_bf16_from_f32(from_bits(0x3f808001u)), 0x3f81);
    CHECK_EQ_INT(nn_bf16_from_f32(from_bits(0x3f807fffu)), 0x3f80);
    /* infinities, overflow to infinity, NaN stays NaN (quiet) */
    CHECK_EQ_INT(nn_bf16_from_f32(INFINITY), 0x7f80);
    CHECK_EQ_INT(nn_bf16_from_f32(-INFINITY), 0xff80);
    CHECK_EQ_INT(nn_bf16_from_f32(from_bits(0x7f7fffffu)), 0x7f80);
    uint16_t qn = nn_bf16_from_f32(from_bits(0x7f800001u)); /* signalling NaN */
    CHECK(isnan(nn_f32_from_bf16(qn)));
    CHECK((qn & 0x0040) != 0);
    /* subnormals round too */
    CHECK_EQ_INT(nn_bf16_from_f32(from_bits(0x00018000u)), 0x0002);
    /* round trip of every bf16 value is the identity (NaNs excepted) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nn_f32_from_bf16((uint16_t)h);
        if (!isnan(f) && nn_bf16_from_f32(f) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* against a brute-force nearest search on random values */
    uint32_t s = 12345;
    for (int i = 0; i < 20000; i++) {
        s = s * 1664525u + 1013904223u;
        float f = from_bits((s & 0x3fffffffu) | 0x3000000u);
        uint16_t lo = (uint16_t)(s >> 16 & 0x3fff), best = 0;
        (void)lo;
        uint16_t t = (uint16_t)(((s & 0x3fffffffu) | 0x3000000u) >> 16);
        double e0 = fabs((double)nn_f32_from_bf16(t) - f);
        double e1 = fabs((double)nn_f32_from_bf16((uint16_t)(t + 1)) - f);
        best = e1 < e0 ? (uint16_t)(t + 1) : (e0 < e1 ? t : ((t & 1) ? (uint16_t)(t + 1) : t));
        if (nn_bf16_from_f32(f) != best)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_philox(void)
{
    /* Known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds). */
    uint32_t out[4];
    uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    nn_philox4x32_10(c0, k0, out);
    CHECK_EQ_INT(out[0], 0x6627e8d5u);
    CHECK_EQ_INT(out[1], 0xe169c58du);
    CHECK_EQ_INT(out[2], 0xbc57ac4cu);
    CHECK_EQ_INT(out[3], 0x9b00dbd8u);
    uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    uint32_t k1[2] = {0xffffffffu, 0xffffffffu};
    nn_philox4x32_10(c1, k1, out);
    CHECK_EQ_INT(out[0], 0x408f276du);
    CHECK_EQ_INT(out[3], 0x6d5451fdu);
    uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
    uint32_t k2[2] = {0xa4093822u, 0x299f31d0u};
    nn_philox4x32_10(c2, k2, out);
    CHECK_EQ_INT(out[0], 0xd16cfe09u);
    CHECK_EQ_INT(out[1], 0x94fdccebu);
    CHECK_EQ_INT(out[2], 0x5001e420u);
    CHECK_EQ_INT(out[3], 0x24126ea1u);

    /* normals: mean 0, variance 1 over 4e5 draws (5 sigma bounds) */
    double s1 = 0, s2 = 0, umin = 1, umax = 0;
    int n = 400000;
    for (int q = 0; q < n / 4; q++) {
        uint32_t r[4];
        nn_rng_block(42, 7, (uint64_t)q, r);
        for (int l = 0; l < 4; l++) {
            double z = nn_rng_normal_lane(r, l);
            CHECK(isfinite(z));
            s1 += z;
            s2 += z * z;
            double u = nn_rng_uniform(r[l]);
            umin = u < umin ? u : umin;
            umax = u > umax ? u : umax;
        }
    }
    double mean = s1 / n, var = s2 / n - mean * mean;
    CHECK_MSG(fabs(mean) < 5.0 / sqrt(n), "normal mean %g", mean);
    CHECK_MSG(fabs(var - 1.0) < 5.0 * sqrt(2.0 / n), "normal variance %g", var);
    CHECK(umin >= 0.0 && umax < 1.0);
    /* different streams and seeds give different numbers */
    uint32_t a[4], b[4], c[4];
    nn_rng_block(1, 0, 0, a);
    nn_rng_block(1, 1, 0, b);
    nn_rng_block(2, 0, 0, c);
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* host state advances by blocks */
    nn_rng r = nn_rng_make(9, 3);
    CHECK_EQ_INT(nn_rng_take(&r, 5), 0);
    CHECK_EQ_INT(r.offset, 2);
    CHECK_EQ_INT(nn_rng_take(&r, 4), 2);
    CHECK_EQ_INT(r.offset, 3);
}

static void test_stick_breaking(void)
{
    enum { L = 9 };
    float z[L - 1] = {-2.0f, 0.5f, 1.5f, -0.3f, 3.0f, -4.0f, 0.0f, 2.2f};
    float f[L], z2[L - 1], scratch[L];
    nn_sb_fwd_row(z, f, L);
    double s = 0;
    for (int l = 0; l < L; l++) {
        CHECK(f[l] >= 0.0f);
        s += f[l];
    }
    CHECK_CLOSE(s, 1.0, 1e-6, 0);
    nn_sb_inv_row(f, z2, L, 1e-6f, scratch);
    for (int l = 0; l < L - 1; l++)
        CHECK_CLOSE(z2[l], z[l], 2e-4, 1e-4);
    /* u_l = E_l / sum_{j>=l} E_j on explicit energies */
    float E[4] = {3.0f, 1.0f, 0.0f, 4.0f}, tot = 8.0f, fr[4], zz[3], sc[4], back[4];
    for (int l = 0; l < 4; l++)
        fr[l] = E[l] / tot;
    nn_sb_inv_row(fr, zz, 4, 1e-7f, sc);
    CHECK_CLOSE(nn_sigmoid(zz[0]), 3.0 / 8.0, 1e-6, 0);
    CHECK_CLOSE(nn_sigmoid(zz[1]), 1.0 / 5.0, 1e-6, 0);
    nn_sb_fwd_row(zz, back, 4);
    for (int l = 0; l < 4; l++)
        CHECK_CLOSE(back[l], fr[l], 1e-6, 0);
}

static void test_adamw_elem(void)
{
    /* three updates against a double-precision transcription of
     * torch.optim.AdamW */
    float p = 0.7f, m = 0.0f, v = 0.0f;
    double pd = 0.7, md = 0.0, vd = 0.0;
    float g[3] = {0.3f, -1.2f, 0.05f};
    double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 3; t++) {
        nn_adamw_hp hp = nn_adamw_hp_make((float)lr, (float)b1, (float)b2, (float)eps,
                                          (float)wd, t, 0.5f);
        nn_adamw_elem(&p, &m, &v, g[t - 1], &hp);
        double gg = 0.5 * g[t - 1];
        pd *= 1 - lr * wd;
        md = b1 * md + (1 - b1) * gg;
        vd = b2 * vd + (1 - b2) * gg * gg;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        pd -= lr / bc1 * md / (sqrt(vd) / sqrt(bc2) + eps);
        CHECK_CLOSE(p, pd, 1e-6, 1e-5);
        CHECK_CLOSE(m, md, 1e-7, 1e-5);
        /* (1 - beta2) in fp32 is 0.00099998713: 1.3e-5 relative */
        CHECK_CLOSE(v, vd, 1e-9, 5e-5);
    }
}

static void test_elementwise(void)
{
    /* derivatives against central differences in double around fp32 points */
    float xs[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f};
    for (int i = 0; i < 5; i++) {
        double x = xs[i], h = 1e-3;
        double fd = (nn_silu((float)(x + h)) - nn_silu((float)(x - h))) / (2 * h);
        CHECK_CLOSE(nn_silu_grad(xs[i]), fd, 1e-3, 1e-3);
        double fl = (nn_leaky((float)(x + h), 0.2f) - nn_leaky((float)(x - h), 0.2f)) / (2 * h);
        if (xs[i] != 0.0f)
            CHECK_CLOSE(nn_leaky_grad(xs[i], 0.2f), fl, 1e-3, 1e-3);
        float t = xs[i];
        for (int j = 0; j < 8; j++) {
            double fe = (nn_embed_elem(t + 1e-3f, j, 8, 100.0f) -
                         nn_embed_elem(t - 1e-3f, j, 8, 100.0f)) / 2e-3;
            CHECK_CLOSE(nn_embed_elem_grad(t, j, 8, 100.0f), fe, 2e-3, 2e-3);
        }
    }
    /* softmax row sums to 1 and is shift invariant */
    float x[4] = {1.0f, 2.0f, 3.0f, 1000.0f}, y[4];
    nn_softmax_row(x, y, 4);
    CHECK_CLOSE(y[0] + y[1] + y[2] + y[3], 1.0, 1e-6, 0);
    CHECK(isfinite(y[3]) && y[3] > 0.99f);
    /* LayerNorm stats are exact on a simple row */
    float r[4] = {1, 2, 3, 4}, mu, rs;
    nn_ln_row_stats(r, 4, 0.0f, &mu, &rs);
    CHECK_CLOSE(mu, 2.5, 1e-7, 0);
    CHECK_CLOSE(rs, 1.0 / sqrt(1.25), 1e-6, 0);
    /* entropy term at 0 is finite (the epsilon) */
    CHECK(isfinite(nn_entropy_term(0.0f)) && isfinite(nn_entropy_grad(0.0f)));
}

int main(void)
{
    test_bf16();
    test_philox();
    test_stick_breaking();
    test_adamw_elem();
    test_elementwise();
    return check_finish();
}
