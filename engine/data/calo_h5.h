/* calo_h5: CaloChallenge HDF5 files (incident_energies (N,1), showers (N,V),
 * MeV) read and written with libhdf5.
 *
 * The reader streams row ranges so that a dataset-3 file (tens of GB) never
 * has to fit in memory; it accepts float32 or float64 on disk and always
 * hands out float32, and it validates every row it reads (NaN, infinity and
 * negative energies are errors that name the row).  The writer appends rows
 * to chunked, gzip-compressed float32 datasets that h5py and the
 * CaloChallenge evaluation script read.  HDF5's own error-stack printing is
 * switched off; its innermost message is folded into the gt_error.
 * Every function here may be called from any thread: calls into the
 * (not thread-safe) libhdf5 are serialised by one lock. */
#ifndef CALO_H5_H
#define CALO_H5_H

#include <stddef.h>
#include <stdint.h>

#include "geo.h"
#include "gt_error.h"

typedef struct calo_h5_reader {
    int64_t file, ds_energy, ds_shower; /* hid_t, kept opaque here */
    int64_t n_rows;
    int n_voxels;
    int64_t next_row;                   /* for calo_h5_read_next */
    char path[512];
} calo_h5_reader;

/* Opens `path` and checks both datasets; when geo is not NULL the shower
 * width must equal geo->n_voxels. */
int calo_h5_open(calo_h5_reader *r, const char *path, const geo_geometry *geo, gt_error *err);

/* Reads rows [row0, row0 + n) into energies (n) and showers (n * n_voxels),
 * either of which may be NULL to skip it, and validates them. */
int calo_h5_read_rows(calo_h5_reader *r, int64_t row0, int64_t n, float *energies,
                      float *showers, gt_error *err);

/* Streams the file: reads up to max_rows rows following the previous call,
 * sets *row0 and *n_read (0 at the end of the file). */
int calo_h5_read_next(calo_h5_reader *r, int64_t max_rows, float *energies, float *showers,
                      int64_t *row0, int64_t *n_read, gt_error *err);

void calo_h5_close(calo_h5_reader *r);

/* How an open file stores its rows, as its metadata says. */
typedef struct calo_h5_storage {
    int64_t chunk_rows; /* rows per chunk of showers; 0 when not chunked       */
    int compressed;     /* 1 when either dataset is deflated                   */
} calo_h5_storage;

/* From metadata only (no row is read, so it takes the same time for any N):
 * that the rows both datasets declare can be in a file of file_size bytes.
 * Uncompressed data must fit in the file (a contiguous dataset must be
 * stored whole), deflated data in 1100 times it (deflate's ratio is at most
 * 1032:1); chunks hold at most 64 MiB; only the shuffle, deflate and
 * fletcher32 filters are taken (others, such as scale-offset, can stand for
 * any number of rows in a few bytes); external and virtual datasets, which
 * read other files, are refused.  GT_EFORMAT with the reason otherwise.
 * st may be NULL. */
int calo_h5_check_storage(calo_h5_reader *r, int64_t file_size, calo_h5_storage *st,
                          gt_error *err);

/* What calo_h5_scan found in a file whose every row is valid. */
typedef struct calo_h5_scan_stats {
    int64_t rows;        /* rows read and checked                    */
    double e_min, e_max; /* range of the incident energies, MeV      */
} calo_h5_scan_stats;

/* Called by calo_h5_scan after each block with the rows checked so far; a
 * non-zero return stops the scan, which returns that code. */
typedef int (*calo_h5_scan_fn)(void *user, int64_t rows_done, int64_t rows_total);

/* Reads every row of an open file in blocks of block_rows (<= 0: about
 * 1 MiB of showers, in whole chunks so that no chunk is decompressed
 * twice; the HDF5 lock is let go between blocks) and checks each value as calo_h5_read_rows does; memory is one
 * block.  The first failure is an error naming the row (and the voxel):
 * a block that cannot be read (a corrupt compressed chunk, a truncated
 * file) is read again row by row to find the first row that cannot.
 * fn may be NULL. */
int calo_h5_scan(calo_h5_reader *r, int64_t block_rows, calo_h5_scan_fn fn, void *user,
                 calo_h5_scan_stats *out, gt_error *err);

/* Convenience for small files: reads everything into new arrays (free()). */
int calo_h5_read_all(const char *path, const geo_geometry *geo, float **energies,
                     float **showers, int64_t *n_rows, gt_error *err);

/* Shower rows are staged in memory and written as whole chunks: the
 * chunks of one stage are shuffled and deflated in parallel (OpenMP, zlib)
 * and handed to HDF5 with H5Dwrite_chunk, because HDF5's own filter
 * pipeline compresses on one thread and is the bottleneck of `giant synth`.
 * The filters recorded in the file are HDF5's standard shuffle + deflate,
 * so any HDF5 reader (h5py) decompresses them. */
typedef struct calo_h5_writer {
    int64_t file, ds_energy, ds_shower;
    int64_t n_rows;        /* rows appended so far                        */
    int n_voxels;
    int gzip_level;
    int64_t chunk_rows;    /* rows per HDF5 chunk                          */
    int n_stage_chunks;    /* chunks per parallel flush                    */
    int64_t staged;        /* rows waiting in stage                        */
    int64_t flushed;       /* rows already written as chunks               */
    float *stage;          /* n_stage_chunks * chunk_rows * n_voxels       */
    unsigned char *zbuf;   /* per chunk: shuffle scratch + deflate output  */
    size_t zcap;           /* bytes of zbuf per chunk                      */
    size_t *zlen;          /* compressed length per chunk                  */
    double compress_s;     /* seconds spent shuffling and deflating chunks */
} calo_h5_writer;

/* Creates (truncates) `path`.  chunk_rows <= 0 picks a chunk of about 1 MiB;
 * gzip_level 0..9 (0 = uncompressed). */
int calo_h5_create(calo_h5_writer *w, const char *path, int n_voxels, int64_t chunk_rows,
                   int gzip_level, gt_error *err);

/* Appends n rows; energies (n), showers (n * n_voxels), MeV. */
int calo_h5_append(calo_h5_writer *w, const float *energies, const float *showers, int64_t n,
                   gt_error *err);

/* HDF5's shuffle filter for 4-byte elements (bytes a multiple of 4): byte
 * 0 of every element, then byte 1, 2 and 3; what the writer deflates. */
void calo_h5_shuffle4(const void *src, void *dst, size_t bytes);

/* Flushes and closes; safe to call on a writer whose create failed. */
int calo_h5_finish(calo_h5_writer *w, gt_error *err);

/* The same writer with the file held in memory (HDF5 core driver), for
 * HTTP responses: calo_h5_finish_memory closes it and hands back the bytes
 * of a complete HDF5 file (malloc'd, caller frees). */
int calo_h5_create_memory(calo_h5_writer *w, int n_voxels, int64_t chunk_rows, int gzip_level,
                          gt_error *err);
int calo_h5_finish_memory(calo_h5_writer *w, void **image, size_t *len, gt_error *err);

/* Checks n rows of data in memory the way the reader does (first bad row is
 * reported with row_base added to its index). */
int calo_h5_check_rows(const float *energies, const float *showers, int64_t n, int n_voxels,
                       int64_t row_base, gt_error *err);

#endif
