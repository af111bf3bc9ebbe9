/* h5_fixture: small CaloChallenge-shaped HDF5 files written with the HDF5 C
 * API itself, for tests that need files the engine's writer refuses to
 * make: NaN, infinite or negative values, rows declared but never stored,
 * external storage, a damaged compressed chunk.  Header-only; a test that
 * includes it links PkgConfig::HDF5. */
#ifndef H5_FIXTURE_H
#define H5_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <hdf5.h>

typedef struct h5fx {
    int64_t rows;         /* rows both datasets declare                       */
    int voxels;           /* width of showers                                 */
    int64_t chunk_rows;   /* 0: contiguous; else chunks of this many rows     */
    int gzip;             /* deflate level of chunked data (0: none)          */
    int empty;            /* 1: declare the rows, store none                  */
    const char *external; /* showers kept in this raw file (HDF5 "external")  */
    int64_t poke_row;     /* < 0: none; else this row gets poke_value ...     */
    int poke_voxel;       /* ... at this voxel, or as its energy when < 0     */
    float poke_value;
} h5fx;

/* A fixture's good values: energies 1000 + 10 i MeV; about one voxel in
 * five hit, with values that do not compress to nothing. */
static inline float h5fx_energy(int64_t i) { return 1000.0f + 10.0f * (float)i; }
static inline float h5fx_voxel(int64_t i, int v)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(v * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (h % 5 == 0) ? (float)(h % 10007) * 0.01f : 0.0f;
}

/* How a dataset is stored: contiguous (chunk_rows 0) or in chunks of
 * chunk_rows rows with the filters asked for (gzip: the deflate level, 0
 * none); its values in the raw file external when not NULL. */
typedef struct h5fx_layout {
    int64_t chunk_rows;
    int shuffle, gzip, fletcher32;
    const char *external;
} h5fx_layout;

/* One dataset rows x width stored as type, from native floats; data NULL
 * stores nothing.  0, or -1 when HDF5 refused something.  The fuzz target
 * of the reader writes its files with it too. */
static inline int h5fx_dataset_as(hid_t f, const char *name, int64_t rows, int64_t width,
                                  hid_t type, const h5fx_layout *l, const float *data)
{
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)width};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int bad = space < 0 || dcpl < 0;
    if (!bad && l->chunk_rows > 0) {
        hsize_t chunk[2] = {(hsize_t)l->chunk_rows, (hsize_t)width};
        bad = H5Pset_chunk(dcpl, 2, chunk) < 0 || (l->shuffle && H5Pset_shuffle(dcpl) < 0) ||
              (l->gzip > 0 && H5Pset_deflate(dcpl, (unsigned)l->gzip) < 0) ||
              (l->fletcher32 && H5Pset_fletcher32(dcpl) < 0);
    }
    if (!bad && l->external)
        bad = H5Pset_external(dcpl, l->external, 0, (hsize_t)rows * (hsize_t)width * 4) < 0;
    hid_t ds = bad ? -1 : H5Dcreate2(f, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0 || (data && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                    data) < 0))
        bad = 1;
    if (ds >= 0)
        H5Dclose(ds);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return bad ? -1 : 0;
}

/* One float32 dataset rows x width of the fixture x (shuffled and deflated
 * when it asks for gzip); data NULL stores nothing. */
static inline int h5fx_dataset(hid_t f, const char *name, const h5fx *x, int64_t width,
                               const float *data, const char *external)
{
    h5fx_layout l = {x->chunk_rows, x->gzip > 0, x->gzip, 0, external};
    return h5fx_dataset_as(f, name, x->rows, width, H5T_IEEE_F32LE, &l, data);
}

/* Writes the file; 0, or -1 when HDF5 refused something. */
static inline int h5fx_write(const char *path, const h5fx *x)
{
    float *e = NULL, *s = NULL;
    if (!x->empty) {
        e = malloc((size_t)(x->rows ? x->rows : 1) * sizeof *e);
        s = malloc((size_t)(x->rows ? x->rows : 1) * (size_t)x->voxels * sizeof *s);
        if (!e || !s) {
            free(e);
            free(s);
            return -1;
        }
        for (int64_t i = 0; i < x->rows; i++) {
            e[i] = h5fx_energy(i);
            for (int v = 0; v < x->voxels; v++)
                s[i * x->voxels + v] = h5fx_voxel(i, v);
        }
        if (x->poke_row >= 0 && x->poke_row < x->rows) {
            if (x->poke_voxel < 0)
                e[x->poke_row] = x->poke_value;
            else
                s[x->poke_row * x->voxels + x->poke_voxel] = x->poke_value;
        }
    }
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int rc = f < 0 ? -1 : 0;
    if (!rc)
        rc = h5fx_dataset(f, "incident_energies", x, 1, e, NULL);
    if (!rc)
        rc = h5fx_dataset(f, "showers", x, x->voxels, s, x->external);
    if (f >= 0 && H5Fclose(f) < 0)
        rc = -1;
    free(e);
    free(s);
    return rc;
}

/* Damages chunk k of showers in place: 32 bytes in the middle of its stored
 * (compressed) bytes are inverted.  The first row it held is
 * k * chunk_rows.  0, or -1 when there is no such chunk. */
static inline int h5fx_damage_chunk(const char *path, hsize_t k)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = f >= 0 ? H5Dopen2(f, "showers", H5P_DEFAULT) : -1;
    hid_t space = ds >= 0 ? H5Dget_space(ds) : -1;   /* 1.10 takes no H5S_ALL here */
    hsize_t off[2];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    int rc = ds >= 0 && H5Dget_chunk_info(ds, space, k, off, &mask, &addr, &size) >= 0 &&
                     addr != HADDR_UNDEF && size >= 64
                 ? 0
                 : -1;
    if (space >= 0)
        H5Sclose(space);
    if (ds >= 0)
        H5Dclose(ds);
    if (f >= 0)
        H5Fclose(f);
    FILE *io = rc ? NULL : fopen(path, "r+b");
    if (!io)
        return -1;
    unsigned char buf[32];
    long at = (long)(addr + size / 2 - 16);
    if (fseek(io, at, SEEK_SET) != 0 || fread(buf, 1, sizeof buf, io) != sizeof buf)
        rc = -1;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)~buf[i];
    if (!rc && (fseek(io, at, SEEK_SET) != 0 || fwrite(buf, 1, sizeof buf, io) != sizeof buf))
        rc = -1;
    if (fclose(io) != 0)
        rc = -1;
    return rc;
}

#endif
