"""Process exit codes: a contract documented in the README. Add, never renumber."""

OK = 0
#: ckptctl itself failed (bug, unreachable storage, unreadable input).
TOOL_FAILED = 1
#: bad command line.
USAGE = 2
#: the check ran and found a problem: an incomplete/corrupt checkpoint, no complete
#: checkpoint, a loss spike, a refused rollback.
PROBLEM = 3
#: a recovery (or rollback) lock is held by someone else.
LOCKED = 4
#: `ckptctl watch`: not enough loss points after the resume to decide (insufficient-data).
UNDECIDED = 5

# `ckptctl classify`: one code per verdict.
CLASSIFY_INFRA = 10
CLASSIFY_JOB = 11
CLASSIFY_PREEMPTION = 12
CLASSIFY_UNKNOWN = 13
