/* Skills: the tiered catalog (builtin, shared, mapped roots; versioned
 * layouts; the active version per clone from its control-dir overlay),
 * activation, and running a skill as a task of its own through the runtime,
 * in a sandbox whose profile its tier decides. Scans run in a helper
 * process (catalog.h); everything here runs on the daemon's loop and never
 * waits. Also the claw-skill broker: one unix socket per clone, placed in
 * every sandbox of that clone, over which the in-sandbox claw-skill program
 * asks for a skill to be run (broker.c). */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "runtime/runtime.h"

struct sbx_skills_settings {
    /* The tiers' roots: builtin (trust builtin), the common store (also
     * builtin trust), shared (trusted), mapped (community). NULL or "": none. */
    const char *builtin_root, *common_root, *shared_root, *mapped_root;
    const char *control_dir; /* overlays: <control>/<clone>/skills-state/<source>/<name>/current */
    const char *state_dir;   /* <state>/skills: the claw-skill program and the clones' sockets */
    uint64_t max_bytes;      /* a skill version's total size bound */
    const char *ur_base_url; /* UR_BASE_URL of skill tasks; NULL: none */
    const void *token_secret;
    size_t token_secret_len;
    const char *token_audience;
    double token_ttl_s;
};

struct sbx_skills;
/* Starts the first catalog scan at once; rt may be NULL (unit tests). The
 * settings' strings are copied. */
struct sbx_skills *sbx_skills_new(struct event_base *base, struct sbx_runtime *rt,
                                  const struct sbx_skills_settings *s, sbx_err *err);
void sbx_skills_free(struct sbx_skills *sk);

/* Called once when the scan asked for ended (err NULL) or could not run. */
typedef void (*sbx_skills_done_fn)(void *ud, const sbx_err *err);
/* Rescan the roots (a scan started after this call: what is on disk now).
 * Returns 0; fn is called from the loop later. */
int sbx_skills_reload(struct sbx_skills *sk, sbx_skills_done_fn fn, void *ud, sbx_err *err);
/* Whether a first scan has ended; if not, sbx_skills_when_loaded queues fn
 * (returns 0) or returns 1 when loaded (fn not called). */
int sbx_skills_when_loaded(struct sbx_skills *sk, sbx_skills_done_fn fn, void *ud);
/* Forget the waiters with ud (their request went away). */
void sbx_skills_unwait(struct sbx_skills *sk, void *ud);

/* The clone's catalog as SkillInfo objects (the original's keys only, name
 * and enabled always, the others omitted when empty), sorted by name. */
json_t *sbx_skills_list(struct sbx_skills *sk, const struct sbx_clone *c);
/* Add what SKILL.md says (description, homepage, userInvocable,
 * primaryEnv, requirements {bins, anyBins, env, config, os}, install,
 * sandbox {network, limits}, caution, shadows: [{source, rootDir}] of the
 * skills of that name it hides), for a caller that asked for more than the
 * original's keys. */
void sbx_skills_extend(struct sbx_skills *sk, const struct sbx_clone *c, json_t *info);
/* One SkillInfo; NULL with ENOENT "skill not found: <n>", or EINVAL for a
 * name that cannot be a skill's. */
json_t *sbx_skills_get(struct sbx_skills *sk, const struct sbx_clone *c, const char *name,
                       size_t len, sbx_err *err);

/* Activate a version of a shared or mapped skill for one clone: checked,
 * rescanned, the overlay written atomically, rolled back when the skill is
 * then not runnable. Activations are serialised. fn gets the SkillInfo
 * (borrowed) or err: EINVAL (400) with the original's messages, ENOTSUP (409)
 * for a builtin skill (ENOTSUP). Returns -1 only for a bad name or version (err). */
typedef void (*sbx_skills_activated_fn)(void *ud, json_t *skill, const sbx_err *err);
int sbx_skills_activate(struct sbx_skills *sk, const struct sbx_clone *c, const char *name,
                        size_t name_len, const char *version, size_t version_len,
                        sbx_skills_activated_fn fn, void *ud, sbx_err *err);

/* What a skill task needs to stay alive while its request is submitted. */
struct sbx_skill_task {
    char **argv;
    char **env; /* request env first, then ours */
    char **allow;
    struct sbx_mount mount;
    char *strs[6];
};
/* Fill req (argv, env, binds, profile, skill names) to run action of skill
 * name with args; req's clone, session, stdin and env (merged) are the
 * caller's. EINVAL with the original's messages: "unsupported skill: X",
 * "skill blocked: <reason>", "unsupported skill action: X/A". */
int sbx_skills_task(struct sbx_skills *sk, const char *name, const char *action,
                    const char *const *args, struct sbx_task_request *req,
                    struct sbx_skill_task *hold, sbx_err *err);
void sbx_skill_task_free(struct sbx_skill_task *hold);

/* EINVAL "direct external skill path execution is blocked; use claw-skill"
 * when a command (any argument, or all of it joined) or code names a shared,
 * mapped or store root. */
int sbx_skills_check_command(const struct sbx_skills *sk, const char *const *argv, const char *code,
                             sbx_err *err);

/* The binds of every sandbox of clone c (claw-skill and the clone's socket),
 * for sbx_runtime_set_clone_mounts. */
size_t sbx_skills_clone_mounts(void *sk, const struct sbx_clone *c, struct sbx_mount *m,
                               size_t max);
