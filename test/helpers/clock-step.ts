/**
 * Step a real server's wall clock, and only its own: a small LD_PRELOAD library that adds the
 * offset (milliseconds, read from a file on every call) to CLOCK_REALTIME and gettimeofday.
 * libfaketime cannot do this for redis-server 7.0 here (jemalloc reads the clock while
 * libfaketime initialises: "Unexpected recursive calls to clock_gettime()"); this library calls
 * the kernel directly, so it has nothing to initialise. Built with the system C compiler on
 * first use.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const SOURCE = String.raw`
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms(void) {
  const char *file = getenv("CLOCK_STEP_FILE");
  if (!file) return 0;
  int fd = open(file, O_RDONLY);
  if (fd < 0) return 0;
  char buf[32] = {0};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 ? atoll(buf) : 0;
}

static void shift(struct timespec *ts) {
  long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ms() * 1000000LL;
  ts->tv_sec = ns / 1000000000LL;
  ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
  int r = (int)syscall(SYS_clock_gettime, clk, ts);
  if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift(ts);
  return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  int r = (int)syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
  if (r != 0 || !tv) return r;
  shift(&ts);
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  (void)tz;
  return 0;
}

time_t time(time_t *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
`;

export interface ClockStep {
  /** Environment for the child whose clock this steps. */
  readonly env: Record<string, string>;
  /** Set the child's wall clock to the real one plus `ms` (negative: behind). Takes effect on its next clock read. */
  set(ms: number): void;
}

/** A clock step for one child process; fails (never skips) without a C compiler, saying how to get one. */
export function clockStep(): ClockStep {
  const dir = path.join(tmpdir(), 'idlease-clock-step');
  mkdirSync(dir, { recursive: true });
  const lib = path.join(dir, `clock-step-${createHash('sha1').update(SOURCE).digest('hex').slice(0, 12)}.so`);
  if (!existsSync(lib)) {
    const src = `${lib}.c`;
    writeFileSync(src, SOURCE);
    try {
      execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', `${lib}.tmp`, src], { stdio: 'pipe' });
      execFileSync('mv', [`${lib}.tmp`, lib]);
    } catch (err) {
      throw new Error(
        `Building the clock-step library failed (${String((err as Error).message).split('\n')[0]}): the clock-step tests need a C compiler. ` +
          'Install one: `apt-get install gcc libc6-dev` (or bash scripts/ensure-databases.sh).',
        { cause: err },
      );
    }
  }
  const file = path.join(dir, `offset-${process.pid}-${Math.random().toString(36).slice(2)}`);
  writeFileSync(file, '0');
  return {
    env: { LD_PRELOAD: lib, CLOCK_STEP_FILE: file },
    set: (ms) => writeFileSync(file, String(Math.trunc(ms))),
  };
}
