"""Red team M4: a credential in a bad input is never echoed. Each case goes through the CLI
(``ecntune preflight``) and must end with exit 2 and a message that names the field or the
file, without the secret anywhere in the output."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner import storage_url
from tuner.cli import main

HEAD = """name: hostile
workload:
  parts:
    - {kind: collective, op: all_reduce, size_bytes: 1048576, iterations: 1}
budget: {trials: 1}
"""
SECRET = "Hunter2Secret"
TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
AWS = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"


def _preflight(tmp_path: Path, text: str) -> str:
    f = tmp_path / "exp.yaml"
    f.write_text(text)
    res = CliRunner().invoke(main, ["preflight", str(f)])
    assert res.exit_code == 2, res.output
    return res.output


@pytest.mark.parametrize("url, field", [
    # urlsplit raises on the unclosed IPv6 bracket: has_secret used to say "no secret".
    (f"postgresql://admin:{SECRET}@[::1/optuna", "storage"),
    (f"postgresql://admin:{SECRET}@db:99999/optuna", "storage"),  # port out of range
])
def test_an_unparsable_storage_url_is_not_echoed(tmp_path: Path, url: str, field: str) -> None:
    out = _preflight(tmp_path, HEAD + f"storage: '{url}'\n")
    assert f"{field}: " in out and "not a valid URL" in out
    assert SECRET not in out


def test_a_token_as_the_user_name_of_an_http_tracking_uri_is_refused(tmp_path: Path) -> None:
    out = _preflight(tmp_path, HEAD + f"tracking: {{uri: 'https://{TOKEN}@mlflow.example'}}\n")
    assert "tracking.uri" in out and "MLFLOW_TRACKING_USERNAME" in out
    assert TOKEN not in out
    assert storage_url.hide(f"https://{TOKEN}@h") == "https://***:***@h"
    # Nothing to hide: the URL as given (geturl() folded sqlite:////abs into sqlite://abs).
    assert storage_url.hide("sqlite:////srv/r/optuna.db") == "sqlite:////srv/r/optuna.db"
    assert storage_url.hide("postgresql://h/db?password=pw&a=1") == \
        "postgresql://h/db?password=***&a=1"
    # A PostgreSQL user name is not a credential: kept, and allowed.
    assert not storage_url.has_secret("postgresql://tuner@db/optuna")


def test_a_credentials_file_given_as_the_inventory_is_not_echoed(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                     f"aws_secret_access_key = {AWS}\n")
    out = _preflight(tmp_path, HEAD + f"fabric: {{backend: ssh, inventory_file: {creds}}}\n"
                     "canary: {switches: [leaf0]}\n")
    assert f"{creds}:2: not valid YAML" in out
    assert "AKIAIOSFODNN7EXAMPLE" not in out and AWS not in out and "aws_" not in out
