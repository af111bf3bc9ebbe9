#include "commands.h"

#include <stdio.h>
#include <string.h>

#include "build_info.h"

const command commands[] = {
    { "serve",   cmd_serve,   "run the HTTP service" },
    { "migrate", cmd_migrate, "create or upgrade the database schema, then exit" },
    { "token",   cmd_token,   "create, list or revoke the service's bearer tokens (offline, on the database)" },
    { "synth",   cmd_synth,   "simulate showers (GFlash) into a CaloChallenge HDF5 file" },
    { "eval",    cmd_eval,    "compare two shower files with the CaloChallenge metrics" },
    { "train",   cmd_train,   "train a run config offline into the local database" },
    { "sample",  cmd_sample,  "write showers of a trained run to a CaloChallenge HDF5 file (--server: ask a service)" },
    { "export",  cmd_export,  "write a run's best checkpoints, config and geometry into one model file" },
    { "import",  cmd_import,  "check a model file and register it as a model of the database" },
    { "submit",  cmd_submit,  "queue a training run on a running service" },
    { "runs",    cmd_runs,    "list the runs of a running service" },
    { "watch",   cmd_watch,   "follow a run's progress live on a running service" },
    { "version", cmd_version, "print version, git commit and build options" },
    { "help",    cmd_help,    "list the commands" },
};
const size_t commands_count = sizeof commands / sizeof commands[0];

int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("usage: giant COMMAND [options]   (giant COMMAND --help for its options)\n\n"
           "commands:\n");
    for (size_t i = 0; i < commands_count; i++)
        printf("  %-10s %s\n", commands[i].name, commands[i].help);
    return 0;
}

int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const build_info *b = build_info_get();
    printf("giant %s (commit %s, %s, cuda %s, sanitizers %s, %s)\n", b->version, b->git_commit,
           b->build_type, b->cuda ? "on" : "off", b->sanitizers ? "on" : "off", b->compiler);
    return 0;
}

int commands_dispatch(int argc, char **argv)
{
    if (argc < 2) {
        cmd_help(0, NULL);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        return cmd_help(argc - 1, argv + 1);
    if (strcmp(name, "--version") == 0)
        return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < commands_count; i++)
        if (strcmp(commands[i].name, name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "giant: unknown command '%s' (try: giant help)\n", name);
    return 2;
}
