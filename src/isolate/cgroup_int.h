/* Private to the cgroup files (cgroup.c, cgroup_host.c, cgroup_v1.c,
 * cgroup_v2.c): their shared constants and the small text and file helpers.
 * Every helper that can fail follows base/err.h: -1 with errno in err. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "isolate/cgroup.h"

/* The parent cgroup's name beneath the daemon's own (sbx_cg_set_base_name). */
extern char cg_base_name[];
#define CG_V2_ENABLE "+memory +pids +cpu"
#define CG_CPU_PERIOD_US 100000
#define CG_CPU_MIN_QUOTA_US 1000 /* the kernel refuses less than 1 ms */
#define CG_CPU_MAX_CORES 65536.0
#define CG_READ_MAX (16u << 20)
#define CG_FREEZE_WAIT_MS 100
#define CG_RMDIR_WAIT_MS 1000
#define CG_RMDIR_POLL_MS 10
#define CG_KILL_ROUNDS 10
#define CG_KILL_WAIT_MS 50
#define CG_POLL_MS 2
#define MI_FIELDS_MAX 64

extern const char *const cg_ctrl_names[SBX_CGC_COUNT];

/* For the bounded synchronous forms only (never on a loop: see cgroup.h). */
void cg_sleep_ms(long ms);

/* ---- text ---- */
/* Split off the next line of a NUL-terminated buffer in place; NULL at the end. */
char *cg_next_line(char **cursor);
/* Is `word` one of the items of `list` (separated by any of `seps`)? */
bool cg_list_has(const char *list, const char *word, const char *seps);
/* A decimal number, surrounded by nothing but blanks. */
int cg_parse_u64(const char *s, uint64_t *out);
/* The value of "key N" in a flat-keyed file (cpu.stat, memory.events, ...). */
int cg_keyed_u64(const char *text, const char *key, uint64_t *out);
/* "<dir>/<name>" into out; -1 when it does not fit. */
int cg_join(char *out, size_t len, const char *dir, const char *name);

/* ---- files ---- */
/* A callee's error handed on to the caller's err (which may be NULL). */
int cg_pass_err(sbx_err *err, const sbx_err *e);
/* A whole (small, pseudo-)file as a NUL-terminated buffer the caller frees. */
int cg_read_text(const char *path, char **out, sbx_err *err);
int cg_read(const char *dir, const char *file, char **out, sbx_err *err);
/* The pids of dir/cgroup.procs, at most max (-1 with E2BIG beyond). */
int cg_read_procs(const char *dir, pid_t *pids, size_t max, size_t *n, sbx_err *err);
int cg_read_u64(const char *dir, const char *file, uint64_t *out);
enum cg_file { CG_REQUIRED, CG_OPTIONAL };
/* value to dir/file in one write(2), as cgroupfs wants (see cgroup.c). */
int cg_write(const char *dir, const char *file, const char *value, enum cg_file kind, sbx_err *err);
int cg_write_u64(const char *dir, const char *file, uint64_t v, sbx_err *err);
bool cg_exists(const char *dir, const char *file);

/* ---- one sandbox's cgroup ---- */
int cg_check_name(const char *name, sbx_err *err);
/* cpu,cpuacct mounted together give two controllers one directory: did an
 * earlier controller already use this path? */
bool cg_v1_earlier(const struct sbx_cgroup *cg, int c, const char *path);
uint64_t cg_cpu_quota_us(double cores);

int cg_create_v1(const struct sbx_cg_host *host, const char *name, const struct sbx_cg_limits *lim,
                 struct sbx_cgroup *cg, sbx_err *err);
int cg_create_v2(const struct sbx_cg_host *host, const char *name, const struct sbx_cg_limits *lim,
                 struct sbx_cgroup *cg, sbx_err *err);
/* sbx_cgroup_create_sub's, arguments checked. */
int cg_create_sub_v1(const struct sbx_cgroup *parent, const char *name, double cpu_cores,
                     struct sbx_cgroup *join, struct sbx_cgroup *own, sbx_err *err);
int cg_create_sub_v2(const struct sbx_cgroup *parent, const char *name, double cpu_cores,
                     struct sbx_cgroup *join, struct sbx_cgroup *own, sbx_err *err);
/* Rewrite the limits of a live cgroup made with was (only those that differ). */
int cg_relimit_v1(struct sbx_cgroup *cg, const struct sbx_cg_limits *was,
                  const struct sbx_cg_limits *lim, sbx_err *err);
int cg_relimit_v2(struct sbx_cgroup *cg, const struct sbx_cg_limits *was,
                  const struct sbx_cg_limits *lim, sbx_err *err);
/* Write the freezer's state once; freezing: EBUSY while not yet settled. */
int cg_freeze_v1(const char *dir, bool frozen, sbx_err *err);
int cg_freeze_v2(const char *dir, bool frozen, sbx_err *err);
void cg_stats_v1(const struct sbx_cgroup *cg, struct sbx_cg_stats *st);
void cg_stats_v2(const char *dir, struct sbx_cg_stats *st);
