"""Writing a file into a folder someone else might have planted things in.

``write_file`` never writes through what is at the path: the data goes to a new file with an
unpredictable name (``mkstemp``: O_EXCL, so nothing can be planted there first), is flushed to
disk, and is renamed over the path. A rename replaces a symlink planted at the path instead of
following it, and a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_file(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Atomically replace ``path`` with ``data`` (text as UTF-8); the mode follows the umask,
    as ``open`` would give it. Creates the parent folder."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
