/* The binary shower layout of api/README.md in the client library
 * (gc_showers_*): the encoding is the documented bytes, it decodes back bit
 * for bit (NaN, infinities, -0 and subnormals included), and the decoder
 * refuses every truncated, extended or inconsistent buffer with an error
 * instead of reading past it or allocating what a hostile header asks. */
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "giant_client.h"

static uint32_t u32_at(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32_at(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Decodes buf and expects a refusal with GT_EFORMAT and an empty result. */
static void expect_refused(const unsigned char *buf, size_t len, const char *why)
{
    gc_showers d;
    gt_error err = {0};
    int rc = gc_showers_decode(buf, len, &d, &err);
    CHECK_MSG(rc == GT_EFORMAT, "%s: rc %d", why, rc);
    CHECK_MSG(err.message[0] != '\0', "%s: no message", why);
    CHECK_MSG(!d.layer_voxels && !d.energies && !d.showers && d.n == 0, "%s: output not empty",
              why);
    gc_showers_free(&d);
}

int main(void)
{
    /* Three layers, one of them empty, as a geometry may have. */
    int layers[] = {3, 0, 5};
    enum { N = 4, V = 8, L = 3 };
    float energies[N] = {1000.0f, 2.5e5f, 1e-40f /* subnormal */, 7.0f};
    float showers[N * V];
    for (int i = 0; i < N * V; i++)
        showers[i] = (float)i * 0.25f - 1.0f;
    showers[3] = NAN;
    showers[4] = INFINITY;
    showers[5] = -0.0f;
    showers[6] = -INFINITY;
    gc_showers s = {N, V, L, layers, energies, showers};

    size_t len = gc_showers_size(N, V, L);
    CHECK_EQ_INT(len, 20 + 4 * L + 4 * N + 4 * N * V);
    unsigned char *buf = malloc(len + 1);
    gt_error err = {0};
    CHECK_EQ_INT(gc_showers_encode(&s, buf, len, &err), GT_OK);

    /* The documented bytes. */
    CHECK(memcmp(buf, "GSHW", 4) == 0);
    CHECK_EQ_INT(u32_at(buf + 4), 1);
    CHECK_EQ_INT(u32_at(buf + 8), N);
    CHECK_EQ_INT(u32_at(buf + 12), V);
    CHECK_EQ_INT(u32_at(buf + 16), L);
    for (int l = 0; l < L; l++)
        CHECK_EQ_INT(u32_at(buf + 20 + 4 * l), layers[l]);
    static const unsigned char thousand[4] = {0x00, 0x00, 0x7a, 0x44};   /* 1000.0f */
    CHECK(memcmp(buf + 20 + 4 * L, thousand, 4) == 0);
    static const unsigned char minus_one[4] = {0x00, 0x00, 0x80, 0xbf};  /* -1.0f */
    CHECK(memcmp(buf + 20 + 4 * L + 4 * N, minus_one, 4) == 0);

    /* Round trip, bit for bit. */
    gc_showers d;
    CHECK_EQ_INT(gc_showers_decode(buf, len, &d, &err), GT_OK);
    CHECK_EQ_INT(d.n, N);
    CHECK_EQ_INT(d.voxels, V);
    CHECK_EQ_INT(d.layers, L);
    CHECK(d.layer_voxels && memcmp(d.layer_voxels, layers, sizeof layers) == 0);
    CHECK(d.energies && memcmp(d.energies, energies, sizeof energies) == 0);
    CHECK(d.showers && memcmp(d.showers, showers, sizeof showers) == 0);
    CHECK(d.showers && isnan(d.showers[3]) && signbit(d.showers[5]));
    gc_showers_free(&d);
    CHECK(!d.showers && !d.energies && !d.layer_voxels);
    gc_showers_free(&d);             /* twice, and NULL, are fine */
    gc_showers_free(NULL);

    /* An empty sample is a valid one. */
    gc_showers empty = {0, V, L, layers, NULL, NULL};
    unsigned char head[20 + 4 * L];
    CHECK_EQ_INT(gc_showers_size(0, V, L), sizeof head);
    CHECK_EQ_INT(gc_showers_encode(&empty, head, sizeof head, &err), GT_OK);
    CHECK_EQ_INT(gc_showers_decode(head, sizeof head, &d, &err), GT_OK);
    CHECK_EQ_INT(d.n, 0);
    CHECK_EQ_INT(d.voxels, V);
    gc_showers_free(&d);

    /* Every truncation, and one byte too many, is refused. */
    int all_refused = 1;
    for (size_t cut = 0; cut < len; cut++) {
        gc_showers t;
        int rc = gc_showers_decode(buf, cut, &t, NULL);
        all_refused &= rc == GT_EFORMAT && !t.showers;
        gc_showers_free(&t);
    }
    CHECK_MSG(all_refused, "a truncated buffer was accepted");
    buf[len] = 0;
    expect_refused(buf, len + 1, "trailing byte");

    /* Inconsistent headers. */
    unsigned char *bad = malloc(len);
    memcpy(bad, buf, len);
    bad[0] = 'X';
    expect_refused(bad, len, "magic");
    memcpy(bad, buf, len);
    put_u32_at(bad + 4, 2);
    expect_refused(bad, len, "version 2");
    memcpy(bad, buf, len);
    put_u32_at(bad + 20, 2);                          /* layers sum to 7, not 8 */
    expect_refused(bad, len, "layers that do not sum to the voxels");
    memcpy(bad, buf, len);
    put_u32_at(bad + 8, N + 1);                       /* one shower more than there is */
    expect_refused(bad, len, "n beyond the buffer");
    memcpy(bad, buf, len);
    put_u32_at(bad + 8, UINT32_MAX);                  /* a hostile header: no allocation */
    expect_refused(bad, len, "huge n");
    put_u32_at(bad + 12, INT32_MAX);                  /* and a length that overflows */
    expect_refused(bad, len, "huge n and voxels");
    memcpy(bad, buf, len);
    put_u32_at(bad + 12, 0x80000000u);                /* voxels beyond an int */
    expect_refused(bad, len, "voxels beyond an int");
    memcpy(bad, buf, len);
    put_u32_at(bad + 16, 0x40000000u);                /* layers far beyond the buffer */
    expect_refused(bad, len, "layers beyond the buffer");
    free(bad);

    /* The encoder refuses what the layout cannot say. */
    int wrong[] = {3, 1, 5};
    gc_showers w = {N, V, L, wrong, energies, showers};
    CHECK_EQ_INT(gc_showers_encode(&w, buf, len, &err), GT_EINVAL);
    CHECK_EQ_INT(gc_showers_encode(&s, buf, len - 1, &err), GT_EINVAL);
    gc_showers neg = {-1, V, L, layers, energies, showers};
    CHECK_EQ_INT(gc_showers_encode(&neg, buf, len, &err), GT_EINVAL);
    CHECK_EQ_INT(gc_showers_size(-1, V, L), 0);
    CHECK_EQ_INT(gc_showers_size((int64_t)UINT32_MAX + 1, 1, 1), 0);
    CHECK_EQ_INT(gc_showers_size(UINT32_MAX, INT32_MAX, 1) == 0 || sizeof(size_t) > 8, 1);

    free(buf);
    return check_finish();
}
