#!/usr/bin/env python3
"""Who calls futex in a loaded server, from `perf script` of
`syscalls:sys_enter_futex` recorded with call chains (see
small_request_profile.sh). A futex call is a lock or condition variable that
had to sleep or wake a sleeper: the calls per request say how much a path
queues on locks, and their callers say whose locks.

Prints the share of the calls by thread name, by the first frame outside
libc and the loader (the lock: libcuda's, absl's Mutex, ...), by the first
named frame past the lock's own code too (its user: gRPC, the scheduler,
...), and by the first few frames outside libc.

  perf script -F comm,ip,sym,dso -i FUTEX.data | futex_callers.py [FRAMES]
"""
import collections
import re
import sys

# Frames that only say "a lock": the caller is the first frame past them.
LOCK_PLUMBING = ("libc.so", "libpthread", "[vdso]", "[kernel.kallsyms]", "ld-linux")
LOCK_CODE = LOCK_PLUMBING + ("libabsl_synchronization",)
FRAME = re.compile(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def main():
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    by_thread, by_caller, by_user, by_chain = (collections.Counter() for _ in range(4))
    calls = 0

    def count(thread, frames):
        nonlocal calls
        if thread is None:
            return
        calls += 1
        by_thread[thread] += 1
        outside = [f for f in frames if not any(p in f[1] for p in LOCK_PLUMBING)]
        sym, dso = outside[0] if outside else ("?", "?")
        by_caller[f"{dso.split('/')[-1]}: {sym}"] += 1
        named = [f for f in frames if f[0] != "[unknown]" and not any(p in f[1] for p in LOCK_CODE)]
        sym, dso = named[0] if named else ("?", "?")
        by_user[f"{dso.split('/')[-1]}: {sym}"] += 1
        by_chain[" <- ".join(s[:60] for s, _ in outside[:depth])] += 1

    thread, frames = None, []
    for line in sys.stdin:
        if not line.strip():
            count(thread, frames)
            thread, frames = None, []
        elif not line[0].isspace():  # a sample's header: the thread's name first
            count(thread, frames)
            thread, frames = line.split()[0], []
        elif m := FRAME.match(line):
            frames.append((re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)), m.group(2)))
    count(thread, frames)

    print(f"futex calls recorded: {calls}")
    for title, counter, top in (
        ("by thread", by_thread, 12),
        ("by first caller outside libc", by_caller, 25),
        ("by first named frame past the lock", by_user, 25),
        (f"by the first {depth} frames outside libc", by_chain, 30),
    ):
        print(f"== {title}")
        for key, n in counter.most_common(top):
            print(f"{100.0 * n / max(calls, 1):5.1f}% {key}")


if __name__ == "__main__":
    main()
