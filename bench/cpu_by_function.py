#!/usr/bin/env python3
"""A host-wide `perf record -a` sample, split per process into CPU per request.

    cpu_by_function.py PERF DATA HZ REQ_PER_S NAME=PID...

For each named process: its microseconds of CPU per request (samples over
HZ, over the requests the row served in the same time), by library and by
function, the largest first. Two rows' outputs compare line by line: what
one row costs per request beyond another's is where their rates part on a
host whose cores are the bound.
"""
import collections
import subprocess
import sys

TOP_LIBRARIES = 12
TOP_FUNCTIONS = 25
TOP_OWN_FUNCTIONS = 20


def samples_by_function(perf, data, pid):
    """{(library, function): samples} of one process (all its threads)."""
    report = subprocess.run(
        [
            perf,
            "report",
            "-i",
            data,
            "--stdio",
            "-q",
            "--no-children",
            "--pid",
            pid,
            "--sort",
            "dso,sym",
            "-F",
            "sample,dso,sym",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    counts = collections.Counter()
    for line in report.stdout.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        # "SAMPLES LIBRARY [k] FUNCTION..." ([k] kernel, [.] user)
        name = " ".join(fields[3:]) if fields[2] in ("[k]", "[.]") else " ".join(fields[2:])
        counts[(fields[1], name)] += int(fields[0])
    return counts


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    perf, data, hz, rate = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    us_per_sample = 1e6 / hz  # CPU time one sample stands for
    for spec in sys.argv[5:]:
        label, pid = spec.split("=", 1)
        counts = samples_by_function(perf, data, pid)
        total = sum(counts.values())
        # Samples are taken over the recording's wall time; a request's CPU is
        # the process's CPU per second over its requests per second.
        seconds = recording_seconds(perf, data)
        per_request = lambda n: n * us_per_sample / seconds / rate if seconds > 0 else 0.0
        print(
            f"{label} (pid {pid}): {per_request(total):.1f} us of CPU per request "
            f"({total} samples over {seconds:.2f} s at {rate:.0f} req/s)"
        )
        libraries = collections.Counter()
        for (library, _), n in counts.items():
            libraries[library] += n
        print("  by library:")
        for library, n in libraries.most_common(TOP_LIBRARIES):
            print(f"    {per_request(n):7.2f} us  {library}")
        print("  by function:")
        for (library, function), n in counts.most_common(TOP_FUNCTIONS):
            print(f"    {per_request(n):7.2f} us  {function}  ({library})")
        # The process's own code: its executable, not a shared library.
        own = collections.Counter({key: n for key, n in counts.items() if is_executable(key[0])})
        if own:
            print("  by function, in the executable itself:")
            for (library, function), n in own.most_common(TOP_OWN_FUNCTIONS):
                print(f"    {per_request(n):7.2f} us  {function}  ({library})")


def is_executable(library):
    return not (library.startswith("[") or ".so" in library)


def recording_seconds(perf, data):
    """The recording's wall time, from its header."""
    header = subprocess.run(
        [perf, "report", "-i", data, "--header-only"], capture_output=True, text=True, check=False
    ).stdout
    first = last = None
    for line in header.splitlines():
        # "# time of first sample : 12345.678901"
        if "time of first sample" in line:
            first = float(line.split(":")[-1])
        elif "time of last sample" in line:
            last = float(line.split(":")[-1])
    return (last - first) if first is not None and last is not None else 0.0


if __name__ == "__main__":
    main()
