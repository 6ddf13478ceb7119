/* Identifiers: UUIDv7 (RFC 9562) as canonical lower-case text,
 * "xxxxxxxx-xxxx-7xxx-yxxx-xxxxxxxxxxxx". The first 48 bits are the Unix time
 * in milliseconds and the next 12 the fraction of the millisecond, so ids
 * sort by creation time as text and as bytes; within one process they strictly
 * increase, also within one tick of the clock or when it steps back. The other
 * 62 bits (all but the version and variant) come from getrandom(), so an id
 * cannot be guessed from another. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_ID_LEN 36  /* characters of the text form */
#define SBX_ID_SIZE 37 /* with the NUL */

/* A fresh id for the current time into out. Fails only when getrandom()
 * does (err names it). */
int sbx_id_new(char out[SBX_ID_SIZE], sbx_err *err);

/* The pure part, for tests and for callers that bring their own clock and
 * randomness: the 16 bytes of the UUIDv7 for unix_ms (low 48 bits) and the
 * first 10 bytes of rnd (version and variant bits are overwritten). */
void sbx_id_v7(uint64_t unix_ms, const uint8_t rnd[10], uint8_t out[16]);

/* Bytes to canonical lower-case text and back. sbx_id_parse accepts exactly
 * the 8-4-4-4-12 hex form (either case) of any UUID; returns 0, or -1 when s
 * is not one. */
void sbx_id_format(const uint8_t id[16], char out[SBX_ID_SIZE]);
int sbx_id_parse(const char *s, uint8_t out[16]);
bool sbx_id_valid(const char *s);

/* The millisecond timestamp of a UUIDv7. */
uint64_t sbx_id_time_ms(const uint8_t id[16]);
