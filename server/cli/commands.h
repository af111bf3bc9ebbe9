/* commands: the subcommands of the giant binary.
 *
 * A subcommand is int cmd_NAME(int argc, char **argv), called with argv[0]
 * being its own name ("serve") and its flags after; it returns the process
 * exit status (0 ok, 1 failure, 2 usage error).  Adding one takes a source
 * file defining it, its declaration here, and one line in the table in
 * commands.c. */
#ifndef COMMANDS_H
#define COMMANDS_H

#include <stddef.h>

#include "gt_error.h"
#include "http.h"

typedef int (*command_fn)(int argc, char **argv);

typedef struct command {
    const char *name;
    command_fn fn;
    const char *help;          /* one line for `giant help` */
} command;

extern const command commands[];
extern const size_t commands_count;

/* Runs the subcommand named by argv[1] (main's argc/argv). */
int commands_dispatch(int argc, char **argv);

int cmd_serve(int argc, char **argv);     /* cmd_serve.c   */
int cmd_migrate(int argc, char **argv);   /* cmd_migrate.c */
int cmd_token(int argc, char **argv);     /* cmd_token.c   */
int cmd_version(int argc, char **argv);   /* commands.c    */
int cmd_help(int argc, char **argv);      /* commands.c    */
/* Offline commands, written beside this file by the engine's owners; the
 * table in commands.c lists them once they are wired into the build. */
int cmd_synth(int argc, char **argv);     /* cmd_synth.c   */
int cmd_eval(int argc, char **argv);      /* cmd_eval.c    */
int cmd_train(int argc, char **argv);     /* cmd_train.c   */
int cmd_sample(int argc, char **argv);    /* cmd_sample.c  */
int cmd_export(int argc, char **argv);    /* cmd_model.c   */
int cmd_import(int argc, char **argv);    /* cmd_model.c   */

/* Clients of a running service (cmd_client.c, on api/client). */
int cmd_submit(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_watch(int argc, char **argv);
/* `giant sample --server URL ...`: cmd_sample hands over to it. */
int cmd_sample_remote(int argc, char **argv);

/* Test-only hook: a function that adds extra routes to the router of the
 * next cmd_serve.  The shipped binary never sets it; the test build of the
 * server (tests/server) uses it to add routes that exercise shared
 * machinery (body cap, JSON parsing, shutdown with a request in flight). */
typedef int (*serve_routes_fn)(http_router *r, gt_error *err);
void cmd_serve_set_extra_routes(serve_routes_fn fn);

#endif
