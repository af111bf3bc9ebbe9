/* sample_args: what `giant sample` is asked for (how many showers, of
 * which run, seed, incident energies, sampler steps, output file), the
 * options it takes both offline (cmd_sample.c) and from a running service
 * (cmd_client.c), parsed one way so that the two spell and check them
 * alike.  Depends on nothing but getopt. */
#ifndef SAMPLE_ARGS_H
#define SAMPLE_ARGS_H

#include <getopt.h>

typedef struct sample_args {
    long long n;               /* showers; 0 until --n */
    long long run;             /* 0: the command's default run */
    long long steps;           /* 0: the run's sample.steps */
    unsigned long long seed;
    const char *out_path;      /* NULL until -o */
    const char *energy;        /* --energy MODE */
    double emin, emax;         /* MeV */
} sample_args;

/* Their getopt_long entries (a command's table lists them, then its own,
 * whose short codes must differ from n o r s E a b k) and short options. */
#define SAMPLE_ARGS_OPTIONS                                                    \
    {"n", required_argument, 0, 'n'}, {"out", required_argument, 0, 'o'},      \
    {"run", required_argument, 0, 'r'}, {"seed", required_argument, 0, 's'},   \
    {"energy", required_argument, 0, 'E'}, {"emin", required_argument, 0, 'a'}, \
    {"emax", required_argument, 0, 'b'}, {"steps", required_argument, 0, 'k'}
#define SAMPLE_ARGS_SHORT "n:o:"

/* The defaults: seed 1, log-uniform energies from 1 GeV to 1 TeV. */
void sample_args_default(sample_args *a);

/* Takes getopt's option o with its argument when it is one of the above:
 * 1 taken, 0 not one of them, -1 a number with trailing characters (said
 * on stderr). */
int sample_args_take(sample_args *a, int o, const char *arg);

/* A whole number the way the options above read one (strtoll; "" is 0):
 * 0, or -1 with "giant sample: bad number 'ARG'" on stderr. */
int sample_args_number(const char *arg, long long *v);

#endif
