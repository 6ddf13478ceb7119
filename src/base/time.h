/* Clocks in milliseconds: the wall clock for what is recorded (task times,
 * event times), the monotonic one for what is measured (timeouts, waits). */
#pragma once

#include <stdint.h>
#include <time.h>

static inline int64_t sbx_ms_of(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
/* Milliseconds since the epoch. */
static inline int64_t sbx_now_ms(void)
{
    return sbx_ms_of(CLOCK_REALTIME);
}
/* Milliseconds of CLOCK_MONOTONIC: only differences mean anything. */
static inline int64_t sbx_mono_ms(void)
{
    return sbx_ms_of(CLOCK_MONOTONIC);
}
/* Seconds of CLOCK_MONOTONIC, to the nanosecond: for durations that must not
 * round to zero (a fast local flow takes well under a millisecond). */
static inline double sbx_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
