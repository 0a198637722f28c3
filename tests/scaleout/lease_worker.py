"""One racing worker for ``test_lease``: ``python -m tests.scaleout.lease_worker URL STUDY
SECONDS SEED``. Until SECONDS pass (and at least ``GRANTS`` times, and until the dead
worker's slice has been stolen) it grabs any free slice of ``SLICES``, uses it for a while
(renewing), then releases it; the worker with SEED 0 dies holding its second grant (exits
without releasing), so its lease must expire before anyone gets that slice.

Every use is a row of ``lease_usage``: the slice, the holder, and the database-clock interval
in which this worker believed it held the slice: from the database clock just after the grant
to the last moment it still knew the lease to be valid (just before release, or the last
renewal's expiry when it dies). Not ``expires_at - ttl``: PostgreSQL evaluates the upsert's
clock once, at the start of the statement, and the statement may then wait on a concurrent
release, so the expiry can count from a moment before the grant (a lease a few ms short).
"""

from __future__ import annotations

import os
import random
import sys
import time

import sqlalchemy as sa

from tuner.lease import SliceLeases

SLICES = ["s0", "s1"]
TTL_S = 0.4
GRANTS = 4
STEAL_WAIT_S = 30.0
_START = time.monotonic()


USAGE_DDL = ("CREATE TABLE lease_usage (slice VARCHAR(16), holder VARCHAR(256), "
             "t0 DOUBLE PRECISION, t1 DOUBLE PRECISION, stolen INT)")


def _stolen(leases: SliceLeases, seed: int) -> bool:
    """Whether the dead worker's slice has been stolen yet: the survivors race on until it
    has (the dying worker may reach its second grant late on a loaded machine), for at most
    ``STEAL_WAIT_S`` more."""
    if seed == 0 or time.monotonic() > _START + STEAL_WAIT_S:
        return True
    with leases.engine.connect() as c:
        return bool(c.execute(sa.text("SELECT count(*) FROM lease_usage WHERE stolen = 1"))
                    .scalar_one())


def main(url: str, study: str, seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    leases = SliceLeases(url, study, ttl_s=TTL_S)
    end = time.monotonic() + seconds
    grants = 0
    while time.monotonic() < end or grants < GRANTS or not _stolen(leases, seed):
        lease = leases.acquire(rng.choice(SLICES))
        if lease is None:
            time.sleep(rng.uniform(0.0, 0.02))
            continue
        grants += 1
        t0 = leases.now()
        valid = lease.expires_at
        for _ in range(rng.randint(0, 3)):  # use it, renewing
            time.sleep(rng.uniform(0.01, 0.1))
            renewed = leases.renew(lease)
            if renewed is None:
                break
            valid = renewed
        dies = seed == 0 and grants == 2
        t1 = valid if dies else min(valid, leases.now())
        with leases.engine.begin() as c:
            c.execute(sa.text("INSERT INTO lease_usage VALUES (:s, :h, :t0, :t1, :st)"),
                      {"s": lease.slice, "h": lease.holder, "t0": t0, "t1": t1,
                       "st": int(lease.taken_from is not None)})
        if dies:
            os._exit(0)  # holding the lease: it must expire before anyone else gets the slice
        leases.release(lease)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
