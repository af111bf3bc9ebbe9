/* fuzz_model_pack: an exported model file as `giant import` and
 * POST /v1/models read it (model_pack_read).
 *
 * An input that starts with the file's magic is read as it is: the layout,
 * versions and hashes.  Any other input is four parts split by "#PART#"
 * (config.json, geometry.xml, energy.ckpt, shower.ckpt) that the harness
 * packs with model_pack_write, so every hash is right and the reader goes
 * on to what is inside: the config, the checkpoints, the transforms
 * against the geometry (the transforms' checksums rewritten, see
 * fuzz_fixup.h). */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_fixup.h"
#include "model_pack.h"

#define SEP "#PART#"

static void read_file(const uint8_t *data, size_t size)
{
    model_pack p;
    model_pack_fault fault;
    char part[64];
    gt_error err = {0};
    if (model_pack_read(data, size, &p, &fault, part, &err) == GT_OK)
        model_pack_free(&p);
}

/* Splits buf (NUL-terminated, writable) into n parts at SEP. */
static int split(char *buf, size_t size, char *part[4], size_t len[4])
{
    char *p = buf, *end = buf + size;
    for (int i = 0; i < 4; i++) {
        part[i] = p;
        char *q = i < 3 ? memmem(p, (size_t)(end - p), SEP, strlen(SEP)) : end;
        if (!q)
            return 0;
        len[i] = (size_t)(q - p);
        *q = '\0';
        p = q + (i < 3 ? strlen(SEP) : 0);
    }
    return 1;
}

static void pack_and_read(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *part[4];
    size_t len[4];
    if (split(buf, size, part, len)) {
        fuzz_fix_ckpt((uint8_t *)part[2], len[2]);
        fuzz_fix_ckpt((uint8_t *)part[3], len[3]);
        model_pack_src src = {
            .run_id = 1, .run_name = "fuzz", .giant_version = "0", .git_commit = "0",
            .config_json = part[0], .geometry_xml = part[1], .geometry_len = len[1],
            .ckpt = {part[2], part[3]}, .ckpt_len = {len[2], len[3]},
        };
        void *file = NULL;
        size_t file_len = 0;
        gt_error err = {0};
        if (model_pack_write(&src, &file, &file_len, &err) == GT_OK)
            read_file(file, file_len);
        free(file);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 8 && memcmp(data, "GIANTPKG", 8) == 0)
        read_file(data, size);
    else
        pack_and_read(data, size);
    return 0;
}
