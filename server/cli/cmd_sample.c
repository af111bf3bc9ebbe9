/* giant sample: write generated showers of a trained run to a CaloChallenge
 * HDF5 file (incident_energies (N,1), showers (N,V), MeV). */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calo_h5.h"
#include "commands.h"
#include "gt_clock.h"
#include "model_config.h"
#include "model_run.h"
#include "model_sampler.h"
#include "runs.h"
#include "sample_args.h"
#include "settings.h"
#include "store.h"
#include "synth.h"

/* Rows per device pass at most: 65536 dataset-2 showers are 1.7 GB. */
#define SAMPLE_MAX_BATCH 65536

static void usage(FILE *f)
{
    fprintf(f,
            "usage: giant sample --n N -o OUT.h5 [options]\n\n"
            "Generates N showers from the best checkpoints of a run (the most recent run\n"
            "that succeeded unless --run is given) and writes a CaloChallenge HDF5 file.\n\n"
            "options:\n"
            "  --run ID          run to sample from\n"
            "  --seed S          seed of the energies and the noise (default 1)\n"
            "  --energy MODE     log-uniform (default), discrete or fixed\n"
            "  --emin MEV        lowest incident energy (default 1000)\n"
            "  --emax MEV        highest incident energy (default 1000000)\n"
            "  --steps K         sampler steps (default: the run's sample.steps)\n"
            "  --batch B         showers per device pass (default 1024, at most 65536);\n"
            "                    the showers are the same bytes whatever it is\n"
            "  --device SPEC     cpu, cuda:N or auto (default: the run's train.device)\n"
            "  --no-accept       leave out the run's acceptance test (model.accept), when it\n"
            "                    has one: every shower its first draw\n"
            "  --temperature T   stage 2's starting noise, in (0, 2] (default: the run's\n"
            "                    sample.temperature); a study's knob: the run's acceptance\n"
            "                    test was trained against its own temperature\n"
            "  --gzip L          deflate level of the file, 0 (none) to 9 (default 1); on a\n"
            "                    GPU deflating is a large part of the host's time: 4 makes\n"
            "                    a file about 2%% smaller and deflates at two thirds the speed\n"
            "  --db FILE         database (default %s, env GIANT_DB)\n"
            "  --server URL      ask a running service instead (giant sample --server URL --help)\n",
            settings_default("db"));
}

/* Batch k is written (deflated and appended, on a thread of its own)
 * while batch k + 1 is sampled: on a GPU the device's part and the host's
 * deflating then overlap instead of taking turns.  Two buffers of each;
 * the file gets the batches in order, the same bytes as one after the
 * other. */
typedef struct sample_write_job {
    pthread_t thread;
    int running;
    calo_h5_writer *w;
    const float *e_inc, *showers;
    long long m;
    int rc;
    gt_error err;
    double seconds;
} sample_write_job;

static void *sample_write_main(void *arg)
{
    sample_write_job *j = arg;
    double t0 = gt_clock_s();
    j->rc = calo_h5_append(j->w, j->e_inc, j->showers, j->m, &j->err);
    j->seconds = gt_clock_s() - t0;
    return NULL;
}

/* Waits for the write in flight, if any; its failure becomes *err. */
static int sample_write_wait(sample_write_job *j, double *t_write, gt_error *err)
{
    if (!j->running)
        return GT_OK;
    pthread_join(j->thread, NULL);
    j->running = 0;
    *t_write += j->seconds;
    if (j->rc)
        *err = j->err;
    return j->rc;
}

/* What `giant sample` was asked, after its options. */
typedef struct sample_opts {
    sample_args a;
    const char *db_path, *device;
    long long batch, gzip;
    int no_accept;
    double temperature;   /* 0: the run's sample.temperature */
} sample_opts;

/* The options into o, checked: every refusal says what was wrong; a batch
 * only sizes the passes (showers do not depend on it), so one out of range
 * is adjusted.  Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, sample_opts *o)
{
    *o = (sample_opts){.db_path = settings_env_or_default("db"), .batch = 1024, .gzip = 1};
    sample_args *a = &o->a;
    sample_args_default(a);
    static const struct option opts[] = {
        SAMPLE_ARGS_OPTIONS,
        {"batch", required_argument, 0, 'B'},  {"device", required_argument, 0, 'x'},
        {"db", required_argument, 0, 'd'},     {"help", no_argument, 0, 'h'},
        {"gzip", required_argument, 0, 'z'},   {"no-accept", no_argument, 0, 'A'},
        {"temperature", required_argument, 0, 'T'}, {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, SAMPLE_ARGS_SHORT "h", opts, NULL)) != -1) {
        int taken = sample_args_take(a, c, optarg);
        if (taken < 0)
            return 2;
        if (taken)
            continue;
        switch (c) {
        case 'B':
            if (sample_args_number(optarg, &o->batch))
                return 2;
            break;
        case 'z':
            if (sample_args_number(optarg, &o->gzip))
                return 2;
            break;
        case 'x': o->device = optarg; break;
        case 'A': o->no_accept = 1; break;
        case 'T': {
            char *end = NULL;
            o->temperature = strtod(optarg, &end);
            if (!end || *end || !(o->temperature > 0 && o->temperature <= 2)) {
                fprintf(stderr, "giant sample: --temperature must be in (0, 2], not \"%s\"\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'd': o->db_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *bad = NULL;
    if (optind != argc)
        bad = "unexpected argument";
    else if (a->n <= 0)
        bad = "--n must be a positive number of showers";
    else if (!a->out_path)
        bad = "-o OUT.h5 is required";
    else if (a->steps < 0 || a->steps > 10000)
        bad = "--steps must be in [1, 10000] (0: the run's sample.steps)";
    else if (o->batch < 1)
        bad = "--batch must be at least 1";
    else if (o->gzip < 0 || o->gzip > 9)
        bad = "--gzip must be a deflate level in [0, 9]";
    if (bad) {
        fprintf(stderr, "giant sample: %s%s%s\n", bad, optind != argc ? ": " : "",
                optind != argc ? argv[optind] : "");
        usage(stderr);
        return 2;
    }
    if (o->batch > SAMPLE_MAX_BATCH) {
        fprintf(stderr, "giant sample: --batch %lld is more than %d rows per pass; using %d\n",
                o->batch, SAMPLE_MAX_BATCH, SAMPLE_MAX_BATCH);
        o->batch = SAMPLE_MAX_BATCH;
    }
    if (o->batch > a->n)
        o->batch = a->n;
    return -1;
}

/* The run's sampler and what it was opened from; sample_src_close frees
 * what is set. */
typedef struct sample_src {
    store *db;
    void *ck1, *ck2;
    size_t l1, l2;
    model_config cfg;
    nn_backend *b;
    model_sampler *smp;
    int accepting;             /* the run's acceptance test is in use */
    double t_open;             /* when opening the backend began */
} sample_src;

static void sample_src_close(sample_src *s)
{
    free(s->ck1);
    free(s->ck2);
    model_sampler_close(s->smp);
    nn_backend_close(s->b);
    store_close(s->db, NULL);
}

/* Opens the sampler of run o->a.run (the latest that succeeded when 0):
 * its config with --device, its best checkpoints, and its acceptance test
 * for its best pair when it has one and --no-accept was not given. */
static int open_run(sample_opts *o, sample_src *s, gt_error *err)
{
    sample_args *a = &o->a;
    if (store_open_migrated(&s->db, o->db_path, NULL, NULL, err))
        return 1;
    if (!a->run) {
        int64_t id;
        if (runs_latest_succeeded(s->db, &id, err))
            return 1;
        a->run = id;
    }
    if (runs_read_config(s->db, a->run, &s->cfg, err) ||
        runs_load_checkpoint(s->db, a->run, 1, 1, &s->ck1, &s->l1, NULL, err) ||
        runs_load_checkpoint(s->db, a->run, 2, 1, &s->ck2, &s->l2, NULL, err))
        return 1;
    if (o->device)
        snprintf(s->cfg.device, sizeof s->cfg.device, "%s", o->device);
    if (o->temperature > 0)
        s->cfg.temperature = o->temperature;
    s->t_open = gt_clock_s();
    if (model_open_backend(&s->cfg, MODEL_BF16_EMULATE, &s->b, err) ||
        model_sampler_open(s->b, &s->cfg, s->ck1, s->l1, s->ck2, s->l2, (int)o->batch, &s->smp,
                           err))
        return 1;
    if (!s->cfg.accept.enabled || o->no_accept)
        return 0;
    void *acc = NULL;
    size_t acc_len = 0;
    gt_error none;
    int arc = runs_load_acceptance(s->db, a->run, &acc, &acc_len, &none);
    if (arc == GT_OK)
        arc = model_sampler_set_accept(s->smp, acc, acc_len, err);
    else if (arc == GT_ENOTFOUND)
        fprintf(stderr, "giant sample: run %lld has no acceptance test for its best "
                        "checkpoints: sampling without one\n", a->run);
    else
        *err = none;
    free(acc);
    s->accepting = arc == GT_OK;
    return arc && arc != GT_ENOTFOUND;
}

/* Where the time of a file went, and what its showers cost. */
typedef struct sample_times {
    double open, total, run, device, decode, write, compress, waited;
    double evals, flops, draws;
} sample_times;

/* Samples o->a.n showers in batches into o->a.out_path: batch k written
 * while batch k + 1 is sampled (sample_write_job), the file the same
 * bytes whatever the batch is. */
static int write_showers(const sample_opts *o, sample_src *s, const synth_config *sc,
                         sample_times *t, gt_error *err)
{
    const sample_args *a = &o->a;
    const long long batch = o->batch;
    float *e_inc[2] = {NULL, NULL}, *showers[2] = {NULL, NULL};
    sample_write_job job = {0};
    calo_h5_writer w;
    int writer_open = 0, rc = 1;
    const int V = model_sampler_voxels(s->smp);
    /* a second pair of buffers only when a batch can be written while
     * another is sampled (65 536 rows are 1.7 GB) */
    const int nbuf = a->n > batch ? 2 : 1;
    for (int k = 0; k < nbuf; k++) {
        e_inc[k] = malloc((size_t)batch * sizeof(float));
        showers[k] = malloc((size_t)batch * V * sizeof(float));
    }
    if (!e_inc[0] || !showers[0] || !e_inc[nbuf - 1] || !showers[nbuf - 1]) {
        gt_error_set(err, GT_ENOMEM, "out of memory");
        goto out;
    }
    if (calo_h5_create(&w, a->out_path, V, 0, (int)o->gzip, err))
        goto out;
    writer_open = 1;
    double t0 = gt_clock_s();
    t->open = t0 - s->t_open;
    int cur = 0;
    for (long long first = 0; first < a->n; first += batch, cur = (cur + 1) % nbuf) {
        long long m = a->n - first < batch ? a->n - first : batch;
        /* Energies and noise of shower i depend only on (seed, i): the file
         * is the same whatever --batch is. */
        model_sample_request rq = {e_inc[cur], m, a->seed, first, showers[cur], NULL, 0};
        if (synth_draw_energies(sc, first, m, e_inc[cur], err))
            goto out;
        double t1 = gt_clock_s();
        if (model_sampler_run(s->smp, &rq, 1, (int)a->steps, err))
            goto out;
        double t2 = gt_clock_s();
        /* the previous batch's write, then this one's, behind the next */
        if (sample_write_wait(&job, &t->write, err))
            goto out;
        t->waited += gt_clock_s() - t2;
        job = (sample_write_job){.w = &w, .e_inc = e_inc[cur], .showers = showers[cur], .m = m};
        if (pthread_create(&job.thread, NULL, sample_write_main, &job)) {
            gt_error_set(err, GT_ENOMEM, "cannot start the writing thread");
            goto out;
        }
        job.running = 1;
        t->run += t2 - t1;
        t->decode += model_sampler_decode_seconds(s->smp);
        t->device += model_sampler_device_seconds(s->smp);
        t->evals += model_sampler_evals_per_shower(s->smp) * (double)m;
        t->flops += model_sampler_flops_per_shower(s->smp) * (double)m;
        t->draws += model_sampler_draws_per_shower(s->smp) * (double)m;
    }
    double t_last = gt_clock_s();
    if (sample_write_wait(&job, &t->write, err))
        goto out;
    writer_open = 0;
    double t_fin = gt_clock_s();
    t->waited += t_fin - t_last;
    if (calo_h5_finish(&w, err))
        goto out;
    t->total = gt_clock_s() - t0;
    t->write += gt_clock_s() - t_fin;
    t->waited += gt_clock_s() - t_fin;
    t->compress = w.compress_s;
    rc = 0;
out:
    if (job.running) { /* a failure of the sampler: the write in flight ends first */
        pthread_join(job.thread, NULL);
        job.running = 0;
    }
    if (writer_open)
        calo_h5_finish(&w, NULL);
    for (int k = 0; k < 2; k++) {
        free(e_inc[k]);
        free(showers[k]);
    }
    return rc;
}

/* What was written, what a shower cost and where the time went. */
static void print_summary(const sample_args *a, const sample_src *s, const sample_times *t)
{
    double dt = t->total;
    fprintf(stderr, "wrote %lld showers of run %lld to %s in %.2f s (%.0f showers/s, %s)\n", a->n,
            a->run, a->out_path, dt, (double)a->n / dt, s->b->name);
    /* the sampling cost: network evaluations per shower times their FLOPs */
    fprintf(stderr, "cost per shower: %.2f network evaluations, %.2f MFLOP\n",
            t->evals / (double)a->n, t->flops / (double)a->n / 1e6);
    if (s->accepting)
        fprintf(stderr, "acceptance test: %.3f draws per shower kept (acceptance %.3f)\n",
                t->draws / (double)a->n, (double)a->n / t->draws);
    /* where the time went: on a GPU the host's part is what is left.  A
     * batch is written while the next is sampled: the wait for writing
     * is what of it the sampling did not hide */
    fprintf(stderr,
            "time: sampler %.2f s (of it the networks and copies back %.2f s, decoding on the "
            "host %.2f s, other host work %.2f s), writing %.2f s (of it compressing %.2f s; "
            "beside the sampler, waited for %.2f s); before them, opening the run %.2f s\n",
            t->run, t->device, t->decode, t->run - t->device - t->decode, t->write, t->compress,
            t->waited, t->open);
}

int cmd_sample(int argc, char **argv)
{
    /* With --server the showers come from a running service instead. */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--server") == 0 || strncmp(argv[i], "--server=", 9) == 0)
            return cmd_sample_remote(argc, argv);
    sample_opts o;
    int status = parse_args(argc, argv, &o);
    if (status != -1)
        return status;
    gt_error err = {0};
    sample_src s = {0};
    sample_times t = {0};
    synth_config sc;
    synth_config_default(&sc);
    sc.seed = o.a.seed;
    sc.e_min_mev = o.a.emin;
    sc.e_max_mev = o.a.emax;
    status = synth_parse_energy_mode(o.a.energy, &sc.energy_mode, &err) ||
             synth_config_check(&sc, &err) || open_run(&o, &s, &err) ||
             write_showers(&o, &s, &sc, &t, &err);
    if (status)
        fprintf(stderr, "giant sample: %s\n", err.message);
    else
        print_summary(&o.a, &s, &t);
    sample_src_close(&s);
    return status;
}
