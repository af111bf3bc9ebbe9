#include "check.h"
#include "gt_error.h"
#include "gt_le.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int tried;   /* calls of step() so far */

static int step(int rc)
{
    tried++;
    return rc;
}

/* GT_TRY returns the first failing status and runs nothing after it. */
static int two_steps(int first, int second)
{
    GT_TRY(step(first));
    GT_TRY(step(second));
    return GT_OK;
}

/* Fields written at every byte offset read back exactly, least significant
 * byte first, floats as their bit pattern (NaN payloads, -0, denormals). */
static void check_le(void)
{
    unsigned char buf[40];
    for (int off = 0; off < 8; off++) {
        memset(buf, 0xAA, sizeof buf);
        gt_le_put_u16(buf + off, 0x1234);
        CHECK(buf[off] == 0x34 && buf[off + 1] == 0x12);
        CHECK_EQ_INT(gt_le_get_u16(buf + off), 0x1234);
        gt_le_put_u32(buf + off, 0xA1B2C3D4u);
        CHECK(buf[off] == 0xD4 && buf[off + 3] == 0xA1);
        CHECK(gt_le_get_u32(buf + off) == 0xA1B2C3D4u);
        gt_le_put_u64(buf + off, 0x0102030405060708ull);
        CHECK(buf[off] == 0x08 && buf[off + 7] == 0x01);
        CHECK(gt_le_get_u64(buf + off) == 0x0102030405060708ull);
        static const float fs[] = {0.0f, -0.0f, 1.5f, -3.25e-40f, INFINITY, NAN};
        for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
            gt_le_put_f32(buf + off, fs[i]);
            float g = gt_le_get_f32(buf + off);
            CHECK(memcmp(&g, &fs[i], sizeof g) == 0);
        }
        double d = -1.0 / 3.0;
        gt_le_put_f64(buf + off, d);
        double gd = gt_le_get_f64(buf + off);
        CHECK(memcmp(&gd, &d, sizeof d) == 0);
        CHECK(buf[off + 8] == 0xAA);   /* nothing written past the field */
    }
}

int main(void)
{
    gt_error err;
    gt_error_clear(&err);
    CHECK_EQ_INT(err.code, GT_OK);
    CHECK_EQ_INT(gt_error_set(&err, GT_EINVAL, "rows %d", 7), GT_EINVAL);
    CHECK(strcmp(err.message, "rows 7") == 0);
    gt_error_wrap(&err, "layer %s", "ln1");
    CHECK(strcmp(err.message, "layer ln1: rows 7") == 0);
    CHECK_EQ_INT(gt_error_set(NULL, GT_EIO, "ignored"), GT_EIO);
    CHECK(strcmp(gt_status_name(GT_ECHECKSUM), "checksum_mismatch") == 0);
    CHECK(strcmp(gt_status_name(12345), "unknown") == 0);
    tried = 0;
    CHECK_EQ_INT(two_steps(GT_OK, GT_OK), GT_OK);
    CHECK_EQ_INT(tried, 2);
    tried = 0;
    CHECK_EQ_INT(two_steps(GT_EIO, GT_OK), GT_EIO);
    CHECK_EQ_INT(tried, 1);
    tried = 0;
    CHECK_EQ_INT(two_steps(GT_OK, GT_ENOMEM), GT_ENOMEM);
    CHECK_EQ_INT(tried, 2);
    check_le();
    return check_finish();
}
