#include "check.h"
#include "gt_error.h"

#include <string.h>

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
    return check_finish();
}
