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


def _user_is_secret(url: str) -> bool:
    """On http(s) any user info is a credential (a token as the user name authenticates);
    a PostgreSQL user name is not."""
    return scheme(url) in ("http", "https")


def has_secret(url: str) -> bool:
    """True when the URL carries a password (``user:pw@`` or a ``password=`` parameter), a
    credential as an http(s) user name, or cannot be parsed at all (then nobody can tell
    what it carries: it is treated as secret)."""
    try:
        parts = urlsplit(url)
        return parts.password is not None or bool(_secret_query_keys(url)) or (
            parts.username is not None and _user_is_secret(url))
    except ValueError:
        return True


def hide(url: str) -> str:
    """The URL with any credential replaced by ``***`` (for messages; never log the raw URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if parts.password is not None or (parts.username is not None and _user_is_secret(url)):
        userinfo, _, hostport = netloc.rpartition("@")
        user = "***" if _user_is_secret(url) else userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{hostport}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = ("&".join(f"{k}={'***' if 'password' in k.lower() else v}" for k, v in pairs)
             if any("password" in k.lower() for k, _ in pairs) else parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url  # geturl() would fold sqlite:////abs/path into sqlite://abs/path
    return parts._replace(netloc=netloc, query=query).geturl()


def scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def _parsable(url: str) -> None:
    try:
        urlsplit(url).port  # noqa: B018 -- the port is parsed lazily
    except ValueError:
        raise ValueError("not a valid URL (check the brackets of an IPv6 host and the port); "
                         "it is not repeated here, as it may hold a credential") from None


def check_storage(url: str) -> str:
    """The Optuna storage URL if acceptable; ``ValueError`` saying what to do otherwise."""
    _parsable(url)
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
    _parsable(url)
    s = scheme(url)
    if s not in TRACKING_SCHEMES:
        raise ValueError(f"scheme {s or '(none)'!r} not supported; use sqlite:///PATH, "
                         "http(s)://HOST:PORT (an mlflow server) or postgresql://HOST/DATABASE")
    if has_secret(url):
        hint = (_PG_HINT if s.startswith("postgresql") else "put the credentials in "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, never in the "
                "experiment file")
        raise ValueError(f"the URL carries a credential (a password, or a user name on "
                         f"http(s)); {hint}")
    return url


def is_postgres(url: str) -> bool:
    return scheme(url).startswith("postgresql")
