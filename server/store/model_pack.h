/* model_pack: a trained model as one self-describing file ("model.giant"),
 * written from a run's parts and read back with every check an importer
 * needs.  The byte layout is documented in model_format.md beside this
 * file; in short:
 *
 *   "GIANTPKG" | u32 format version | u32 part count
 *   per part:  u16 name length | name | u64 size | data
 *   "GIANTEND" | sha256 of the manifest part (32 bytes)
 *
 * Parts, in this order: manifest.json (format version, run, geometry,
 * giant version, and the size and sha256 of every other part), config.json
 * (the run's config), geometry.xml (the binning file's bytes),
 * transforms.bin (the fitted transforms the sampler reads from the stage-2
 * checkpoint, as their own part so a reader need not unpack a checkpoint),
 * energy.ckpt and shower.ckpt (the best checkpoint of each stage, the
 * bytes the run stored).  Format 2 is format 1 and one more part,
 * accept.bin: the run's learned acceptance test (model_accept.h), trained
 * against those two checkpoints.  A run without a test exports as format
 * 1, so its file is the bytes an older giant wrote and reads.  The writer
 * uses no clock, so exporting a run twice gives the same bytes.
 *
 * The content hash, which import is idempotent by, is a sha256 over the
 * parts but the manifest (see model_format.md): the same checkpoints,
 * config and geometry are the same model whichever giant exported them.
 *
 * Depends on OpenSSL's libcrypto (SHA-256), Jansson and the engine's
 * model_ckpt, model_config, model_data and geo. */
#ifndef MODEL_PACK_H
#define MODEL_PACK_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "model_config.h"

#define MODEL_PACK_VERSION 2        /* the newest format this build reads */

/* What a refused file is, with a stable code for the API's error shape. */
typedef enum model_pack_fault {
    MODEL_PACK_FAULT_NONE = 0,
    MODEL_PACK_FAULT_CORRUPT,       /* "model_corrupt": a part's bytes do not hash to
                                       the manifest's sha256, or the layout is wrong  */
    MODEL_PACK_FAULT_TRUNCATED,     /* "model_truncated": the file ends early        */
    MODEL_PACK_FAULT_VERSION,       /* "model_version_unsupported": a newer format   */
    MODEL_PACK_FAULT_GEOMETRY,      /* "geometry_mismatch": geometry.xml is not the
                                       geometry the config and transforms describe */
} model_pack_fault;

const char *model_pack_fault_code(model_pack_fault f);

/* What an export is made of. */
typedef struct model_pack_src {
    int64_t run_id;
    const char *run_name;           /* may be NULL                          */
    const char *giant_version;      /* build_info's version and commit      */
    const char *git_commit;
    const char *config_json;        /* the run's config as stored           */
    const void *geometry_xml;       /* the binning file's bytes             */
    size_t geometry_len;
    const void *ckpt[2];            /* best checkpoint of stage 1 and 2     */
    size_t ckpt_len[2];
    const void *accept;             /* the acceptance test trained against
                                       them, or NULL: format 1             */
    size_t accept_len;
} model_pack_src;

/* The file, malloc'ed into *out.  GT_EFORMAT when a checkpoint, the
 * geometry or the acceptance test does not parse, or the test names other
 * checkpoints than the two given. */
int model_pack_write(const model_pack_src *src, void **out, size_t *len, gt_error *err);

/* A file read back: views into the caller's buffer, which must outlive it. */
typedef struct model_pack {
    json_t *manifest;               /* owned: model_pack_free               */
    const char *config_json;        /* not NUL-terminated: config_len       */
    size_t config_len;
    const void *geometry_xml;
    size_t geometry_len;
    const void *transforms;
    size_t transforms_len;
    const void *ckpt[2];
    size_t ckpt_len[2];
    const void *accept;             /* accept.bin, NULL in a format-1 file  */
    size_t accept_len;
    int format_version;             /* 1 or 2                               */
    char content_sha256[65];        /* hex, see above                       */
    char geometry[1024];            /* the config's dataset.geometry        */
    int voxels, layers;             /* of geometry.xml                      */
    int64_t run_id;                 /* the run it came from                 */
} model_pack;

/* Reads and checks a file: layout, format version, every part's size and
 * sha256, then its contents: the config parses, the checkpoints are a
 * stage-1 and a stage-2 checkpoint, transforms.bin equals the stage-2
 * checkpoint's, geometry.xml is the built-in file the config names (when
 * it names one) and fits the transforms, and accept.bin (format 2) is an
 * acceptance test of these two checkpoints that reads this geometry's
 * features.  On failure *fault says which
 * kind, part (may be NULL, 64 bytes) names the part and err says what. */
int model_pack_read(const void *buf, size_t len, model_pack *p, model_pack_fault *fault,
                    char part[64], gt_error *err);
void model_pack_free(model_pack *p);

/* The model's config.json as a run config, read as a stored config
 * (model_config_parse_stored): a field it leaves out is read as what the
 * giant that wrote it did, e.g. sample.symmetrize, model.stage2.count_stick
 * and model.stage1.profile off in a file exported before them, as in the
 * runs recorded before them.  field (may be NULL) names the offending field
 * on failure. */
int model_pack_config(const model_pack *p, model_config *cfg, char *field, size_t field_len,
                      gt_error *err);

#endif
