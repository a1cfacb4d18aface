"""sro's seeded fault campaign (issue 25): `python -m benchmarks chaos [--seed N] [--minutes M]
[--faults k1,k2]` injects a schedule of faults into the real local cluster while an observer checks
the invariants throughout, then prints the table, the fault log and, on failure, how to replay it.
Not part of `make bench`: it disrupts the whole cluster (`make chaos`)."""
