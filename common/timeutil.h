/* Clocks and RFC 3339 time formatting. */
#ifndef SBX_TIMEUTIL_H
#define SBX_TIMEUTIL_H

#include <stdint.h>

/* Monotonic milliseconds, for deadlines and durations. */
int64_t time_mono_ms(void);
/* Wall clock in milliseconds since the Unix epoch. */
int64_t time_wall_ms(void);

#endif
