/* The subcommands of sandboxd. */
#pragma once

int sbx_cmd_run(int argc, char **argv);
int sbx_cmd_doctor(int argc, char **argv);
int sbx_cmd_serve(int argc, char **argv);
