/* geo: parse CaloChallenge binning XML with libxml2. */
#include "geo.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

/* libxml2 prints parse errors to stderr by default; we report them through
 * gt_error instead, so a quiet handler swallows them. */
static void geo_xml_quiet(void *ctx, const char *msg, ...)
{
    (void)ctx;
    (void)msg;
}

static int geo_parse_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\t')
        end++;
    if (errno || end == s || *end != '\0' || v < -2147483647L || v > 2147483647L)
        return -1;
    *out = (int)v;
    return 0;
}

/* Parses "0,4.65,9.3" into a freshly allocated array; "0" gives n = 0 bins. */
static int geo_parse_edges(const char *s, double **edges, int *n_r, gt_error *err, int layer_id)
{
    int cap = 16, n = 0;
    double *e = malloc(cap * sizeof *e);
    if (!e)
        return gt_error_set(err, GT_ENOMEM, "out of memory parsing r_edges");
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || v < 0) {
            free(e);
            return gt_error_set(err, GT_EFORMAT, "layer %d: bad r_edges value near \"%.20s\"",
                                layer_id, p);
        }
        if (n == cap) {
            if (cap >= GEO_MAX_R_BINS + 1) {
                free(e);
                return gt_error_set(err, GT_EFORMAT, "layer %d: more than %d radial bins",
                                    layer_id, GEO_MAX_R_BINS);
            }
            cap *= 2;
            double *ne = realloc(e, cap * sizeof *e);
            if (!ne) {
                free(e);
                return gt_error_set(err, GT_ENOMEM, "out of memory parsing r_edges");
            }
            e = ne;
        }
        if (n > 0 && !(v > e[n - 1])) {
            double prev = e[n - 1];
            free(e);
            return gt_error_set(err, GT_EFORMAT, "layer %d: r_edges not strictly increasing "
                                "(%g after %g)", layer_id, v, prev);
        }
        e[n++] = v;
        p = end;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',') {
            free(e);
            return gt_error_set(err, GT_EFORMAT, "layer %d: r_edges: expected ',' near \"%.20s\"",
                                layer_id, p);
        }
        p++;
    }
    if (n - 1 > GEO_MAX_R_BINS) {
        free(e);
        return gt_error_set(err, GT_EFORMAT, "layer %d: more than %d radial bins", layer_id,
                            GEO_MAX_R_BINS);
    }
    if (n == 1) { /* "0": a layer without voxels */
        double only = e[0];
        free(e);
        if (only != 0.0)
            return gt_error_set(err, GT_EFORMAT, "layer %d: r_edges must start at 0 (a layer "
                                "without voxels is \"0\", not \"%g\")", layer_id, only);
        *edges = NULL;
        *n_r = 0;
        return GT_OK;
    }
    *edges = e;
    *n_r = n - 1;
    return GT_OK;
}

void geo_free(geo_geometry *g)
{
    if (!g)
        return;
    if (g->layers)
        for (int i = 0; i < g->n_layers; i++)
            free(g->layers[i].r_edges);
    free(g->layers);
    free(g->active);
    free(g->eta);
    free(g->phi);
    free(g->r);
    free(g->dr);
    free(g->dalpha);
    free(g->voxel_layer);
    memset(g, 0, sizeof *g);
}

static int geo_fill_voxels(geo_geometry *g, gt_error *err)
{
    int V = g->n_voxels;
    g->eta = malloc(V * sizeof(float));
    g->phi = malloc(V * sizeof(float));
    g->r = malloc(V * sizeof(float));
    g->dr = malloc(V * sizeof(float));
    g->dalpha = malloc(V * sizeof(float));
    g->voxel_layer = malloc(V * sizeof(int));
    g->active = malloc((g->n_active ? g->n_active : 1) * sizeof(int));
    if (!g->eta || !g->phi || !g->r || !g->dr || !g->dalpha || !g->voxel_layer || !g->active)
        return gt_error_set(err, GT_ENOMEM, "out of memory for %d voxels", V);
    int a = 0;
    for (int li = 0; li < g->n_layers; li++) {
        geo_layer *l = &g->layers[li];
        if (l->n_voxels == 0)
            continue;
        g->active[a++] = li;
        double da = 2.0 * M_PI / l->n_alpha;
        for (int ia = 0; ia < l->n_alpha; ia++) {
            double alpha = -M_PI + (ia + 0.5) * da;
            for (int ir = 0; ir < l->n_r; ir++) {
                int v = l->offset + ia * l->n_r + ir;
                double rm = 0.5 * (l->r_edges[ir] + l->r_edges[ir + 1]);
                g->r[v] = (float)rm;
                g->eta[v] = (float)(rm * cos(alpha));
                g->phi[v] = (float)(rm * sin(alpha));
                g->dr[v] = (float)(l->r_edges[ir + 1] - l->r_edges[ir]);
                g->dalpha[v] = (float)da;
                g->voxel_layer[v] = li;
            }
        }
    }
    return GT_OK;
}

static int geo_same_binning(const geo_layer *a, const geo_layer *b)
{
    if (a->n_r != b->n_r || a->n_alpha != b->n_alpha)
        return 0;
    if (a->n_r == 0) /* two layers without voxels: no edges are kept */
        return 1;
    for (int i = 0; i <= a->n_r; i++)
        if (a->r_edges[i] != b->r_edges[i])
            return 0;
    return 1;
}

static int geo_from_doc(geo_geometry *g, xmlDocPtr doc, gt_error *err)
{
    xmlNodePtr root = xmlDocGetRootElement(doc);
    if (!root || xmlStrcmp(root->name, (const xmlChar *)"Bins"))
        return gt_error_set(err, GT_EFORMAT, "root element is not <Bins>");
    xmlNodePtr bin = NULL;
    for (xmlNodePtr c = root->children; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE && !xmlStrcmp(c->name, (const xmlChar *)"Bin")) {
            if (bin)
                return gt_error_set(err, GT_EFORMAT, "more than one <Bin> element");
            bin = c;
        }
    if (!bin)
        return gt_error_set(err, GT_EFORMAT, "no <Bin> element");

    xmlChar *pid = xmlGetProp(bin, (const xmlChar *)"pid");
    xmlChar *name = xmlGetProp(bin, (const xmlChar *)"name");
    int rc = GT_OK;
    if (!pid || geo_parse_int((const char *)pid, &g->pid))
        rc = gt_error_set(err, GT_EFORMAT, "<Bin> has no integer pid attribute");
    else if (!name || !name[0] || strlen((const char *)name) >= sizeof g->particle)
        rc = gt_error_set(err, GT_EFORMAT, "<Bin> has no usable name attribute");
    else
        strcpy(g->particle, (const char *)name);
    xmlFree(pid);
    xmlFree(name);
    if (rc)
        return rc;

    int n = 0;
    for (xmlNodePtr c = bin->children; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE && !xmlStrcmp(c->name, (const xmlChar *)"Layer"))
            n++;
    if (n == 0)
        return gt_error_set(err, GT_EFORMAT, "<Bin> has no <Layer> elements");
    if (n > GEO_MAX_LAYERS)
        return gt_error_set(err, GT_EFORMAT, "%d layers (at most %d)", n, GEO_MAX_LAYERS);
    g->layers = calloc(n, sizeof *g->layers);
    if (!g->layers)
        return gt_error_set(err, GT_ENOMEM, "out of memory for %d layers", n);

    int i = 0, offset = 0;
    for (xmlNodePtr c = bin->children; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE || xmlStrcmp(c->name, (const xmlChar *)"Layer"))
            continue;
        geo_layer *l = &g->layers[i];
        g->n_layers = i + 1; /* so geo_free releases what was parsed */
        xmlChar *id = xmlGetProp(c, (const xmlChar *)"id");
        xmlChar *edges = xmlGetProp(c, (const xmlChar *)"r_edges");
        xmlChar *na = xmlGetProp(c, (const xmlChar *)"n_bin_alpha");
        if (!id || geo_parse_int((const char *)id, &l->id))
            rc = gt_error_set(err, GT_EFORMAT, "layer %d: missing or bad id", i);
        else if (l->id != i)
            rc = gt_error_set(err, GT_EFORMAT, "layer %d has id %d (ids must be 0, 1, 2, ...)",
                              i, l->id);
        else if (!na || geo_parse_int((const char *)na, &l->n_alpha) || l->n_alpha < 1 ||
                 l->n_alpha > GEO_MAX_ALPHA_BINS)
            rc = gt_error_set(err, GT_EFORMAT, "layer %d: missing or bad n_bin_alpha", l->id);
        else if (!edges)
            rc = gt_error_set(err, GT_EFORMAT, "layer %d: missing r_edges", l->id);
        else
            rc = geo_parse_edges((const char *)edges, &l->r_edges, &l->n_r, err, l->id);
        xmlFree(id);
        xmlFree(edges);
        xmlFree(na);
        if (rc)
            return rc;
        if (l->n_r > 0 && l->r_edges[0] != 0.0)
            return gt_error_set(err, GT_EFORMAT, "layer %d: r_edges must start at 0", l->id);
        l->n_voxels = l->n_r * l->n_alpha;
        l->offset = offset;
        if (offset > GEO_MAX_VOXELS - l->n_voxels)
            return gt_error_set(err, GT_EFORMAT, "too many voxels (at most %d)",
                                GEO_MAX_VOXELS);
        offset += l->n_voxels;
        l->uniform_r = 1;
        for (int k = 1; k < l->n_r; k++) {
            double w0 = l->r_edges[1] - l->r_edges[0];
            double wk = l->r_edges[k + 1] - l->r_edges[k];
            if (fabs(wk - w0) > 1e-9 * l->r_edges[l->n_r])
                l->uniform_r = 0;
        }
        if (l->n_voxels)
            g->n_active++;
        i++;
    }
    g->n_voxels = offset;
    if (g->n_voxels == 0)
        return gt_error_set(err, GT_EFORMAT, "geometry has no voxels");
    g->regular = 1;
    for (int k = 1; k < g->n_layers; k++)
        if (!geo_same_binning(&g->layers[0], &g->layers[k]))
            g->regular = 0;
    return geo_fill_voxels(g, err);
}

int geo_load_memory(geo_geometry *g, const char *xml, int len, gt_error *err)
{
    memset(g, 0, sizeof *g);
    if (!xml || len <= 0)
        return gt_error_set(err, GT_EINVAL, "empty geometry XML");
    xmlSetGenericErrorFunc(NULL, geo_xml_quiet);
    xmlDocPtr doc = xmlReadMemory(xml, len, "geometry.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    if (!doc) {
        const xmlError *xe = xmlGetLastError();
        return gt_error_set(err, GT_EFORMAT, "geometry XML does not parse%s%s",
                            xe && xe->message ? ": " : "", xe && xe->message ? xe->message : "");
    }
    int rc = geo_from_doc(g, doc, err);
    xmlFreeDoc(doc);
    if (rc)
        geo_free(g);
    return rc;
}

int geo_load_file(geo_geometry *g, const char *path, gt_error *err)
{
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "rb");
    if (!f)
        return gt_error_set(err, GT_EIO, "cannot open geometry %s: %s", path, strerror(errno));
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        n < (64L << 20))
        buf = malloc(n + 1);
    int rc;
    if (!buf) {
        rc = gt_error_set(err, GT_EIO, "cannot read geometry %s (size %ld)", path, n);
    } else if (fread(buf, 1, n, f) != (size_t)n) {
        rc = gt_error_set(err, GT_EIO, "short read on geometry %s", path);
    } else {
        rc = geo_load_memory(g, buf, (int)n, err);
        if (rc)
            gt_error_wrap(err, "geometry %s", path);
    }
    free(buf);
    fclose(f);
    return rc;
}

int geo_find_r_bin(const geo_layer *l, double r)
{
    if (l->n_r == 0 || !(r >= l->r_edges[0]) || r >= l->r_edges[l->n_r])
        return -1;
    if (l->uniform_r) {
        int k = (int)(r / (l->r_edges[1] - l->r_edges[0]));
        /* guard the last edge against rounding */
        if (k >= l->n_r)
            k = l->n_r - 1;
        return k;
    }
    int lo = 0, hi = l->n_r; /* r_edges[lo] <= r < r_edges[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (r >= l->r_edges[mid])
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int geo_find_voxel(const geo_geometry *g, int layer, double r, double alpha)
{
    if (layer < 0 || layer >= g->n_layers)
        return -1;
    const geo_layer *l = &g->layers[layer];
    int ir = geo_find_r_bin(l, r);
    if (ir < 0 || !(alpha >= -M_PI) || !(alpha < M_PI))
        return -1;
    int ia = (int)((alpha + M_PI) / (2.0 * M_PI) * l->n_alpha);
    if (ia >= l->n_alpha)
        ia = l->n_alpha - 1;
    return l->offset + ia * l->n_r + ir;
}

static int gcd_int(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int geo_rotation_count(const geo_geometry *g)
{
    int G = 0;
    for (int i = 0; i < g->n_active; i++) {
        int n = g->layers[g->active[i]].n_alpha;
        if (n > 1)
            G = gcd_int(G, n);
    }
    return G > 0 ? G : 1;
}

void geo_turn_shower(const geo_geometry *g, const float *in, float *out, int k, int mirror)
{
    const int G = geo_rotation_count(g);
    k = ((k % G) + G) % G;
    for (int i = 0; i < g->n_active; i++) {
        const geo_layer *l = &g->layers[g->active[i]];
        const int na = l->n_alpha, nr = l->n_r;
        const int shift = k * (na / G);   /* na is a multiple of G, or 1 */
        for (int a = 0; a < na; a++) {
            int b = (a + shift) % na;
            if (mirror)
                b = na - 1 - b;
            memcpy(out + l->offset + (size_t)b * nr, in + l->offset + (size_t)a * nr,
                   (size_t)nr * sizeof(float));
        }
    }
}
