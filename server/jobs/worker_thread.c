#define _GNU_SOURCE   /* pthread_setname_np */
#include "worker_thread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int worker_thread_start(worker_thread *w, void *(*fn)(void *), void *arg)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->thread, NULL, fn, arg);
    if (rc != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    return rc;
}

void worker_thread_kick(worker_thread *w)
{
    pthread_mutex_lock(&w->mu);
    w->kicked = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void worker_thread_nap(worker_thread *w, int seconds)
{
    worker_thread_nap_ms(w, 1000L * seconds);
}

void worker_thread_nap_ms(worker_thread *w, long ms)
{
    pthread_mutex_lock(&w->mu);
    if (!w->kicked && !atomic_load(&w->stopping)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
    }
    w->kicked = 0;
    pthread_mutex_unlock(&w->mu);
}

int worker_thread_next_row(worker_thread *w, store *db,
                           int (*next)(store *db, json_t **row, gt_error *err), json_t **row)
{
    *row = NULL;
    while (!atomic_load(&w->stopping)) {
        if (next(db, row, NULL) == GT_OK)
            return 1;
        worker_thread_nap(w, 1);
    }
    return 0;
}

void worker_thread_stop(worker_thread *w)
{
    /* under mu: a worker between its check of stopping and its wait
     * cannot miss the broadcast */
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stopping, 1);
    w->kicked = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

int worker_thread_launch(worker_thread *w, void *(*fn)(void *), void *owner, store *db,
                         const char *what, gt_error *err)
{
    int rc = worker_thread_start(w, fn, owner);
    if (rc == 0) {
        /* named for top -H, a debugger and the tests that tell the pool's
         * work from a worker's; the kernel keeps 15 bytes */
        char name[16];
        snprintf(name, sizeof name, "%s", what);
        pthread_setname_np(w->thread, name);
        return GT_OK;
    }
    store_close(db, NULL);
    free(owner);
    return gt_error_set(err, GT_EIO, "cannot start the %s thread: %s", what, strerror(rc));
}

void worker_thread_end(worker_thread *w, store *db, void *owner)
{
    worker_thread_stop(w);
    store_close(db, NULL);
    free(owner);
}
