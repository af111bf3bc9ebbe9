/* giant export / giant import: a model leaves its run as one file, and a
 * file becomes a model of this database, offline (the service's routes
 * GET /v1/runs/{id}/model and POST /v1/models do the same through
 * models.c, so the two give the same bytes and the same checks). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gt_path.h"
#include "gt_sha256.h"
#include "model_pack.h"
#include "models.h"
#include "query_args.h"
#include "runs.h"
#include "settings.h"
#include "store.h"

static int write_file(const char *path, const void *buf, size_t len, gt_error *err)
{
    /* beside the target, then renamed: a failed export never leaves half
     * a file under the name */
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return gt_error_set(err, GT_EINVAL, "output path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return gt_error_set(err, GT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fwrite(buf, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return gt_error_set(err, GT_EIO, "cannot write %s", path);
    }
    return GT_OK;
}

/* The command line export and import share: their own option (own), --db
 * and --help (help: the text, a format whose %s is the database's
 * default).  Returns -1 to go on, with the arguments from argv[optind] on,
 * or the exit code. */
static int model_args(int argc, char **argv, struct option own, const char *shorts,
                      const char *help, const char **value, const char **db_path)
{
    const struct option opts[] = {own, {"db", required_argument, 0, 'd'},
                                  {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        if (o == own.val) {
            *value = optarg;
        } else if (o == 'd') {
            *db_path = optarg;
        } else if (o == 'h') {
            printf(help, settings_default("db"));
            return 0;
        } else {
            return 2;
        }
    }
    return -1;
}

int cmd_export(int argc, char **argv)
{
    const char *db_path = settings_env_or_default("db"), *out = NULL;
    int code = model_args(argc, argv, (struct option){"output", required_argument, 0, 'o'},
                          "o:h",
                          "usage: giant export RUN -o FILE [--db FILE]\n\n"
                          "Writes run RUN's best checkpoint of each stage, its config, its geometry\n"
                          "and transforms into one model file (server/model_format.md), the bytes\n"
                          "GET /v1/runs/RUN/model gives.\n\n"
                          "options:\n"
                          "  -o, --output FILE  the model file to write\n"
                          "  --db FILE          database (default %s, env GIANT_DB)\n",
                          &out, &db_path);
    if (code >= 0)
        return code;
    int64_t run = optind < argc ? query_args_id(argv[optind]) : 0;
    if (run <= 0 || optind + 1 != argc || !out) {
        fprintf(stderr, "giant export: usage: giant export RUN -o FILE [--db FILE]\n");
        return 2;
    }
    gt_error err = {0};
    store *db = NULL;
    void *file = NULL;
    size_t len = 0;
    int rc = store_open_migrated(&db, db_path, NULL, NULL, &err);
    if (!rc)
        rc = models_export(db, run, &file, &len, &err);
    if (!rc)
        rc = write_file(out, file, len, &err);
    store_close(db, NULL);
    if (rc) {
        free(file);
        fprintf(stderr, "giant export: %s\n", err.message);
        return 1;
    }
    char sum[65];
    gt_sha256_hex(file, len, sum);
    free(file);
    printf("wrote run %lld to %s (%zu bytes, sha256 %s)\n", (long long)run, out, len, sum);
    return 0;
}

int cmd_import(int argc, char **argv)
{
    const char *db_path = settings_env_or_default("db"), *name = NULL;
    int code = model_args(argc, argv, (struct option){"name", required_argument, 0, 'n'}, "h",
                          "usage: giant import FILE [--name NAME] [--db FILE]\n\n"
                          "Checks a model file and registers it as a model of the database (what\n"
                          "POST /v1/models does); the service then serves it at\n"
                          "POST /v1/models/NAME/samples.  The same file again names the model it\n"
                          "already is.\n\n"
                          "options:\n"
                          "  --name NAME  the model's name (default run-<run id>-<8 hex digits>)\n"
                          "  --db FILE    database (default %s, env GIANT_DB)\n",
                          &name, &db_path);
    if (code >= 0)
        return code;
    if (optind + 1 != argc) {
        fprintf(stderr, "giant import: usage: giant import FILE [--name NAME] [--db FILE]\n");
        return 2;
    }
    gt_error err = {0};
    void *file = NULL;
    size_t len = 0;
    store *db = NULL;
    json_t *row = NULL;
    int created = 0, taken = 0;
    model_pack_fault fault = MODEL_PACK_FAULT_NONE;
    char part[64] = "";
    int rc = gt_path_read_all(argv[optind], &file, &len, &err);
    if (!rc)
        rc = store_open_migrated(&db, db_path, NULL, NULL, &err);
    if (!rc)
        rc = models_import(db, name, file, len, &row, &created, &fault, part, &taken, &err);
    store_close(db, NULL);
    free(file);
    if (rc) {
        /* the code the API answers with, so scripts can tell the cases apart */
        fprintf(stderr, "giant import: %s%s%s\n",
                fault ? model_pack_fault_code(fault) : "", fault ? ": " : "", err.message);
        return 1;
    }
    printf("%s model '%s' (content sha256 %s)\n", created ? "imported" : "already had",
           json_string_value(json_object_get(row, "name")),
           json_string_value(json_object_get(row, "content_sha256")));
    json_decref(row);
    return 0;
}
