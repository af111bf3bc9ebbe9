#include "sample_args.h"

#include <stdio.h>
#include <stdlib.h>

void sample_args_default(sample_args *a)
{
    *a = (sample_args){0};
    a->seed = 1;
    a->energy = "log-uniform";
    a->emin = 1e3;
    a->emax = 1e6;
}

/* end: where the number stopped; anything after it refuses the option */
static int parsed(const char *arg, const char *end)
{
    if (!*end)
        return 0;
    fprintf(stderr, "giant sample: bad number '%s'\n", arg);
    return -1;
}

int sample_args_number(const char *arg, long long *v)
{
    char *end;
    *v = strtoll(arg, &end, 10);
    return parsed(arg, end);
}

int sample_args_take(sample_args *a, int o, const char *arg)
{
    char *end;
    switch (o) {
    case 'n': return sample_args_number(arg, &a->n) ? -1 : 1;
    case 'r': return sample_args_number(arg, &a->run) ? -1 : 1;
    case 'k': return sample_args_number(arg, &a->steps) ? -1 : 1;
    case 's': a->seed = strtoull(arg, &end, 10); break;
    case 'a': a->emin = strtod(arg, &end); break;
    case 'b': a->emax = strtod(arg, &end); break;
    case 'o': a->out_path = arg; return 1;
    case 'E': a->energy = arg; return 1;
    default: return 0;
    }
    return parsed(arg, end) ? -1 : 1;
}
