/* Clocks and deadlines. */
#ifndef SBX_TIMEUTIL_H
#define SBX_TIMEUTIL_H

#include <stdint.h>
#include <time.h>

/* Monotonic milliseconds, for deadlines and durations. */
int64_t time_mono_ms(void);
/* Wall clock in milliseconds since the Unix epoch. */
int64_t time_wall_ms(void);

/* The monotonic deadline (time_mono_ms) timeout_ms from now. */
int64_t time_deadline_ms(int64_t timeout_ms);
/* Milliseconds left until deadline_ms (a time_mono_ms value): 0 once it
 * passed, at most INT32_MAX, so the result fits poll()'s timeout. */
int time_left_ms(int64_t deadline_ms);

/* CLOCK_MONOTONIC ms from now as a timespec, for pthread_cond_timedwait on
 * a condition made with pthread_condattr_setclock(CLOCK_MONOTONIC). */
struct timespec time_mono_timespec_after(int64_t ms);

#endif
