#include "numfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *numfmt_double(char *buf, size_t cap, double v)
{
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (!isfinite(v) || strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

char *numfmt_float(char *buf, size_t cap, float v)
{
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)v);
        if (!isfinite(v) || strtof(buf, NULL) == v)
            break;
    }
    return buf;
}

double numfmt_float_as_double(float v)
{
    char buf[32];
    return isfinite(v) ? strtod(numfmt_float(buf, sizeof buf, v), NULL) : (double)v;
}

/* A number token of JSON text at s: its length. */
static size_t number_len(const char *s, int *real)
{
    size_t n = 0;
    *real = 0;
    while (s[n] && strchr("+-0123456789.eE", s[n])) {
        if (s[n] == '.' || s[n] == 'e' || s[n] == 'E')
            *real = 1;
        n++;
    }
    return n;
}

/* Significant digits of a number token (what %.Ng wrote: N at most). */
static int significant_digits(const char *s, size_t n)
{
    int digits = 0, leading = 1;
    for (size_t i = 0; i < n && s[i] != 'e' && s[i] != 'E'; i++) {
        if (s[i] < '0' || s[i] > '9')
            continue;
        if (leading && s[i] == '0')
            continue;
        leading = 0;
        digits++;
    }
    return digits;
}

/* numfmt_double of the value of a %.17g token, which is itself the last
 * candidate: a token of 15 or fewer digits is already shortest (the caller
 * skips it), and a 17-digit one needs only %.15g and %.16g tried. */
static void shortest_of_token(char *buf, size_t cap, const char *token)
{
    double v = strtod(token, NULL);
    for (int p = 15; p <= 16; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
    snprintf(buf, cap, "%s", token);
}

char *numfmt_dumps(const json_t *j, size_t flags)
{
    char *text = json_dumps(j, flags);
    if (!text)
        return NULL;
    /* A real never grows (17 digits is Jansson's own), but ".0" may be
     * added to a shortened one: room for that. */
    size_t len = strlen(text);
    char *out = malloc(len + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    size_t o = 0;
    int in_string = 0;
    for (size_t i = 0; i < len;) {
        char ch = text[i];
        if (in_string) {
            out[o++] = ch;
            if (ch == '\\' && i + 1 < len)
                out[o++] = text[++i];
            else if (ch == '"')
                in_string = 0;
            i++;
            continue;
        }
        if (ch == '"') {
            in_string = 1;
            out[o++] = ch;
            i++;
            continue;
        }
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            int real;
            size_t n = number_len(text + i, &real);
            char num[40];
            if (real && n < sizeof num && significant_digits(text + i, n) > 15) {
                memcpy(num, text + i, n);
                num[n] = '\0';
                char s[48];            /* the token (< 40) and ".0" */
                shortest_of_token(s, sizeof s - 2, num);
                if (!strpbrk(s, ".eEni"))
                    strcat(s, ".0");
                size_t m = strlen(s);
                if (m <= n) {          /* never longer than what it replaces */
                    memcpy(out + o, s, m);
                    o += m;
                    i += n;
                    continue;
                }
            }
            memcpy(out + o, text + i, n);
            o += n;
            i += n;
            continue;
        }
        out[o++] = ch;
        i++;
    }
    out[o] = '\0';
    free(text);
    return out;
}
