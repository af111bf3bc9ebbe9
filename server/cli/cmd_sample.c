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

int cmd_sample(int argc, char **argv)
{
    /* With --server the showers come from a running service instead. */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--server") == 0 || strncmp(argv[i], "--server=", 9) == 0)
            return cmd_sample_remote(argc, argv);
    const char *db_path = settings_env_or_default("db");
    const char *device = NULL;
    long long batch = 1024, gzip = 1;
    int no_accept = 0;
    sample_args a;
    sample_args_default(&a);
    static const struct option opts[] = {
        SAMPLE_ARGS_OPTIONS,
        {"batch", required_argument, 0, 'B'},  {"device", required_argument, 0, 'x'},
        {"db", required_argument, 0, 'd'},     {"help", no_argument, 0, 'h'},
        {"gzip", required_argument, 0, 'z'},   {"no-accept", no_argument, 0, 'A'},
        {0, 0, 0, 0}};
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, SAMPLE_ARGS_SHORT "h", opts, NULL)) != -1) {
        int taken = sample_args_take(&a, o, optarg);
        if (taken < 0)
            return 2;
        if (taken)
            continue;
        switch (o) {
        case 'B':
            if (sample_args_number(optarg, &batch))
                return 2;
            break;
        case 'z':
            if (sample_args_number(optarg, &gzip))
                return 2;
            break;
        case 'x': device = optarg; break;
        case 'A': no_accept = 1; break;
        case 'd': db_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    /* every refusal says what was wrong; a batch only sizes the passes
     * (showers do not depend on it), so one out of range is adjusted */
    const char *bad = NULL;
    if (optind != argc)
        bad = "unexpected argument";
    else if (a.n <= 0)
        bad = "--n must be a positive number of showers";
    else if (!a.out_path)
        bad = "-o OUT.h5 is required";
    else if (a.steps < 0 || a.steps > 10000)
        bad = "--steps must be in [1, 10000] (0: the run's sample.steps)";
    else if (batch < 1)
        bad = "--batch must be at least 1";
    else if (gzip < 0 || gzip > 9)
        bad = "--gzip must be a deflate level in [0, 9]";
    if (bad) {
        fprintf(stderr, "giant sample: %s%s%s\n", bad, optind != argc ? ": " : "",
                optind != argc ? argv[optind] : "");
        usage(stderr);
        return 2;
    }
    if (batch > SAMPLE_MAX_BATCH) {
        fprintf(stderr, "giant sample: --batch %lld is more than %d rows per pass; using %d\n",
                batch, SAMPLE_MAX_BATCH, SAMPLE_MAX_BATCH);
        batch = SAMPLE_MAX_BATCH;
    }
    if (batch > a.n)
        batch = a.n;

    gt_error err = {0};
    char field[128] = "";
    store *db = NULL;
    nn_backend *b = NULL;
    model_sampler *smp = NULL;
    char *config_text = NULL;
    void *ck1 = NULL, *ck2 = NULL;
    size_t l1 = 0, l2 = 0;
    float *e_inc[2] = {NULL, NULL}, *showers[2] = {NULL, NULL};
    sample_write_job job = {0};
    double t_write = 0, t_waited = 0;
    calo_h5_writer w;
    int writer_open = 0, status = 1;
    model_config cfg;
    synth_config sc;
    synth_config_default(&sc);
    sc.seed = a.seed;
    sc.e_min_mev = a.emin;
    sc.e_max_mev = a.emax;

    if (synth_parse_energy_mode(a.energy, &sc.energy_mode, &err) || synth_config_check(&sc, &err) ||
        store_open_migrated(&db, db_path, NULL, NULL, &err))
        goto out;
    if (!a.run) {
        int64_t id;
        if (runs_latest_succeeded(db, &id, &err))
            goto out;
        a.run = id;
    }
    if (runs_config(db, a.run, &config_text, &err) ||
        model_config_parse(config_text, strlen(config_text), &cfg, field, sizeof field, &err) ||
        runs_load_checkpoint(db, a.run, 1, 1, &ck1, &l1, NULL, &err) ||
        runs_load_checkpoint(db, a.run, 2, 1, &ck2, &l2, NULL, &err))
        goto out;
    if (device)
        snprintf(cfg.device, sizeof cfg.device, "%s", device);
    double t_open = gt_clock_s();
    if (model_open_backend(&cfg, MODEL_BF16_EMULATE, &b, &err) ||
        model_sampler_open(b, &cfg, ck1, l1, ck2, l2, (int)batch, &smp, &err))
        goto out;
    /* the run's acceptance test for its best pair, when it has one */
    int accepting = 0;
    if (cfg.accept.enabled && !no_accept) {
        void *acc = NULL;
        size_t acc_len = 0;
        gt_error none;
        int arc = runs_load_acceptance(db, a.run, &acc, &acc_len, &none);
        if (arc == GT_OK)
            arc = model_sampler_set_accept(smp, acc, acc_len, &err);
        else if (arc == GT_ENOTFOUND)
            fprintf(stderr, "giant sample: run %lld has no acceptance test for its best "
                            "checkpoints: sampling without one\n", a.run);
        else
            err = none;
        free(acc);
        if (arc && arc != GT_ENOTFOUND)
            goto out;
        accepting = arc == GT_OK;
    }
    const int V = model_sampler_voxels(smp);
    /* a second pair of buffers only when a batch can be written while
     * another is sampled (65 536 rows are 1.7 GB) */
    const int nbuf = a.n > batch ? 2 : 1;
    for (int k = 0; k < nbuf; k++) {
        e_inc[k] = malloc((size_t)batch * sizeof(float));
        showers[k] = malloc((size_t)batch * V * sizeof(float));
    }
    if (!e_inc[0] || !showers[0] || !e_inc[nbuf - 1] || !showers[nbuf - 1]) {
        gt_error_set(&err, GT_ENOMEM, "out of memory");
        goto out;
    }
    if (calo_h5_create(&w, a.out_path, V, 0, (int)gzip, &err))
        goto out;
    writer_open = 1;
    double t0 = gt_clock_s(), evals = 0, flops = 0, draws = 0, t_run = 0, t_decode = 0;
    double t_device = 0;
    t_open = t0 - t_open;
    int cur = 0;
    for (long long first = 0; first < a.n; first += batch, cur = (cur + 1) % nbuf) {
        long long m = a.n - first < batch ? a.n - first : batch;
        /* Energies and noise of shower i depend only on (seed, i): the file
         * is the same whatever --batch is. */
        model_sample_request rq = {e_inc[cur], m, a.seed, first, showers[cur], NULL, 0};
        if (synth_draw_energies(&sc, first, m, e_inc[cur], &err))
            goto out;
        double t1 = gt_clock_s();
        if (model_sampler_run(smp, &rq, 1, (int)a.steps, &err))
            goto out;
        double t2 = gt_clock_s();
        /* the previous batch's write, then this one's, behind the next */
        if (sample_write_wait(&job, &t_write, &err))
            goto out;
        t_waited += gt_clock_s() - t2;
        job = (sample_write_job){.w = &w, .e_inc = e_inc[cur], .showers = showers[cur], .m = m};
        if (pthread_create(&job.thread, NULL, sample_write_main, &job)) {
            gt_error_set(&err, GT_ENOMEM, "cannot start the writing thread");
            goto out;
        }
        job.running = 1;
        t_run += t2 - t1;
        t_decode += model_sampler_decode_seconds(smp);
        t_device += model_sampler_device_seconds(smp);
        evals += model_sampler_evals_per_shower(smp) * (double)m;
        flops += model_sampler_flops_per_shower(smp) * (double)m;
        draws += model_sampler_draws_per_shower(smp) * (double)m;
    }
    double t_last = gt_clock_s();
    if (sample_write_wait(&job, &t_write, &err))
        goto out;
    writer_open = 0;
    double t_fin = gt_clock_s();
    t_waited += t_fin - t_last;
    if (calo_h5_finish(&w, &err))
        goto out;
    double dt = gt_clock_s() - t0;
    t_write += gt_clock_s() - t_fin;
    t_waited += gt_clock_s() - t_fin;
    fprintf(stderr, "wrote %lld showers of run %lld to %s in %.2f s (%.0f showers/s, %s)\n", a.n,
            a.run, a.out_path, dt, (double)a.n / dt, b->name);
    /* the sampling cost: network evaluations per shower times their FLOPs */
    fprintf(stderr, "cost per shower: %.2f network evaluations, %.2f MFLOP\n", evals / (double)a.n,
            flops / (double)a.n / 1e6);
    if (accepting)
        fprintf(stderr, "acceptance test: %.3f draws per shower kept (acceptance %.3f)\n",
                draws / (double)a.n, (double)a.n / draws);
    /* where the time went: on a GPU the host's part is what is left.  A
     * batch is written while the next is sampled: the wait for writing
     * is what of it the sampling did not hide */
    fprintf(stderr,
            "time: sampler %.2f s (of it the networks and copies back %.2f s, decoding on the "
            "host %.2f s, other host work %.2f s), writing %.2f s (of it compressing %.2f s; "
            "beside the sampler, waited for %.2f s); before them, opening the run %.2f s\n",
            t_run, t_device, t_decode, t_run - t_device - t_decode, t_write,
            w.compress_s, t_waited, t_open);
    status = 0;
out:
    if (job.running) { /* a failure of the sampler: the write in flight ends first */
        pthread_join(job.thread, NULL);
        job.running = 0;
    }
    if (writer_open)
        calo_h5_finish(&w, NULL);
    if (status)
        fprintf(stderr, "giant sample: %s\n", err.message);
    for (int k = 0; k < 2; k++) {
        free(e_inc[k]);
        free(showers[k]);
    }
    free(ck1);
    free(ck2);
    free(config_text);
    model_sampler_close(smp);
    nn_backend_close(b);
    store_close(db, NULL);
    return status;
}
