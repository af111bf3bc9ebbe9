/* subproc: runs a program with an argv (never through a shell, so no value
 * is ever parsed as shell syntax), its stdout and stderr collected, with a
 * time limit.  For the Slurm commands (sbatch, squeue, scancel): safe to
 * call from any thread (fork and execv; the pipes are close-on-exec so no
 * other child inherits them).
 * Depends on libc only. */
#ifndef SUBPROC_H
#define SUBPROC_H

#include <stddef.h>

typedef struct subproc_result {
    int exit_code;             /* the program's exit status; -1 when it was
                                  killed (signal, or past the time limit) or
                                  could not start                             */
    int timed_out;             /* 1: killed at the time limit                */
    char *out;                 /* stdout, NUL-terminated, at most 4 MiB kept */
    char *err;                 /* stderr, the same                           */
} subproc_result;

/* Runs argv[0] (a path, or a name looked up in PATH) with argv, stdin from
 * /dev/null, for at most timeout_ms (then SIGKILL).  Returns 0 when the
 * program ran (whatever its exit status; see r->exit_code), -1 when it
 * could not be started (r->err says why).  Free r with subproc_result_free. */
int subproc_run(char *const argv[], long timeout_ms, subproc_result *r);
void subproc_result_free(subproc_result *r);

/* A program as subproc_run finds it: name itself when it has a '/', else
 * the first executable of that name in PATH (/usr/bin:/bin without one),
 * into out.  0, or -1 when there is none. */
int subproc_which(const char *name, char *out, size_t cap);

#endif
