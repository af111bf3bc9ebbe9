/* body_check: a refusal formatted into the fault, known keys passed, the
 * first unknown one refused with its field and message, a long key cut to
 * the size each body module asks for, and a body that is no object.  The
 * modules' own refusals are held to their API by the fuzz targets and the
 * service tests. */
#include "check.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "body_check.h"

static const char *const known[] = {"name", "role", NULL};

int main(void)
{
    body_fault f;

    /* formats, and returns 0 for `return body_refuse(...)` */
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(body_refuse(&f, 422, "steps", "steps must be 1 to %d", 1000), 0);
    CHECK_EQ_INT(f.status, 422);
    CHECK(!strcmp(f.field, "steps"));
    CHECK_MSG(!strcmp(f.message, "steps must be 1 to 1000"), "%s", f.message);
    CHECK_EQ_INT(body_refuse(&f, 500, "", "out of memory"), 0);
    CHECK_EQ_INT(f.status, 500);
    CHECK(!strcmp(f.field, "") && !strcmp(f.message, "out of memory"));

    /* a field and a message too long for the fault are cut, not overrun */
    char lng[400];
    memset(lng, 'x', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    body_refuse(&f, 422, lng, "%s", lng);
    CHECK_EQ_INT(strlen(f.field), sizeof f.field - 1);
    CHECK_EQ_INT(strlen(f.message), sizeof f.message - 1);

    /* known keys pass, and leave the fault as it was */
    json_t *ok = json_pack("{s:s, s:s}", "name", "ci", "role", "admin");
    json_t *empty = json_object();
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(body_known_keys(ok, known, &f, 0, "unknown '%s'"), 1);
    CHECK_EQ_INT(body_known_keys(empty, known, &f, 0, "unknown '%s'"), 1);
    CHECK_EQ_INT(f.status, 0);
    CHECK(!f.field[0] && !f.message[0]);

    /* the first unknown key in the body's order, in the caller's words */
    json_t *bad = json_pack("{s:s, s:i, s:i}", "name", "ci", "colour", 1, "size", 2);
    CHECK_EQ_INT(body_known_keys(bad, known, &f, 0, "unknown member '%.180s' (name, role)"), 0);
    CHECK_EQ_INT(f.status, 422);
    CHECK_MSG(!strcmp(f.field, "colour"), "%s", f.field);
    CHECK_MSG(!strcmp(f.message, "unknown member 'colour' (name, role)"), "%s", f.message);

    /* a 300-byte key: the field cut to the size asked for (the fault's own
     * when 0 or larger), the message by the format's precision */
    char key[301];
    for (size_t i = 0; i < 300; i++)
        key[i] = (char)('a' + i % 26);
    key[300] = '\0';
    json_t *big = json_object();
    json_object_set_new(big, key, json_true());
    CHECK_EQ_INT(body_known_keys(big, known, &f, 0, "unknown field '%.200s'"), 0);
    CHECK_EQ_INT(strlen(f.field), sizeof f.field - 1);
    CHECK(!strncmp(f.field, key, sizeof f.field - 1));
    char want[256];
    snprintf(want, sizeof want, "unknown field '%.200s'", key);
    CHECK_EQ_INT(strlen(want), 216);
    CHECK(!strcmp(f.message, want));
    CHECK_EQ_INT(body_known_keys(big, known, &f, 1000, "unknown field '%.100s'"), 0);
    CHECK_EQ_INT(strlen(f.field), sizeof f.field - 1);
    CHECK_EQ_INT(body_known_keys(big, known, &f, 48, "unknown field '%.100s'"), 0);
    CHECK_EQ_INT(strlen(f.field), 47);
    CHECK(!strncmp(f.field, key, 47));
    CHECK_EQ_INT(strlen(f.message), strlen("unknown field ''") + 100);
    CHECK(!strncmp(f.message + strlen("unknown field '"), key, 100));

    /* a key is text in the message, never a format */
    memset(&f, 0, sizeof f);
    json_t *pct = json_pack("{s:i}", "50%d", 1);
    CHECK_EQ_INT(body_known_keys(pct, known, &f, 0, "unknown field '%.100s'"), 0);
    CHECK(!strcmp(f.field, "50%d"));
    CHECK_MSG(!strcmp(f.message, "unknown field '50%d'"), "%s", f.message);

    /* a body that is no object, or none, is refused as a whole */
    json_t *arr = json_array();
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(body_known_keys(arr, known, &f, 0, "unknown '%s'"), 0);
    CHECK_EQ_INT(f.status, 422);
    CHECK(!strcmp(f.field, ""));
    CHECK_MSG(!strcmp(f.message, "the body must be an object"), "%s", f.message);
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(body_known_keys(NULL, known, &f, 0, "unknown '%s'"), 0);
    CHECK(f.status == 422 && !strcmp(f.message, "the body must be an object"));

    json_decref(ok);
    json_decref(empty);
    json_decref(bad);
    json_decref(big);
    json_decref(pct);
    json_decref(arr);
    return check_finish();
}
