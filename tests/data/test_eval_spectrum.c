/* eval_spectrum: the voxel energy spectrum.
 *  - features per geometry: two units per depth group with voxels (8 for
 *    dataset 2's 45 layers, 4 for dataset 1's photons);
 *  - hits land in the bins the fixed log ranges say, out-of-range values
 *    in the end bins (a hit under the readout threshold is counted, in the
 *    MeV histogram's first bin), empty voxels nowhere;
 *  - separation power 0 for one spectrum against itself, 1 for disjoint. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data_test_util.h"
#include "eval_spectrum.h"

int main(void)
{
    geo_geometry g2, g1;
    CHECK_EQ_INT(dt_load_geometry(&g2, "binning_dataset_2.xml"), 0);
    CHECK_EQ_INT(dt_load_geometry(&g1, "binning_dataset_1_photons.xml"), 0);
    eval_spectrum s, t;
    eval_spectrum_init(&s, &g2);
    CHECK_EQ_INT(s.n, 8);
    CHECK(!strcmp(s.f[0].name, "E_vox/E_inc_L0-4") && !strcmp(s.f[1].name, "E_vox_MeV_L0-4") &&
          !strcmp(s.f[7].name, "E_vox_MeV_L20-44"));
    CHECK(s.f[6].layer_lo == 20 && s.f[6].layer_hi == 44);
    eval_spectrum_init(&t, &g1);
    CHECK_EQ_INT(t.n, 4);
    CHECK(!strcmp(t.f[2].name, "E_vox/E_inc_L10-19") && t.f[2].layer_hi == 19);

    /* one shower of E_inc 1 GeV: 1 MeV in layer 0, 10 keV (under a 15.15
     * keV threshold) in layer 7, 1e-9 MeV in layer 30 (under both ranges) */
    float *x = calloc((size_t)g2.n_voxels, sizeof *x), e = 1000.0f;
    x[g2.layers[0].offset] = 1.0f;
    x[g2.layers[7].offset + 3] = 0.01f;
    x[g2.layers[30].offset + 5] = 1e-9f;
    eval_spectrum_add(&s, &g2, x, &e, 1);
    CHECK(s.hits == 3);
    /* 1e-3 of E_inc: (-3 + 8) / 8 of the way; 1 MeV: 3 / 9 of the way */
    CHECK(s.counts[0][62] == 1 && s.counts[1][33] == 1);
    /* 1e-5 of E_inc: bin 37; 0.01 MeV: (-2 + 3) / 9 -> bin 11 */
    CHECK(s.counts[2][37] == 1 && s.counts[3][11] == 1);
    /* under both ranges: the first bins */
    CHECK(s.counts[6][0] == 1 && s.counts[7][0] == 1);
    double total = 0;
    for (int k = 0; k < s.n; k++)
        for (int b = 0; b < EVAL_SPECTRUM_BINS; b++)
            total += s.counts[k][b];
    CHECK(total == 6);   /* two histograms per hit, empty voxels nowhere */
    double edges[EVAL_SPECTRUM_BINS + 1];
    eval_spectrum_edges(&s, 1, edges);
    CHECK_CLOSE(edges[0], 1e-3, 1e-15, 0);
    CHECK_CLOSE(edges[EVAL_SPECTRUM_BINS], 1e6, 1e-6, 0);
    CHECK(edges[33] <= 1.0 && 1.0 < edges[34]);

    /* separation power: the same spectrum 0, disjoint ones 1 */
    eval_spectrum u;
    eval_spectrum_init(&u, &g2);
    eval_spectrum_add(&u, &g2, x, &e, 1);
    CHECK_CLOSE(eval_spectrum_separation(&s, &u, 0), 0.0, 1e-15, 0);
    x[g2.layers[0].offset] = 100.0f;
    eval_spectrum_init(&u, &g2);
    eval_spectrum_add(&u, &g2, x, &e, 1);
    CHECK_CLOSE(eval_spectrum_separation(&s, &u, 0), 1.0, 1e-12, 0);
    CHECK_CLOSE(eval_spectrum_separation(&s, &u, 2), 0.0, 1e-15, 0);

    free(x);
    geo_free(&g1);
    geo_free(&g2);
    return check_finish();
}
