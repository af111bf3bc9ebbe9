#include "gt_devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static gt_devices_query_fn gpu_query;
static gt_devices_memory_fn gpu_memory;

void gt_devices_set_gpu_query(gt_devices_query_fn fn)
{
    gpu_query = fn;
}

void gt_devices_set_gpu_memory_query(gt_devices_memory_fn fn)
{
    gpu_memory = fn;
}

int gt_devices_memory(const gt_device_info *d, size_t *used, size_t *free_bytes, gt_error *err)
{
    if (!d || !used || !free_bytes)
        return gt_error_set(err, GT_EINVAL, "gt_devices_memory: bad arguments");
    if (strcmp(d->kind, "cpu") != 0) {
        if (!gpu_memory)
            return GT_ENOTFOUND;
        return gpu_memory(d->index, used, free_bytes, err);
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return GT_ENOTFOUND;
    char line[256];
    unsigned long long kib, total = 0, avail = 0;
    int have = 0;
    while (have != 3 && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            total = kib, have |= 1;
        else if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            avail = kib, have |= 2;
    }
    fclose(f);
    if (have != 3 || avail > total)
        return GT_ENOTFOUND;   /* a kernel without MemAvailable (before 3.14) */
    *free_bytes = (size_t)avail * 1024u;
    *used = (size_t)(total - avail) * 1024u;
    return GT_OK;
}

/* True when the whitespace-separated list holds word exactly (flags lines
 * contain avx512_bf16 as well as longer names sharing its prefix). */
static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
        int start = p == list || p[-1] == ' ' || p[-1] == '\t';
        int end = p[n] == '\0' || p[n] == ' ' || p[n] == '\n' || p[n] == '\t';
        if (start && end)
            return 1;
    }
    return 0;
}

/* Copies the value after "key<spaces>: " into dst, trimmed of the newline. */
static int cpuinfo_value(const char *line, const char *key, char *dst, size_t cap)
{
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0)
        return 0;
    const char *colon = strchr(line + n, ':');
    if (!colon)
        return 0;
    for (const char *p = line + n; p < colon; p++)
        if (*p != ' ' && *p != '\t')
            return 0;          /* a longer key sharing the prefix */
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t len = strcspn(v, "\n");
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, v, len);
    dst[len] = '\0';
    return 1;
}

int gt_devices_query_cpu(gt_device_info *out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "gt_devices_query_cpu: out is NULL");
    memset(out, 0, sizeof *out);
    strcpy(out->kind, "cpu");
    strcpy(out->name, "unknown CPU");

    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = n > 0 ? (int)n : 1;

    /* /proc may be missing in odd sandboxes: the CPU is still listed. */
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        /* Flags lines are long (well over 1 KiB on recent x86). */
        char line[16384];
        int got_name = 0, got_flags = 0;
        while (fgets(line, sizeof line, f) && !(got_name && got_flags)) {
            if (!got_name && cpuinfo_value(line, "model name", out->name, sizeof out->name))
                got_name = 1;
            else if (!got_flags && strncmp(line, "flags", 5) == 0) {
                got_flags = 1;
                out->bf16 = has_word(line, "avx512_bf16");
            }
        }
        fclose(f);
    }
    /* The CPU backend's switch to its emulation (nn_cpu.c) says how the
     * engine will use this CPU, so the listing follows it: a service told
     * to emulate behaves as on a CPU without AVX512-BF16 (and tests can
     * prove that behaviour on any CPU). */
    const char *force = getenv("GIANT_CPU_BF16");
    if (force && strcmp(force, "emulate") == 0)
        out->bf16 = 0;
    f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) {
                out->memory_bytes = (size_t)kib * 1024u;
                break;
            }
        fclose(f);
    }
    return GT_OK;
}

int gt_devices_query(gt_device_info *out, int max, int *count, gt_error *err)
{
    if (!out || !count || max < 1)
        return gt_error_set(err, GT_EINVAL, "gt_devices_query: need room for at least one device");
    *count = 0;
    int rc = gt_devices_query_cpu(&out[0], err);
    if (rc != GT_OK)
        return rc;
    *count = 1;
    if (!gpu_query || max == 1)
        return GT_OK;
    int ngpu = 0;
    rc = gpu_query(out + 1, max - 1, &ngpu, err);
    if (rc != GT_OK)
        return gt_error_wrap(err, "listing GPUs");
    if (ngpu < 0 || ngpu > max - 1)
        return gt_error_set(err, GT_EDEVICE, "GPU lister returned %d devices for %d slots", ngpu, max - 1);
    *count = 1 + ngpu;
    return GT_OK;
}
