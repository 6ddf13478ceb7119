/* SKILL.md: YAML front matter in OpenClaw's format (name and description
 * required; homepage, user-invocable, metadata.openclaw with requires.{bins,
 * anyBins, env, config}, primaryEnv, os, install) plus our own optional
 * `sandbox:` key (network: hosts a community skill may reach; limits:
 * memory, pids, cpu, timeout), then a markdown body that is kept. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

/* Parse text[0..len) (need not be NUL-terminated). On success a new JSON
 * object: {name, description, homepage?, userInvocable?, metadata?
 * (the YAML metadata as JSON), openclaw? (metadata.openclaw, or its older
 * names clawdbot/clawdis), sandbox?: {network: [hosts], limits: {memoryBytes,
 * pids, cpu, timeoutSeconds}}, body}. On failure NULL with EINVAL and a
 * reason naming the line ("SKILL.md line 3: name is required"). Never
 * crashes on any input (a libFuzzer target drives it). */
json_t *sbx_skillmd_parse(const char *text, size_t len, sbx_err *err);
