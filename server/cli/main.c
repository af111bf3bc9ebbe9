/* giant: one binary, many subcommands (see commands.c). */
#include "commands.h"

int main(int argc, char **argv)
{
    return commands_dispatch(argc, argv);
}
