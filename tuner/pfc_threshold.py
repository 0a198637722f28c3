"""The ECN-before-PFC inputs of the SSH canary switches: read from the switch, else inventory.

One place decides where a switch's ``PfcThreshold`` comes from, for ``describe()`` (the loop's
Kmax ceiling) and for pre-flight (which shows it): the driver's buffer reading (SONiC
``pg_buffer``), else the inventory's ``pfc_pool_bytes``/``pfc_dynamic_th``; the fan-in is the
inventory's ``incast_fan_in`` either way (the canary's topology, which the switch cannot know).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from safety.limits import PfcThreshold

if TYPE_CHECKING:
    from tuner.inventory import SwitchEntry


def switch_threshold(sw: SwitchEntry, found: dict[str, Any] | None) -> PfcThreshold | None:
    """``found``: the switch driver's facts (None: not read)."""
    read = (found or {}).get("pg_buffer")
    fan_in = f"incast_fan_in {sw.incast_fan_in} (inventory)"
    if read:
        return PfcThreshold(**{**read, "source": f"{read['source']}; {fan_in}"},
                            fan_in=sw.incast_fan_in)
    if sw.pfc_pool_bytes:
        return PfcThreshold(pool="inventory pfc_pool_bytes", pool_bytes=sw.pfc_pool_bytes,
                            dynamic_th=sw.pfc_dynamic_th, fan_in=sw.incast_fan_in,
                            source=f"inventory pfc_dynamic_th; {fan_in}")
    return None


def lowest(thresholds: list[PfcThreshold]) -> PfcThreshold | None:
    """The threshold that pauses first (it bounds Kmax for every canary switch)."""
    return min(thresholds, key=lambda t: t.onset_bytes()) if thresholds else None
