"""Storage and tracking URLs: which schemes are accepted, and that no password rides in one.

A password written into an experiment file would travel into MLflow params, the study's user
attrs, logs and version control. So a URL carrying one is refused, and credentials come from
where the client libraries look for them: for ``postgresql://`` libpq's environment
(``PGUSER``, ``PGPASSWORD``, ``PGHOST``, ``PGPORT``, ``PGSSLMODE`` ...) or ``~/.pgpass``; for an
``http(s)://`` MLflow server ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``.

Pure (no database driver imported): the experiment model validates with it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

STORAGE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")
TRACKING_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "http", "https")
_PG_HINT = ("put the password in PGPASSWORD or ~/.pgpass (and the user in PGUSER or the URL), "
            "never in the experiment file")


def _secret_query_keys(url: str) -> list[str]:
    return [k for k, _ in parse_qsl(urlsplit(url).query) if "password" in k.lower()]


def has_secret(url: str) -> bool:
    """True when the URL carries a password (``user:pw@`` or a ``password=`` parameter)."""
    try:
        return urlsplit(url).password is not None or bool(_secret_query_keys(url))
    except ValueError:
        return False


def hide(url: str) -> str:
    """The URL with any password replaced by ``***`` (for messages; never log the raw URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{hostport}"
    query = "&".join(f"{k}={'***' if 'password' in k.lower() else v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return parts._replace(netloc=netloc, query=query).geturl()


def scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def check_storage(url: str) -> str:
    """The Optuna storage URL if acceptable; ``ValueError`` saying what to do otherwise."""
    s = scheme(url)
    if s not in STORAGE_SCHEMES:
        raise ValueError(f"scheme {s or '(none)'!r} not supported; use sqlite:///PATH (one "
                         "machine) or postgresql://[USER@]HOST[:PORT]/DATABASE (workers on "
                         "several machines)")
    if has_secret(url):
        raise ValueError(f"the URL carries a password; {_PG_HINT}")
    if s.startswith("postgresql") and not urlsplit(url).path.strip("/"):
        raise ValueError("no database name; use postgresql://[USER@]HOST[:PORT]/DATABASE")
    return url


def check_tracking(url: str) -> str:
    """The MLflow tracking URI if acceptable; ``ValueError`` otherwise."""
    s = scheme(url)
    if s not in TRACKING_SCHEMES:
        raise ValueError(f"scheme {s or '(none)'!r} not supported; use sqlite:///PATH, "
                         "http(s)://HOST:PORT (an mlflow server) or postgresql://HOST/DATABASE")
    if has_secret(url):
        hint = (_PG_HINT if s.startswith("postgresql") else "put the credentials in "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, never in the "
                "experiment file")
        raise ValueError(f"the URL carries a password; {hint}")
    return url


def is_postgres(url: str) -> bool:
    return scheme(url).startswith("postgresql")
