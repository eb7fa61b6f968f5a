/* Preloaded ahead of libfaketime by clock_skew (chaosbench/faults/clocks.py).
 *
 * libfaketime 0.9.10 (Debian bookworm) with FAKETIME_DONT_FAKE_MONOTONIC=1 still rewrites the
 * absolute deadline of clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) as if the monotonic clock
 * were faked, so the kernel gets a negative time and Python >= 3.11's time.sleep() fails with EINVAL
 * (wolfcw/libfaketime#426). The monotonic clock is real here, so its deadline goes to the kernel
 * as it is; every other call goes on to libfaketime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem)
{
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if ((flags & TIMER_ABSTIME) && (clock_id == CLOCK_MONOTONIC || clock_id == CLOCK_BOOTTIME)) {
        /* the libc function returns the error number, not -1/errno */
        long r = syscall(SYS_clock_nanosleep, clock_id, flags, req, rem);
        return r == 0 ? 0 : errno;
    }
    if (!next)
        next = dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock_id, flags, req, rem);
}
