/* bench_host: the host's share of `giant sample`, the part a GPU does not
 * take: decoding model vectors into showers (prep_decode_showers) and
 * deflating the HDF5 chunks (libdeflate), against zlib's compress2 on the
 * same chunks as the peer.
 *
 * Showers come from the built-in simulator on the dataset-2 geometry and
 * are encoded the way the shipped configs' stage 2 sees them (rings, ring
 * hit counts by stick-breaking, dequantized, keep-largest), so decoding
 * does what it does after the sampler.  Deflating works on the decoded
 * showers, shuffled into the writer's 1 MiB chunks.  One thread for the
 * per-core rates, then all of them for decoding and the writer itself;
 * last, turning the showers (sample.symmetrize) on one thread.
 *
 * Rows: `RESULT name seconds per_s` (per_s: showers a second) and
 * `RATIO name x`.  Usage: bench_host GEOMETRY.xml [--n N] */
#include <libdeflate.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "calo_h5.h"
#include "geo.h"
#include "prep.h"
#include "synth.h"

/* Deflates every chunk on one thread: zlib (peer) or libdeflate at level.
 * Returns the seconds; *out the compressed bytes. */
static double deflate_all(const unsigned char *shuffled, int n_chunks, size_t chunk, int level,
                          int use_zlib, unsigned char *out, size_t cap, size_t *total)
{
    struct libdeflate_compressor *z = use_zlib ? NULL : libdeflate_alloc_compressor(level);
    *total = 0;
    double t0 = omp_get_wtime();
    for (int c = 0; c < n_chunks; c++) {
        const unsigned char *in = shuffled + (size_t)c * chunk;
        if (use_zlib) {
            uLongf len = (uLongf)cap;
            if (compress2(out, &len, in, (uLong)chunk, level) != Z_OK)
                return -1;
            *total += len;
        } else {
            size_t len = z ? libdeflate_zlib_compress(z, in, chunk, out, cap) : 0;
            if (!len)
                return -1;
            *total += len;
        }
    }
    double dt = omp_get_wtime() - t0;
    libdeflate_free_compressor(z);
    return dt;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_host GEOMETRY.xml [--n N]\n");
        return 2;
    }
    int64_t n = 4096;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            char *end;
            n = strtoll(argv[++i], &end, 10);
            if (*end || n < 40 || n > 1 << 20) {
                fprintf(stderr, "bench_host: --n must be a number in [40, 1048576]\n");
                return 2;
            }
        } else {
            fprintf(stderr, "bench_host: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const int threads = omp_get_max_threads();
    gt_error err = {0};
    geo_geometry g;
    synth_detector d;
    synth_config sc;
    prep_layout p;
    if (geo_load_file(&g, argv[1], &err) || synth_detector_init(&d, &g, &err)) {
        fprintf(stderr, "bench_host: %s\n", err.message);
        return 1;
    }
    synth_config_default(&sc);
    const int V = g.n_voxels;
    float *e_inc = malloc((size_t)n * sizeof *e_inc);
    float *showers = malloc((size_t)n * V * sizeof *showers);
    float *back = malloc((size_t)n * V * sizeof *back);
    float *e_dep = malloc((size_t)n * sizeof *e_dep);
    if (!e_inc || !showers || !back || !e_dep ||
        synth_generate(&d, &g, &sc, 0, n, NULL, e_inc, showers, &err) ||
        prep_layout_init(&p, &g, (float)d.threshold_mev, &err)) {
        fprintf(stderr, "bench_host: %s\n", err.message[0] ? err.message : "out of memory");
        return 1;
    }
    /* the shipped configs' stage-2 representation (model_config.c) */
    p.dequantize = 1;
    p.voxel_alpha = 1e-10;
    p.dequant_top = 1e-4;
    p.keep_largest = 1;
    prep_layout_set_rings(&p, 1);
    prep_layout_set_counts(&p, 1);
    prep_layout_set_count_stick(&p, 1);
    float *x = malloc((size_t)n * p.dim * sizeof *x);
    if (!x)
        return 1;
    for (int64_t i = 0; i < n; i++)
        if (prep_encode_shower_keyed(&p, showers + i * V, (uint64_t)i, x + i * p.dim, &e_dep[i],
                                     &err)) {
            fprintf(stderr, "bench_host: %s\n", err.message);
            return 1;
        }
    printf("# %lld dataset-2 showers (%d voxels, %d features a vector), %d threads\n",
           (long long)n, V, p.dim, threads);

    /* decoding: one thread, then all; the best of three each, into pages
     * already touched (a fresh page's first write, the kernel zeroing it,
     * is not decoding's cost and varies from machine to machine) */
    memset(back, 0, (size_t)n * V * sizeof *back);
    double dec1 = 1e30, decn = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        omp_set_num_threads(1);
        double t0 = omp_get_wtime();
        prep_decode_showers(&p, x, e_dep, n, back);
        double t1 = omp_get_wtime() - t0;
        omp_set_num_threads(threads);
        t0 = omp_get_wtime();
        prep_decode_showers(&p, x, e_dep, n, back);
        double tn = omp_get_wtime() - t0;
        dec1 = t1 < dec1 ? t1 : dec1;
        decn = tn < decn ? tn : decn;
    }
    printf("RESULT decode_1thread %.3f %.0f\n", dec1, (double)n / dec1);
    printf("RESULT decode_%dthreads %.3f %.0f\n", threads, decn, (double)n / decn);

    /* deflating the writer's chunks on one thread: libdeflate and zlib */
    const int64_t chunk_rows = (1 << 20) / ((int64_t)V * 4);
    const int n_chunks = (int)(n / chunk_rows);
    const size_t chunk = (size_t)chunk_rows * V * 4;
    unsigned char *shuf = malloc((size_t)n_chunks * chunk);
    const size_t cap = chunk + chunk / 8 + 1024;
    unsigned char *out = malloc(cap);
    if (!shuf || !out)
        return 1;
    for (int c = 0; c < n_chunks; c++)
        calo_h5_shuffle4((const unsigned char *)back + (size_t)c * chunk, shuf + (size_t)c * chunk,
                         chunk);
    const double rows = (double)n_chunks * (double)chunk_rows;
    const int levels[2] = {1, 4};
    double t_lib[2] = {0}, t_zlib[2] = {0};
    for (int k = 0; k < 2; k++) {
        size_t zb = 0, lb = 0;
        t_zlib[k] = deflate_all(shuf, n_chunks, chunk, levels[k], 1, out, cap, &zb);
        t_lib[k] = deflate_all(shuf, n_chunks, chunk, levels[k], 0, out, cap, &lb);
        if (t_zlib[k] < 0 || t_lib[k] < 0) {
            fprintf(stderr, "bench_host: compression failed\n");
            return 1;
        }
        printf("RESULT deflate_zlib_%d_1thread %.3f %.0f bytes_ratio %.4f\n", levels[k],
               t_zlib[k], rows / t_zlib[k], (double)zb / ((double)n_chunks * chunk));
        printf("RESULT deflate_libdeflate_%d_1thread %.3f %.0f bytes_ratio %.4f\n", levels[k],
               t_lib[k], rows / t_lib[k], (double)lb / ((double)n_chunks * chunk));
        printf("RATIO libdeflate_over_zlib_level%d %.2f\n", levels[k], t_zlib[k] / t_lib[k]);
    }
    printf("RATIO libdeflate1_over_zlib4 %.2f\n", t_zlib[1] / t_lib[0]);

    /* the writer itself (shuffle, deflate, HDF5), all threads, to memory */
    for (int k = 0; k < 2; k++) {
        calo_h5_writer w;
        void *img = NULL;
        size_t len = 0;
        double t0 = omp_get_wtime();
        if (calo_h5_create_memory(&w, V, 0, levels[k], &err) ||
            calo_h5_append(&w, e_inc, back, n, &err) ||
            calo_h5_finish_memory(&w, &img, &len, &err)) {
            fprintf(stderr, "bench_host: %s\n", err.message);
            return 1;
        }
        double dt = omp_get_wtime() - t0;
        printf("RESULT writer_level%d_%dthreads %.3f %.0f file_bytes %zu\n", levels[k], threads,
               dt, (double)n / dt, len);
        free(img);
    }

    /* turning (sample.symmetrize): each shower rotated about the beam axis
     * and mirrored by one of the geometry's turns, as the sampler does
     * after decoding, one thread (best of three) */
    const int turns = geo_rotation_count(&g);
    float *tmp = malloc((size_t)V * sizeof *tmp);
    if (!tmp)
        return 1;
    double turn1 = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = omp_get_wtime();
        for (int64_t i = 0; i < n; i++) {
            int k = (int)((i + rep) % turns), mirror = (int)((i / turns) & 1);
            if (!k && !mirror)
                continue;
            geo_turn_shower(&g, back + i * V, tmp, k, mirror);
            memcpy(back + i * V, tmp, (size_t)V * sizeof *tmp);
        }
        double dt = omp_get_wtime() - t0;
        turn1 = dt < turn1 ? dt : turn1;
    }
    printf("RESULT turn_1thread %.3f %.0f\n", turn1, (double)n / turn1);
    free(tmp);
    free(shuf);
    free(out);
    free(x);
    free(e_dep);
    free(back);
    free(showers);
    free(e_inc);
    synth_detector_free(&d);
    geo_free(&g);
    return 0;
}
