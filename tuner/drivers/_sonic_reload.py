"""SONiC: what ``config qos reload`` or ``config load_minigraph`` would undo on the canary.

``config qos reload`` (sonic-utilities ``config/main.py``) first deletes the QoS tables
(``_clear_qos``: PORT_QOS_MAP, QUEUE, TC_TO_QUEUE_MAP, DSCP_TO_TC_MAP, SCHEDULER, WRED_PROFILE,
the BUFFER_* tables ...), then writes what the HWSKU's ``qos.json.j2`` renders (``sonic-cfggen
-d -t <hwsku dir>/qos.json.j2,config-db -y /etc/sonic/sonic_version.yml --write-to-db``).
``config load_minigraph`` flushes CONFIG_DB, regenerates it from the minigraph and runs ``config
qos reload --no-dynamic-buffer``; only with ``--override_config`` does it then apply
``/etc/sonic/golden_config_db.json``, whose every table replaces the running one whole
(``config override-config-table`` deletes each table it names first). The canary profile, its
QUEUE bindings and an operator's DSCP fix live only in CONFIG_DB, so either command drops them
unless the template makes them.

Read-only, the same template is rendered to stdout (``sonic-cfggen -d -t <template> -y
<version file>``: no ``,config-db``, no ``--write-to-db``; sonic-buildimage
``src/sonic-config-engine/sonic-cfggen``) and compared with the running CONFIG_DB: the canary
profile, the canary ports' binding, the original profile's thresholds, and the RoCE DSCP's way
to its queue (``qos_path``).
"""

from __future__ import annotations

import json
from typing import Any

from tuner.drivers.sonic import FIELDS, qos_path, queue_bindings
from tuner.ssh.shell import q

# device_info.get_paths_to_platform_and_hwsku_dirs(): /usr/share/sonic/device/<platform>/<hwsku>
QOS_TEMPLATE = "/usr/share/sonic/device/{platform}/{hwsku}/qos.json.j2"
SONIC_VERSION = "/etc/sonic/sonic_version.yml"


def template_path(db: dict[str, Any]) -> str | None:
    """The HWSKU's ``qos.json.j2``, from CONFIG_DB ``DEVICE_METADATA|localhost`` (``None``
    without a platform and HWSKU there)."""
    meta = (db.get("DEVICE_METADATA") or {}).get("localhost") or {}
    platform, hwsku = meta.get("platform"), meta.get("hwsku")
    if not platform or not hwsku:
        return None
    return QOS_TEMPLATE.format(platform=platform, hwsku=hwsku)


def render_command(path: str) -> str:
    """Render the template to stdout: nothing is written (``UnsafeValue`` for a path that is
    not a plain one)."""
    return f"sonic-cfggen -d -t {q('path', path)} -y {SONIC_VERSION}"


def parse_render(text: str) -> dict[str, Any]:
    """The tables the template renders (``ValueError`` when it is not one JSON object)."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"the template rendered {type(data).__name__}, not an object")
    return data


def _ports(ports: list[str]) -> str:
    return ", ".join(ports[:4]) + (f" (+{len(ports) - 4} more)" if len(ports) > 4 else "")


def _hop(p: dict[str, Any]) -> str:
    pfc = ",".join(map(str, p["pfc_enable"])) or "none"
    return (f"TC {p['tc'] if p['tc'] is not None else '?'} ({p['dscp_map'] or 'no map'}), "
            f"queue {p['queue'] if p['queue'] is not None else '?'}, pfc_enable {pfc}")


def reload_losses(running: dict[str, Any], rendered: dict[str, Any], *, profile: str,
                  original: str, ports: list[str], queue: int, dscp: int) -> list[str]:
    """What the canary loses when CONFIG_DB's QoS tables become ``rendered``, one line per
    object; empty when the template regenerates all of it as it runs now."""
    out = []
    wred_now = running.get("WRED_PROFILE") or {}
    wred = rendered.get("WRED_PROFILE") or {}
    if profile not in wred:
        out.append(f"WRED_PROFILE|{profile} is not generated, so it is deleted ("
                   + ("it exists now" if profile in wred_now else "trials create it") + ")")
    binds = queue_bindings(rendered.get("QUEUE") or {})
    after = {p: binds.get((p, queue), ("no WRED profile", ""))[0] for p in ports}
    moved = [p for p in ports if after[p] != profile]
    if moved:
        names = ", ".join(sorted({after[p] for p in moved}))
        out.append(f"queue {queue} of {_ports(moved)} is bound to {names} again")
    was, comes = wred_now.get(original) or {}, wred.get(original)
    if was and comes is None:
        out.append(f"WRED_PROFILE|{original} is not generated")
    elif was and comes is not None:
        moved_fields = [f"{f} {was.get(f)} -> {comes.get(f)}" for f in FIELDS.values()
                        if str(was.get(f)) != str(comes.get(f))]
        if moved_fields:
            out.append(f"{original} comes back with {', '.join(moved_fields)}")
    changed: dict[tuple[str, str], list[str]] = {}
    for port in ports:
        now, then = _hop(qos_path(running, port, dscp)), _hop(qos_path(rendered, port, dscp))
        if now != then:
            changed.setdefault((now, then), []).append(port)
    for (now, then), where in changed.items():
        out.append(f"DSCP {dscp} on {_ports(where)}: {now} now, {then} after")
    return out
