/* A stand-alone driver for the synth and eval commands, so they can be
 * tested before (and independently of) the giant binary that wires them:
 *     data_cmd synth --geometry ... ;  data_cmd eval A.h5 B.h5 ... */
#include <stdio.h>
#include <string.h>

int cmd_synth(int argc, char **argv);
int cmd_eval(int argc, char **argv);

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "synth"))
        return cmd_synth(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "eval"))
        return cmd_eval(argc - 1, argv + 1);
    fprintf(stderr, "usage: data_cmd synth|eval [options]\n");
    return 2;
}
