"""The switch stand-ins held to the vendor samples (tests/ssh/fixtures, copied from
shared/reference with their sources): same text for the same values, the same units and
rounding, and the rejections the vendor documents show. Run over real SSH on the emulated
cluster, as the tuner runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives.parsers import parse_nvue
from tests.emulated.helpers import run
from tuner.drivers.sonic import parse_counterpoll, parse_mmu
from tuner.emulated import EmulatedCluster, sshd_available
from tuner.emulated.tools._fmt import simple_table

pytestmark = [pytest.mark.ssh, pytest.mark.skipif(
    not sshd_available(), reason="/usr/sbin/sshd missing (apt-get install openssh-server)")]
FIXTURES = Path(__file__).resolve().parents[1] / "ssh" / "fixtures"


def fixture(name: str) -> str:
    text = (FIXTURES / name).read_text()
    return text.split("\n", 1)[1] if text.startswith("# source:") else text


def ok(emu: EmulatedCluster, target: str, command: str) -> str:
    code, out, err = run(emu, target, command)
    assert code == 0, f"{command!r} on {target}: rc={code} stderr={err!r}"
    return out


def _strip(text: str) -> list[str]:
    return [ln.rstrip() for ln in text.strip("\n").splitlines()]


def test_sonic_stand_ins_print_the_samples(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    # factory AZURE_LOSSLESS holds the sample's values: the same text, line for line
    assert _strip(ok(emu, "leaf0", "ecnconfig -l")) == _strip(fixture("sonic-ecnconfig-l.txt"))
    # mmuconfig -l: the sample's layout, stock SN2700 values (tuner/emulated/switches.py)
    mmu = ok(emu, "leaf0", "mmuconfig -l")
    assert "Pool: ingress_lossless_pool\n" + "\n".join([
        "----  -------", "mode  dynamic", "size  4580864", "type  ingress", "----  -------",
    ]) in mmu
    profile = mmu.split("Profile: pg_lossless_100000_5m_profile\n")[1].split("\n\n")[0]
    sample = fixture("sonic-mmuconfig-l.txt").split(
        "Profile: pg_lossless_100000_300m_profile\n")[1].split("\n\n")[0]
    assert [ln.split()[0] for ln in _strip(profile)] == [
        ln.split()[0] for ln in _strip(sample) if not ln.startswith("xon_offset")]
    assert parse_mmu(mmu)["BUFFER_PROFILE"]["pg_lossless_100000_5m_profile"] == {
        "dynamic_th": "0", "pool": "ingress_lossless_pool", "size": "50176", "xoff": "30720",
        "xon": "19456"}
    # counterpoll: the formatter reproduces the sample from its rows; the stand-in's rows parse
    rows = [ln.split("  ") for ln in fixture("sonic-counterpoll-show.txt").splitlines()[2:]]
    rows = [[c.strip() for c in r if c.strip()] for r in rows]
    assert simple_table(["Type", "Interval (in ms)", "Status"], rows) + "\n" == fixture(
        "sonic-counterpoll-show.txt")
    poll = parse_counterpoll(ok(emu, "leaf0", "counterpoll show"))
    assert poll["WRED_ECN_QUEUE_STAT"] == (10.0, False)  # off until enabled, as on SONiC
    ok(emu, "leaf0", "counterpoll wredqueue enable")
    assert parse_counterpoll(ok(emu, "leaf0", "counterpoll show"))["WRED_ECN_QUEUE_STAT"][1]


def test_sonic_stand_ins_reject_what_sonic_rejects(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    # sonic-utilities tests/ecn_input/ecn_test_vectors.py (shared/reference/sonic/
    # ecnconfig-set-and-queue-status-messages.txt): the messages, verbatim
    for args, message in (
            ("-gmax 2097153 -gmin 2097154",
             "Invalid gmin (2097154) and gmax (2097153). gmin should be smaller than gmax"),
            ("-rmax -2097153", "Invalid rmax (-2097153). rmax should be an non-negative integer"),
            ("-rdrop 105", "Invalid value for '-rdrop': 105 is not in the range 0<=x<=100")):
        code, out, err = run(emu, "leaf0", f"ecnconfig -p AZURE_LOSSLESS {args}")
        assert code != 0 and message in out + err, (args, out, err)
    code, out, err = run(emu, "leaf0", "ecnconfig -p ECNTUNE_CANARY -gmin 1000")
    assert code != 0 and "Invalid WRED profile ECNTUNE_CANARY" in err
    code, _, err = run(emu, "leaf0", "counterpoll queue interval 50")
    assert code == 2 and "is not in the range" in err


def test_nvue_stand_in_prints_the_samples_units(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    pre = "nv set qos congestion-control default-global traffic-class 3"
    ok(emu, "leaf1", f"{pre} min-threshold 40000 && {pre} max-threshold 200000 && "
                     f"{pre} probability 100 && {pre} red enable && nv config apply -y")
    shown = ok(emu, "leaf1", "nv show qos congestion-control default-global traffic-class 3")
    assert _strip(shown) == _strip(fixture("nvue-show-cc-traffic-class.txt"))  # "40000 B"
    ok(emu, "leaf1", f"{pre} min-threshold 150000 && {pre} max-threshold 1500000 && "
                     "nv config apply -y")
    # the RoCE views print binary human units with two decimals, like the doc samples
    roce = parse_nvue(ok(emu, "leaf1", "nv show qos roce")).values
    doc = parse_nvue(fixture("nvue-show-qos-roce.txt")).values
    for key in ("congestion-control.min-threshold", "congestion-control.max-threshold"):
        assert roce[key].value == doc[key].value  # 146.48 KB, 1.43 MB
    # the stock `nv set qos roce` maps, as NVIDIA's sample prints them
    maps = parse_nvue(ok(emu, "leaf1", "nv show qos roce")).tables
    for title in ("RoCE PCP/DSCP->SP mapping configurations",
                  "RoCE SP->TC mapping and ETS configurations"):
        assert maps[title] == parse_nvue(fixture("nvue-show-qos-roce.txt")).tables[title], title
    status = parse_nvue(ok(emu, "leaf1", "nv show interface swp1 qos roce status"))
    sample = parse_nvue(fixture("nvue-show-interface-qos-roce-status.txt"))
    # the port's operational view is what the ASIC runs: NVIDIA's own "153.00 KB" for 150000 B
    assert status.values["congestion-control.min-threshold"].value == "153.00 KB" == sample.values[
        "congestion-control.min-threshold"].value
    assert set(sample.values) <= set(status.values) | {"lldp-app-tlv.priority",
                                                       "lldp-app-tlv.protocol-id",
                                                       "lldp-app-tlv.selector"}
    assert set(sample.tables) - {"RoCE Pool Status"} <= set(status.tables)
    pfc = parse_nvue(ok(emu, "leaf1", "nv show qos pfc default-global")).values
    assert set(parse_nvue(fixture("nvue-show-qos-pfc.txt")).values) == set(pfc)


def test_nvue_stand_in_rejects_what_nvue_rejects(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    pre = "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3"
    code, _, err = run(emu, "leaf1", f"{pre} min-threshold 900000 && {pre} max-threshold "
                                     "800000 && nv config apply -y")
    assert code != 0 and "min-threshold must be less than max-threshold" in err
    ok(emu, "leaf1", "nv unset qos congestion-control ECNTUNE_CANARY")
    code, _, err = run(emu, "leaf1", "nv set interface swp1 qos congestion-control profile "
                                     "NOPE && nv config apply -y")
    assert code != 0 and "'NOPE' is not a congestion-control profile" in err
    ok(emu, "leaf1", "nv unset interface swp1 qos congestion-control")
    for bad, why in (("nv unset qos congestion-control default-global", "cannot be removed"),
                     (f"{pre} probability 101", "not in the range 0-100"),
                     (f"{pre} ecn maybe", "is not one of"),
                     ("nv set interface swp99 qos congestion-control profile X", "swp99")):
        code, _, err = run(emu, "leaf1", bad)
        assert code != 0 and why in err, (bad, err)
