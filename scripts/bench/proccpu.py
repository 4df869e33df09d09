#!/usr/bin/env python3
"""CPU time per process of a running platform, from /proc, for the benchmarks.

  proccpu.py snapshot PID            JSON of CPU seconds per process of PID's tree
  proccpu.py run OUT -- CMD...       run CMD, write its CPU seconds (rusage) to OUT
  proccpu.py report BEFORE AFTER TX [NAME=FILE...]
                                     a table of CPU µs per transaction per process

A process's CPU is its utime+stime plus the cutime+cstime of the children it
has reaped (a Postgres postmaster reaps its backends), so the sum over a
process and its live descendants, between two snapshots, counts every
backend that ran in between exactly once. Each direct child of PID is one
row, named after what it is: gtr, cell and its instance, postgres and its
data directory, issuersim, nats-server.
"""
import json
import os
import resource
import subprocess
import sys

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    # The command name is in parentheses and may hold spaces.
    rest = s[s.rindex(")") + 2:].split()
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    return ppid, (utime + stime + cutime + cstime) / TICK


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def name_of(argv):
    base = os.path.basename(argv[0]) if argv else "?"
    def arg(flag):
        for i, a in enumerate(argv[:-1]):
            if a == flag or a == "-" + flag:
                return argv[i + 1]
            if a.startswith(flag + "=") or a.startswith("-" + flag + "="):
                return a.split("=", 1)[1]
        return None
    if base == "postgres":
        d = arg("-D")
        return "postgres " + (os.path.basename(d.rstrip("/")) if d else "?")
    if base == "cell":
        return "cell " + (arg("-instance") or arg("-id") or "?")
    if base == "gtr":
        return "gtr " + (arg("-listen") or "")
    return base


def snapshot(root):
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            parent[int(d)], cpu[int(d)] = stat(d)
        except (OSError, ValueError):
            continue  # exited while we looked
    children = {}
    for pid, pp in parent.items():
        children.setdefault(pp, []).append(pid)
    def tree(pid):
        total, todo = 0.0, [pid]
        while todo:
            p = todo.pop()
            total += cpu.get(p, 0.0)
            todo.extend(children.get(p, []))
        return total
    out = {}
    for child in children.get(root, []):
        try:
            name = name_of(cmdline(child))
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + tree(child)
    return out


def run(out, cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc = subprocess.call(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(out, "w") as f:
        json.dump({"cpu_seconds": used}, f)
    return rc


def report(before, after, tx, extra):
    b, a = json.load(open(before)), json.load(open(after))
    rows = [(n, a[n] - b.get(n, 0.0)) for n in sorted(a)]
    for spec in extra:
        name, path = spec.split("=", 1)
        rows.insert(0, (name, json.load(open(path))["cpu_seconds"]))
    total = sum(s for _, s in rows)
    print(f"| process | CPU s | µs/tx | share |")
    print(f"|---|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {s / tx * 1e6:.0f} | {s / total * 100:.0f}% |")
    print(f"| all | {total:.2f} | {total / tx * 1e6:.0f} | |")


def main(argv):
    if len(argv) >= 2 and argv[0] == "snapshot":
        json.dump(snapshot(int(argv[1])), sys.stdout)
        return 0
    if len(argv) >= 4 and argv[0] == "run" and argv[2] == "--":
        return run(argv[1], argv[3:])
    if len(argv) >= 4 and argv[0] == "report":
        report(argv[1], argv[2], float(argv[3]), argv[4:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
