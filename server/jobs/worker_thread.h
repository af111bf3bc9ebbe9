/* worker_thread: the thread, lock and wake-up that each background worker
 * of the service has (the scheduler, the sampling worker, the dataset
 * maker), started, woken and stopped one way.
 *
 * The owner embeds a worker_thread in its own struct and keeps its own
 * state under `mu`.  A worker that polls (the scheduler, the dataset maker)
 * naps between polls and is woken early by a kick; one that waits for a
 * condition of its own (the sampling worker's queue) waits on `cv` itself.
 * Stopping is a flag the worker reads (atomically, with or without mu),
 * set under mu with every waiter woken, so no wake-up is lost.
 * worker_thread_launch and worker_thread_end are the start and the end the
 * workers share: a thread, and the database connection of its own that
 * most of them hold.  Depends on pthreads and store. */
#ifndef WORKER_THREAD_H
#define WORKER_THREAD_H

#include <pthread.h>
#include <stdatomic.h>

#include "gt_error.h"
#include "store.h"

typedef struct worker_thread {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int kicked;                /* under mu: there may be work, do not nap */
    atomic_int stopping;       /* set once, by worker_thread_stop */
} worker_thread;

/* Initialises w (zeroed by the caller) and runs fn(arg) on a new thread.
 * Returns 0, or pthread_create's error with w's lock and condition
 * released again (the caller words the error: it knows which worker). */
int worker_thread_start(worker_thread *w, void *(*fn)(void *), void *arg);

/* Wakes a napping worker (any thread). */
void worker_thread_kick(worker_thread *w);

/* On the worker: sleeps until kicked, stopping, or `seconds` have passed,
 * and clears the kick.  The timeout is a safety net for a missed kick. */
void worker_thread_nap(worker_thread *w, int seconds);
/* The same in milliseconds (the Slurm poller's interval). */
void worker_thread_nap_ms(worker_thread *w, long ms);

/* On a worker whose work is the rows of its table (datasets_next_pending,
 * evaluations_next_queued): the next row next reads, a new reference in
 * *row, napping a second at a time while there is none or it cannot be
 * read.  Returns 1 with a row, or 0 with none once stopping is set. */
int worker_thread_next_row(worker_thread *w, store *db,
                           int (*next)(store *db, json_t **row, gt_error *err), json_t **row);

/* Sets stopping, wakes the worker, waits for its thread to end and
 * releases the lock and condition.  The owner then frees its own state. */
void worker_thread_stop(worker_thread *w);

/* Starts fn(owner) on w, owner being the worker's state (calloc'ed, holding
 * w) and db its own connection (NULL for none); the thread is named `what`
 * (its first 15 bytes: "scheduler", "sampling", ...).  When the thread cannot
 * start, closes db, frees owner and returns GT_EIO "cannot start the <what>
 * thread: <reason>"; else GT_OK, and both are the thread's until
 * worker_thread_end. */
int worker_thread_launch(worker_thread *w, void *(*fn)(void *), void *owner, store *db,
                         const char *what, gt_error *err);

/* A launched worker's end: stops w, then closes db and frees owner. */
void worker_thread_end(worker_thread *w, store *db, void *owner);

#endif
