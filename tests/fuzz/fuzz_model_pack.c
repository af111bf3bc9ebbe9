/* fuzz_model_pack: an exported model file as `giant import` and
 * POST /v1/models read it (model_pack_read).
 *
 * An input that starts with the file's magic is read as it is: the layout,
 * versions and hashes.  Any other input is four or five parts split by
 * "#PART#" (config.json, geometry.xml, energy.ckpt, shower.ckpt and
 * accept.bin) that the harness packs with model_pack_write, so every hash
 * is right and the reader goes on to what is inside: the config, the
 * checkpoints, the transforms against the geometry (the transforms'
 * checksums rewritten, see fuzz_fixup.h), and the acceptance test against
 * the checkpoints (their sha256 and the test's CRC written into it) and
 * the geometry's features. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

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

/* Splits buf (NUL-terminated, writable) at SEP into 4 or 5 parts: how
 * many, 0 for fewer. */
static int split(char *buf, size_t size, char *part[5], size_t len[5])
{
    char *p = buf, *end = buf + size;
    for (int i = 0; i < 5; i++) {
        part[i] = p;
        char *q = i < 4 ? memmem(p, (size_t)(end - p), SEP, strlen(SEP)) : end;
        if (!q) {
            if (i < 3)
                return 0;
            q = end;                   /* the last part runs to the end */
        }
        len[i] = (size_t)(q - p);
        if (q == end)
            return i + 1;
        *q = '\0';
        p = q + strlen(SEP);
    }
    return 5;
}

/* The test's record of the checkpoints it belongs to (bytes 56..119 of
 * model_accept.h's blob), then its CRC. */
static void fix_accept(uint8_t *b, size_t len, const char *ck[2], const size_t ck_len[2])
{
    if (len >= 120 + 4)
        for (int s = 0; s < 2; s++) {
            unsigned int n = 0;
            EVP_Digest(ck[s], ck_len[s], b + 56 + 32 * s, &n, EVP_sha256(), NULL);
        }
    fuzz_fix_accept(b, len);
}

static void pack_and_read(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *part[5];
    size_t len[5];
    int n = split(buf, size, part, len);
    if (n >= 4) {
        fuzz_fix_ckpt((uint8_t *)part[2], len[2]);
        fuzz_fix_ckpt((uint8_t *)part[3], len[3]);
        if (n == 5)
            fix_accept((uint8_t *)part[4], len[4], (const char *[2]){part[2], part[3]},
                       (const size_t[2]){len[2], len[3]});
        model_pack_src src = {
            .run_id = 1, .run_name = "fuzz", .giant_version = "0", .git_commit = "0",
            .config_json = part[0], .geometry_xml = part[1], .geometry_len = len[1],
            .ckpt = {part[2], part[3]}, .ckpt_len = {len[2], len[3]},
            .accept = n == 5 ? part[4] : NULL, .accept_len = n == 5 ? len[4] : 0,
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
