"""The emulated NVUE daemon's confirm timer: ``nv config apply --confirm <time>`` starts one.

It runs outside every SSH session (like ``nvued`` on a switch: a dropped session or a killed
tuner does not stop it; a reboot does) and, once the deadline has passed, rolls the applied
configuration back to the revision before the unconfirmed apply -- unless that apply was
confirmed (``--confirm-yes``) or rolled back (``--confirm-no``) meanwhile. Standard library only.

    python -m tuner.emulated.nvued <target dir> <revision> <deadline epoch seconds>
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tuner.emulated import state as st

ENV_DAEMON = "ECNTUNE_EMU_DAEMON"  # names the target whose daemon this is (not a session)


def rollback(s: dict, rev: int) -> bool:
    """The unconfirmed revision ``rev`` goes; the previous one is applied again (``startup``
    is untouched: the unconfirmed revision was never saved). False if ``rev`` is not pending."""
    pending = s.get("confirm") or {}
    if pending.get("rev") != rev:
        return False
    s["applied"] = pending["previous"]
    s["pending"] = st.json_copy(pending["previous"])
    s["rev_id"] = int(s.get("rev_id", 1)) + 1
    s.pop("confirm", None)
    return True


def main(argv: list[str]) -> int:
    tdir, rev, deadline = Path(argv[0]), int(argv[1]), float(argv[2])
    while True:
        s = st.read_json(tdir / "state.json") or {}
        if (s.get("confirm") or {}).get("rev") != rev:
            return 0  # confirmed or rolled back by hand
        if time.time() >= deadline:
            break
        time.sleep(min(0.2, max(0.0, deadline - time.time())))
    with st.locked(tdir):
        s = st.load_state(tdir)
        if rollback(s, rev):
            st.write_json(tdir / "state.json", s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
