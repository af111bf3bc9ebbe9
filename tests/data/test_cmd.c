/* The synth and eval commands, called as the giant binary calls them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "calo_h5.h"
#include "check.h"
#include "data_test_util.h"

static int files_equal(const char *a, const char *b)
{
    float *ea, *sa, *eb, *sb;
    int64_t na, nb;
    gt_error err = {0};
    if (calo_h5_read_all(a, NULL, &ea, &sa, &na, &err) ||
        calo_h5_read_all(b, NULL, &eb, &sb, &nb, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 0;
    }
    calo_h5_reader r;
    calo_h5_open(&r, a, NULL, &err);
    int nv = r.n_voxels;
    calo_h5_close(&r);
    int same = na == nb && !memcmp(ea, eb, na * 4) && !memcmp(sa, sb, (size_t)na * nv * 4);
    free(ea);
    free(sa);
    free(eb);
    free(sb);
    return same;
}

/* The value at a path of keys of a --json file (NULL-terminated keys), or
 * NULL when the file or a key is missing; reads the file each time. */
static json_t *json_at(const char *path, ...)
{
    static json_t *doc;
    json_decref(doc);
    doc = json_load_file(path, 0, NULL);
    json_t *v = doc;
    va_list ap;
    va_start(ap, path);
    for (const char *k; v && (k = va_arg(ap, const char *));)
        v = json_object_get(v, k);
    va_end(ap);
    return v;
}

#define J(file, ...) json_at(file, __VA_ARGS__, (const char *)NULL)

int main(void)
{
    char *g2 = strdup(dt_geometry_path("binning_dataset_2.xml"));
    char *g1 = strdup(dt_geometry_path("binning_dataset_1_photons.xml"));

    /* help and usage errors */
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--help"), 0);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "-h"), 0);
    CHECK_EQ_INT(RUN(cmd_synth, "synth"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "10"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "ten", "-o", "a.h5"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "0", "-o", "a.h5"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5", "--bogus",
                     "1"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5",
                     "--energy", "gauss"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5", "--emin",
                     "5000", "--emax", "100"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5",
                     "--particle", "pion"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5",
                     "--particle", "photon"), 0);
    /* the simulator: gflash or cascade, nothing else */
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5",
                     "--simulator", "geant4"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "a.h5",
                     "--simulator"), 2);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", "missing.xml", "--n", "5", "-o", "a.h5"),
                 1);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "5", "-o", "no/dir/a.h5"), 1);

    /* same seed, different thread counts: identical files */
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "300", "--seed", "1", "-o",
                     "s1.h5", "--threads", "1"), 0);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "300", "--seed", "1", "-o",
                     "s1b.h5", "--threads", "2", "--particle", "electron"), 0);
    CHECK(files_equal("s1.h5", "s1b.h5"));
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "300", "--seed", "2", "-o",
                     "s2.h5"), 0);
    CHECK(!files_equal("s1.h5", "s2.h5"));
    /* the cascade simulator: the same across threads, not GFlash's showers */
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "100", "--seed", "1", "-o",
                     "c1.h5", "--threads", "1", "--simulator", "cascade"), 0);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "100", "--seed", "1", "-o",
                     "c1b.h5", "--threads", "2", "--simulator", "cascade"), 0);
    CHECK(files_equal("c1.h5", "c1b.h5"));
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "100", "--seed", "1", "-o",
                     "g1.h5", "--simulator", "gflash"), 0);
    CHECK(!files_equal("c1.h5", "g1.h5"));
    /* dataset-1 style with discrete energies */
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g1, "--n", "50", "--energy", "discrete",
                     "--emin", "256", "--emax", "4194304", "-o", "d1.h5"), 0);
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g1, "--n", "5", "--energy", "fixed",
                     "--emin", "65536", "-o", "d1f.h5"), 0);
    float *e, *s;
    int64_t n;
    gt_error err = {0};
    CHECK(calo_h5_read_all("d1f.h5", NULL, &e, &s, &n, &err) == GT_OK);
    CHECK(n == 5 && e[0] == 65536.0f && e[4] == 65536.0f);
    free(e);
    free(s);

    /* eval: a file against itself is exactly 0, against another seed small */
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s1b.h5", "--geometry", g2, "--json",
                     "self.json", "--no-distances", "--classifier", "none"), 0);
    CHECK(json_integer_value(J("self.json", "summary", "count")) == 362);
    CHECK(json_is_number(J("self.json", "summary", "mean")) &&
          json_number_value(J("self.json", "summary", "mean")) == 0);
    CHECK(json_is_null(J("self.json", "fpd_x1e3")));
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--json",
                     "e12.json", "--classifier", "none"), 0);
    CHECK(json_is_number(J("e12.json", "separation_power", "E_layer_12")));
    CHECK(json_is_object(J("e12.json", "groups")));
    if (dt_have_h5py()) {
        /* the same numbers from a numpy port of the CaloChallenge code */
        char cmd[2048];
        const char *root = getenv("GIANT_SOURCE_DIR");
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/data/calochallenge_sep.py "
                 "s1.h5 s2.h5 e12.json", root ? root : "../..");
        CHECK_MSG(dt_system(cmd) == 0, "separation powers differ from CaloChallenge's");
    }
    if (dt_have_h5py())
        CHECK(dt_system("/usr/bin/python3 -c \"import json; d = json.load(open('e12.json')); "
                        "assert d['summary']['mean'] < 0.15, d['summary']; "
                        "assert len(d['separation_power']) == 362\"") == 0);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "d1.h5", "d1.h5", "--geometry", g1, "--max-showers",
                     "20", "--json", "d1.json", "--classifier", "none"), 0);
    /* too few showers for FPD/KPD: reported as not computed */
    CHECK(json_is_null(J("d1.json", "fpd_x1e3")));
    CHECK(json_integer_value(J("d1.json", "summary", "count")) == 30);
    CHECK(json_is_number(J("d1.json", "summary", "mean")) &&
          json_number_value(J("d1.json", "summary", "mean")) == 0);
    /* the floor and the classifiers: s2 against s1 beside s1b (the same
     * showers as s1) against s1; then a sample from another energy range,
     * which log10 E_inc alone gives away */
    CHECK_EQ_INT(RUN(cmd_synth, "synth", "--geometry", g2, "--n", "300", "--seed", "4", "--emin",
                     "100000", "-o", "hi.h5"), 0);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s2.h5", "s1.h5", "--ref2", "s1b.h5", "--geometry", g2,
                     "--json", "floor.json", "--no-distances", "--cls-hidden", "32",
                     "--cls-epochs", "8"), 0);
    CHECK(json_is_string(J("floor.json", "ref2")) &&
          !strcmp(json_string_value(J("floor.json", "ref2")), "s1b.h5"));
    CHECK(json_is_object(J("floor.json", "floor")));
    CHECK(json_is_object(J("floor.json", "classifier")));
    CHECK(json_is_number(J("floor.json", "classifier", "low", "auc")));
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "hi.h5", "s1.h5", "--geometry", g2, "--json", "hi.json",
                     "--no-distances", "--classifier", "high", "--cls-hidden", "32",
                     "--cls-epochs", "8"), 0);
    if (dt_have_h5py()) {
        /* same distribution: chance (60 test showers a side: wide); energies
         * of 1e5-1e6 MeV against 1e3-1e6 (log-uniform: a third overlaps):
         * the best classifier reaches 1 - 1/3 * 1/2 = 0.83; a file against
         * itself: floor 0 */
        CHECK(dt_system("/usr/bin/python3 -c \"import json; d = json.load(open('floor.json')); "
                        "a = d['classifier']['high']['auc']; assert 0.3 < a < 0.7, a; "
                        "assert d['floor']['summary']['mean'] == 0, d['floor']['summary']; "
                        "h = json.load(open('hi.json'))['classifier']['high']['auc']; "
                        "assert h > 0.75, h; assert 'low' not in json.load(open('hi.json'))"
                        "['classifier']\"") == 0);
    }
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--classifier",
                     "mid"), 2);
    /* the second family: the same energy difference found by the trees, and
     * their options refused out of range */
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "hi.h5", "s1.h5", "--geometry", g2, "--json",
                     "hi_trees.json", "--no-distances", "--no-breakdown", "--classifier",
                     "trees-high"), 0);
    if (dt_have_h5py())
        CHECK(dt_system("/usr/bin/python3 -c \"import json; c = json.load(open('hi_trees.json'))"
                        "['classifier']; assert c['trees_high']['auc'] > 0.75, c; "
                        "assert 'high' not in c and 'trees_low' not in c, c\"") == 0);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--classifier",
                     "trees-mid"), 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--trees-rounds",
                     "0"), 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--trees-depth",
                     "33"), 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--cls-hidden", "0"),
                 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--cls-repeats", "0"),
                 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--cls-repeats",
                     "21"),
                 2);
    /* eval errors */
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "--geometry", g2), 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5"), 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "d1.h5", "--geometry", g2), 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--threshold", "-1"),
                 2);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "missing.h5", "--geometry", g2), 1);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "d1.h5", "--geometry", g2), 1);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g1), 1);
    CHECK_EQ_INT(RUN(cmd_eval, "eval", "s1.h5", "s2.h5", "--geometry", g2, "--json",
                     "no/dir/x.json", "--no-distances"), 1);
    free(g1);
    free(g2);
    return check_finish();
}
