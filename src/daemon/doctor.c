#include <stdio.h>

#include "daemon/cmd.h"

int sbx_cmd_doctor(int argc, char **argv)
{
    fprintf(stderr, "sandboxd doctor: not yet\n");
    return 1;
}
