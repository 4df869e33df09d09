// Package benchrun runs benchmark commands side by side and says whether
// they differ, for every make bench-* target and the tables of
// BENCHMARKS.md. It is tooling: the product never imports it.
//
// The method, and why each step is there:
//
//   - Variants are interleaved. Run i runs every variant once: odd runs in
//     the order given, even runs reversed (A B, B A, A B, ...). A host
//     drifts while a benchmark runs (a database grows, caches warm, a
//     neighbour starts a job); in A B A B order B always runs one slot
//     later than A and pays for that drift every time, while in A B B A
//     order each pair of runs puts both variants at the same mean
//     position, so a drift linear in time cancels (exactly over an even
//     number of runs, to within one run's worth over an odd number).
//
//   - Each command runs on a quiet host, or is marked noisy. Before every
//     command the harness waits until the host's CPU busy share over the
//     last second (from /proc/stat, all CPUs, busy = total - idle -
//     iowait) is under a bound, polling each second, for at most a given
//     time; past it the command runs anyway and its run is marked noisy
//     with the share seen. Go's benchmark builders wait on the load
//     average instead, but the 1-minute load average decays with a
//     1-minute time constant: after a run that saturated a 2-core host
//     (load 2) it takes about 80 s to fall below 0.5, a minute and more
//     lost before every run. The busy share over the last second is what
//     the load average estimates, without the lag. The 1-minute load
//     average is still recorded beside each run, for the reader.
//
//   - Every run is measured by the harness as well as by the command: wall
//     time (from sh's exec to its exit), and the CPU time (user+sys) of
//     the command and every descendant it reaped, from the rusage of its
//     sh. With a PID whose
//     children are the system under test (the bin/cellpay launcher), the
//     CPU time of each child's whole process tree between the start and
//     the end of the run is measured too, per process and, divided by a
//     count the command printed (transactions), per operation: on a
//     shared machine CPU per operation per process moves far less from
//     run to run than throughput or latency.
//
//   - A difference is claimed only outside the spread: when the ranges
//     (min..max) of two variants do not overlap, every run of one beyond
//     every run of the other. For identical distributions the chance of
//     that is 2/C(n+m, n) for n and m runs (0.8% at 5 a side, about a
//     Mann-Whitney p of 0.008); a claim is refused, whatever the ranges,
//     when that chance is over 5% (3 runs a side or fewer), since a
//     range rule on two or three samples claims nearly anything. Medians
//     and their spread are printed either way; a change of medians inside
//     the spread is reported as no difference.
//
// A command's output is read for metrics: lines holding "BENCH <name>
// <value> [<unit>]" anywhere (so go test -v output with its file:line
// prefix works), and Go benchmark result lines, each value/unit pair
// becoming the metric "<benchmark> <unit>". A metric printed several
// times in one run (go test -count 5) gives one sample per occurrence:
// the occurrences are repeated measurements just as runs are, and keeping
// each shows their spread rather than hiding it in a mean.
//
// Everything is bounded: a timeout per command (its whole process group
// is killed), at most MaxRuns runs and MaxVariants variants, MaxSamples
// metric samples per run and MaxLine bytes per line of output. A
// command's leftovers never outlive its run: after its sh exits, what is
// left of its process group is killed, so that the next run does not pay
// for them (start a long-lived platform outside benchrun and pass its PID
// for the per-process figures).
//
// The package reads the host through Host (/proc) and runs commands
// through an ExecFunc, so that everything but Shell and ProcHost is tested
// with fakes. It is Linux only.
package benchrun
