"""Every real sample in shared/reference/ is read by the right parser, and known values come out.

Samples are captured sessions: where a file holds several commands (prompts, ``ls`` listings,
annotations) the test cuts out the output of the command each parser is for, by its markers.
Samples marked TRUNCATED in their provenance line are parsed with ``allow_truncated=True``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from parser_refs import between, body, is_truncated, reference_dir, sample_files

from objectives import parsers as P
from tuner.errors import ParseError

Check = Callable[[Path], None]
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    def deco(fn: Check) -> Check:
        CHECKS[name] = fn
        return fn

    return deco


# ------------------------------------------------------------------------------ nccl-tests


@check("allgather-out-of-bounds-FAILED-issue37.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p))
    assert r.columns == ["size", "count", "type", "time", "algbw", "busbw", "error"] + [
        "time",
        "algbw",
        "busbw",
        "error",
    ]
    row = r.rows[0]
    assert (row.size_bytes, row.count, row.type, row.redop, row.root) == (
        4294967296,
        134217728,
        "float",
        None,
        None,
    )
    assert row.out_of_place.busbw_gbytes_per_s == 129.05 and row.out_of_place.error == 1.0
    assert row.in_place is not None and row.in_place.time_us == 29169
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.avg_busbw_gbytes_per_s) == (2, False, 128.942)
    assert r.failed and r.op == "all_gather"
    # the old format has no #wrong: the footer's count must reach the CollectiveResult
    assert r.collective_results(ranks=8)[0].wrong == 2


@check("allreduce-2node-16rank-h100.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p))
    assert r.complete and not r.failed and r.op == "all_reduce" and r.nranks == 16
    assert r.params["nThread"] == 1 and r.params["maxBytes"] == 8589934592
    assert r.params["agg_iters"] == 1 and r.params["graph"] == 0
    assert len(r.rows) == 31 and r.rows[0].size_bytes == 8
    last = r.rows[-1]
    assert last.size_bytes == 8589934592 and last.out_of_place.busbw_gbytes_per_s == 338.82
    assert last.in_place is not None and last.in_place.busbw_gbytes_per_s == 337.35
    assert last.out_of_place.time_us == 47535 and last.out_of_place.wrong == 0
    assert r.devices[8].host == "ztan-mig-gq73" and r.devices[8].bus_id == "0000:04:00"
    assert r.avg_busbw_gbytes_per_s == 70.742 and r.out_of_bounds == 0
    # footer average = mean busbw over every row, both halves (INDEX.md 1b, common.cu L895)
    halves = [
        h.busbw_gbytes_per_s or 0.0
        for row in r.rows
        for h in (row.out_of_place, row.in_place)
        if h is not None
    ]
    assert len(halves) == 62 and sum(halves) / len(halves) == pytest.approx(70.742, abs=0.01)
    cr = r.collective_results(line_rate_gbytes_per_s=50.0)
    assert len(cr) == 31 and cr[-1].ranks == 16 and cr[-1].busbw_gbytes_per_s == 338.82
    assert cr[-1].name == "all_reduce" and cr[-1].line_rate_gbytes_per_s == 50.0


@check("allreduce-tree-8gpu-pcie-nccl-issue1530.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p), allow_truncated=True)
    assert r.nranks == 8 and r.devices[3].bus_id == "0x5a" and r.params["nGpus"] == 8
    assert not r.complete and r.rows == []
    assert r.truncated_line is not None and r.truncated_line.startswith("8")
    with pytest.raises(ParseError, match="line 17: row has 9 fields"):
        P.parse_nccl_tests(body(p))


@check("allreduce-v2.18-version-banner-mpi-tagged.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p))
    assert (r.version, r.nccl_headers, r.nccl_library) == ("2.18.0", 22907, 22907)
    assert r.program == "all_reduce_perf_mpi" and r.op == "all_reduce" and r.nranks == 2
    assert len(r.rows) == 8 and r.rows[5].out_of_place.time_us == 14977.1
    assert r.rows[-1].in_place is not None and r.rows[-1].in_place.busbw_gbytes_per_s == 2.31
    assert r.avg_busbw_gbytes_per_s == 1.57614 and r.complete


@check("alltoall-1gpu-avgbw0-issue287.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p))
    row = r.rows[0]
    assert row.redop == "none" and row.root == -1
    assert row.out_of_place.algbw_gbytes_per_s == 1715.44 and row.out_of_place.wrong == 0
    assert row.in_place is not None and row.in_place.wrong is None  # N/A
    assert row.in_place.algbw_gbytes_per_s == 43046.10
    assert r.avg_busbw_gbytes_per_s == 0.0 and r.nranks == 1 and not r.failed


@check("alltoall-8gpu-h20-issue314.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p), allow_truncated=True)
    assert r.nranks == 8 and len(r.rows) == 3 and r.params == {}
    assert r.rows[2].out_of_place.busbw_gbytes_per_s == 61.84
    assert all(row.in_place is not None and row.in_place.wrong is None for row in r.rows)
    # alltoall busbw = algbw * (n-1)/n (INDEX.md 1b; src/alltoall.cu L48-54)
    row = r.rows[2].out_of_place
    assert row.busbw_gbytes_per_s == pytest.approx(row.algbw_gbytes_per_s * 7 / 8, abs=0.01)  # type: ignore[operator]


@check("markdown-stripped-hash-efa-issue249.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p), allow_truncated=True)
    assert r.blocking and r.params["maxBytes"] == 16777216 and r.nranks == 1
    assert r.columns[-1] == "#wrong" and r.rows == []
    assert r.truncated_line == "8             2     float     sum"


@check("nccl-debug-net-ib-line-variants.txt")
def _(p: Path) -> None:
    text = "\n".join(ln for ln in body(p).split("\n") if not ln.startswith("## "))
    log = P.parse_nccl_debug(text)
    assert len(log.lines) == 21
    assert log.net_devices[0].device == "mlx5_0" and log.net_devices[0].link_layer == "RoCE"
    assert log.relaxed_ordering is False and log.oob_interface == "nmn0:10.252.1.67<0>"
    assert [w.source for w in log.warnings] == ["misc/socket.cc:397"]
    new = P.parse_nccl_debug(between(body(p), "[block C]", "[block D]"))
    assert new.relaxed_ordering is True and new.network == "IBext"
    assert [d.device for d in new.net_devices] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    assert new.net_devices[0].flags == ["SHARP"] and new.net_devices[0].link_layer == "IB"


@check("reduce-scatter-zero-size-rows-issue128.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p), allow_truncated=True)
    assert [row.size_bytes for row in r.rows] == [0, 0, 0, 0, 0, 128, 256]
    assert r.rows[0].out_of_place.time_us == 5.70 and r.rows[0].count == 0
    assert r.rows[5].in_place is not None and r.rows[5].in_place.algbw_gbytes_per_s == 0.01


@check("very-old-format-no-group-issue107.txt")
def _(p: Path) -> None:
    r = P.parse_nccl_tests(body(p), allow_truncated=True)
    assert r.columns[:5] == ["size", "count", "type", "redop", "time"]
    assert "root" not in r.columns and r.columns[7] == "error"
    assert r.params["minBytes"] == 1310720000 and "agg_iters" not in r.params
    assert [d.host for d in r.devices] == ["ip-172-31-20-228", "ip-172-31-22-230"]
    assert r.devices[0].group is None and r.devices[0].pid == 1320
    assert r.nranks == 1  # both processes think they are rank 0: MPI not linked


# ------------------------------------------------------------------------------ perftest


@check("ib_bw_lat-newer-perftest-ib-cpu-freq-warnings.txt")
def _(p: Path) -> None:
    r = P.parse_perftest(body(p))
    assert [run.kind for run in r.runs] == ["lat", "bw", "bw"]
    lat = r.runs[0].latency[0]
    assert (lat.t_min_us, lat.t_max_us, lat.t_typical_us, lat.p99_us, lat.p999_us) == (
        1.24,
        5.19,
        1.27,
        1.37,
        5.19,
    )
    assert len(r.runs[0].warnings) == 2 and r.runs[0].banner.mtu_bytes == 4096
    bw = r.runs[2]
    assert bw.banner.test == "RDMA_Write BW Test" and bw.banner.device == "mlx5_0"
    assert bw.unit == "Gb/sec" and bw.bandwidth[0].bw_average_gbps == 392.34
    assert bw.bandwidth[0].msg_rate_mpps == 0.748336 and bw.banner.link_type == "IB"
    assert bw.banner.fields["CQE Poll Batch"] == "Dynamic"
    assert bw.banner.fields["Using Enhanced Reorder"] == "OFF"
    lr = r.runs[0].latency_result()
    assert (lr.p50_us, lr.p99_us, lr.p999_us, lr.max_us, lr.count) == (
        1.27,
        1.37,
        5.19,
        5.19,
        1000,
    )


@check("ib_read_bw-ib-sweep-MBsec-ucx-issue8851.txt")
def _(p: Path) -> None:
    r = P.parse_perftest(body(p), allow_truncated=True)
    run = r.run
    assert run.unit == "MB/sec" and [row.bytes for row in run.bandwidth] == [2, 4, 8, 16]
    # perftest's MB is 2^20 bytes (renamed MiB/sec in 24.07): 38.95 MiB/s = 0.32674 Gb/s
    assert run.bandwidth[3].bw_average_gbps == pytest.approx(38.95 * 1048576 * 8 / 1e9)
    assert run.banner.device == "mlx5_1" and run.banner.fields["Outstand reads"] == "16"


@check("ib_read_lat-roce-cx5-spiderpool.txt")
def _(p: Path) -> None:
    r = P.parse_perftest(body(p))
    assert [run.banner.gid_index for run in r.runs] == [12, 2]
    assert [run.banner.device for run in r.runs] == ["mlx5_0", "mlx5_5"]
    assert r.runs[0].banner.link_type == "Ethernet" and r.runs[0].banner.mtu_bytes == 1024
    assert r.runs[0].latency[0].t_avg_us == 7.06 and r.runs[1].latency[0].p999_us == 20.37
    assert r.runs[1].banner.gids[1].endswith("172:81:00:118")
    assert r.runs[0].warnings[0].startswith("Conflicting CPU frequency")


@check("ib_write_bw-roce-mlx5-duration-issue234.txt")
def _(p: Path) -> None:
    r = P.parse_perftest(body(p), allow_truncated=True)
    run = r.run
    assert run.banner.gid_index == 3 and run.banner.link_type == "Ethernet"
    assert run.unit == "MB/sec" and run.bandwidth == []
    assert run.truncated_line == "65536      664644"
    with pytest.raises(ParseError, match="line 25"):
        P.parse_perftest(body(p))


@check("ib_write_bw-roce-multi-qp-rdma_cm-dgx-spark.txt")
def _(p: Path) -> None:
    r = P.parse_perftest(body(p))
    bw, lat = r.runs
    assert bw.banner.num_qps == 4 and len(bw.banner.local_addresses) == 4
    assert len(bw.banner.remote_addresses) == 4 and bw.banner.rdma_cm is True
    assert bw.bandwidth[0].bw_peak_gbps == 111.72 and bw.bandwidth[0].iterations == 20000
    assert lat.latency[0].t_typical_us == 1.47 and lat.latency[0].p99_us == 1.57


@check("ib_write_bw-roce-postlist-gbits-issue273.txt")
def _(p: Path) -> None:
    run = P.parse_perftest(body(p)).run
    assert run.banner.test == "RDMA_Write Post List BW Test" and run.banner.gid_index == 2
    row = run.bandwidth[0]
    assert (row.bytes, row.iterations, row.bw_peak_gbps, row.bw_average_gbps) == (
        8,
        224958464,
        0.0,
        0.48,
    )
    assert run.banner.fields["Post List"] == "128"


@check("ib_write_lat-roce-mlx4-sweep-rdma-tutorial-issue8.txt")
def _(p: Path) -> None:
    run = P.parse_perftest(body(p), allow_truncated=True).run
    assert run.banner.device == "mlx4_0" and run.banner.gid_index == 1
    assert run.truncated_line == "#bytes #iterat" and run.latency == []


# ------------------------------------------------------------------------------ mlx5 ethtool


@check("cx4-kernel4.15-ethtool-S-head-ethq-issue8.txt")
def _(p: Path) -> None:
    info = P.parse_ethtool_info(between(body(p), "# ethtool -i output", "# ethtool -S output"))
    assert info.driver == "mlx5_core" and info.firmware_version == "14.23.1020 (MT_2420110034)"
    assert info.bus_info == "0000:af:00.0" and info.fields["supports-priv-flags"] == "yes"
    stats = P.parse_ethtool_stats(between(body(p), "# ethtool -S output"), allow_truncated=True)
    assert stats.counters["rx_bytes"] == 2195783498134 and stats.truncated_line == "tx"
    assert stats.counters["tx_queue_stopped"] == 0 and len(stats.counters) == 23


@check("cx4lx-discards-and-global-pause-grep.txt")
def _(p: Path) -> None:
    c = P.parse_ethtool_stats(body(p)).counters
    assert c["tx_global_pause"] == 1266552 and c["tx_global_pause_duration"] == 555665182
    assert c["rx_steer_missed_packets"] == 24627 and c["rx_prio3_discards"] == 0
    assert "rx_prio3_pause" not in c  # global pause, not PFC: per-prio pause is absent


@check("cx4lx-pause-grep-zero.txt")
def _(p: Path) -> None:
    c = P.parse_ethtool_stats(body(p)).counters
    assert len(c) == 9 and set(c.values()) == {0} and "tx_pause_storm_warning_events" in c


# ------------------------------------------------------------------------------ rdma counters


@check("dcqcn-counters-np-rp-roles-tc-red.txt")
def _(p: Path) -> None:
    np_ = P.parse_hw_counters(between(body(p), "grep -oP", "# On vm01"))
    rp = P.parse_hw_counters(between(body(p), "grep -oP", "tc -s qdisc", nth=1))
    assert np_.counters() == {
        "rp_cnp_handled": 0,
        "np_ecn_marked_roce_packets": 184,
        "np_cnp_sent": 184,
    }
    assert rp.counters()["rp_cnp_handled"] == 184 and rp.counters()["np_cnp_sent"] == 0


@check("hw_counters-ls-and-rdma-statistic-oci-ja.txt")
def _(p: Path) -> None:
    r = P.parse_hw_counters(between(body(p), "rdma statistic | grep mlx5_2"))
    c = r.counters("mlx5_2/1")
    assert c["rx_write_requests"] == 18747 and c["rx_icrc_encapsulated"] == 0 and len(c) == 29
    # the `ls` listing (names without values) is not a counter dump
    with pytest.raises(ParseError, match="line 2.*excessive_buffer_overrun_errors"):
        P.parse_hw_counters(between(body(p), None, "$ ls /sys/class/infiniband/mlx5_2/ports/1/hw"))


@check("rdma-stat-optional-counters-patch-variants.txt")
def _(p: Path) -> None:
    text = body(p)
    inline = P.parse_hw_counters(between(text, "$ rdma statistic show link", "$ sudo", nth=0))
    c = inline.counters("rocep8s0f0/1")
    assert c["cc_rx_ce_pkts"] == 0 and c["cc_rx_cnp_pkts"] == 0 and len(c) == 30
    opt = P.parse_hw_counters(between(text, "$ rdma statistic show link", "$ sudo", nth=1))
    c2 = opt.counters()
    assert c2["cc_tx_cnp_pkts"] == 0 and c2["rx_icrc_encapsulated"] == 0 and len(c2) == 30
    last = P.parse_hw_counters(between(text, "$ rdma statistic show link", None, nth=2))
    assert "cc_rx_ce_pkts" in last.counters() and "cc_tx_cnp_pkts" not in last.counters()
    # `rdma statistic mode` output names counters without values: refused
    with pytest.raises(ParseError, match="optional-counters"):
        P.parse_hw_counters(between(text, "$ rdma statistic mode link", "$ rdma statistic show"))


@check("rdma-stat-show-and-p-iproute2-cover-letter.txt")
def _(p: Path) -> None:
    wrapped = P.parse_hw_counters(between(body(p), "rdma stat show", "rdma stat show -p"))
    pretty = P.parse_hw_counters(between(body(p), "rdma stat show -p"))
    assert wrapped == pretty and len(pretty.counters("mlx5_0/1")) == 21
    assert "out_of_sequence" not in pretty.counters()


@check("show_counters-and-hw_counters-ls-bond-nonzero-ecn.txt")
def _(p: Path) -> None:
    r = P.parse_hw_counters(
        between(body(p), "# show_counters mlx5_bond_0", "# ll "), default_link="mlx5_bond_0/1"
    )
    c = r.counters("mlx5_bond_0/1")
    assert c["np_ecn_marked_roce_packets"] == 21278189006 and c["np_cnp_sent"] == 1052612505
    assert c["out_of_sequence"] == 1811101 and c["lifespan"] == 10 and len(c) == 30
    with pytest.raises(ParseError, match="line 2.*-r--r--r--"):
        P.parse_hw_counters(between(body(p), "# ll "))


# ------------------------------------------------------------------------------ mlx5 config


@check("mlnx_qos-show-fw-dcbx-dscp-trust-pfc3.txt")
def _(p: Path) -> None:
    q = P.parse_mlnx_qos(body(p))
    assert q.dcbx_mode == "Firmware controlled" and q.trust == "dscp"
    assert q.dscp2prio[26] == 3 and q.dscp2prio[48] == 6 and len(q.dscp2prio) == 64
    assert q.buffer_size_bytes == [130944, 130944, 0, 0, 0, 0, 0, 0]
    assert q.max_buffer_size_bytes == 262016 and q.cable_len_m == 7
    assert q.pfc_priorities == [3] and q.prio2buffer == [0, 0, 0, 1, 0, 0, 0, 0]
    assert q.prio_tc == {0: 0, 1: 0, 2: 0, 4: 0, 5: 0, 7: 0, 3: 3, 6: 6}
    assert [(t.tc, t.tsa, t.bw_percent) for t in q.tcs] == [
        (0, "ets", 50),
        (3, "ets", 50),
        (6, "vendor", None),
    ]


@check("mlnx_qos-show-os-dcbx-tabs-partial.txt")
def _(p: Path) -> None:
    q = P.parse_mlnx_qos(between(body(p), None, "... # many other outputs"))
    assert q.dcbx_mode == "OS controlled" and q.dscp2prio[24] == 3 and q.pfc_enabled == []
    with pytest.raises(ParseError, match="many other outputs"):
        P.parse_mlnx_qos(body(p))


@check("sysfs-ecn-enable-cnp_dscp-traffic_class-readback-spiderpool.txt")
def _(p: Path) -> None:
    # the helper script prints mlnx_qos's trust and PFC lines before its own sysfs read-back
    q = P.parse_mlnx_qos(between(body(p), "show configuration for device", "ECN Enabled"))
    assert q.trust == "dscp" and q.pfc_priorities == [5] and q.prio2buffer[5] == 1


@check("mstconfig-query-cx4lx-roce-cc-defaults.txt")
def _(p: Path) -> None:
    d = P.parse_mlxconfig_query(body(p)).devices[0]
    assert d.device_type == "ConnectX4LX" and d.device == "01:00.1" and d.columns == ["Next Boot"]
    # factory DCQCN values (INDEX.md section 2)
    expect = {
        "RPG_TIME_RESET_P1": 300,
        "RPG_BYTE_RESET_P1": 32767,
        "RPG_AI_RATE_P1": 5,
        "RPG_HAI_RATE_P1": 50,
        "RPG_GD_P1": 11,
        "DCE_TCP_G_P1": 1019,
        "INITIAL_ALPHA_VALUE_P1": 1023,
        "CNP_DSCP_P2": 48,
        "CNP_802P_PRIO_P2": 6,
        "CLAMP_TGT_RATE_AFTER_TIME_INC_P1": 1,
        "ROCE_CC_PRIO_MASK_P1": 255,
    }
    assert {k: d.value(k) for k in expect} == expect
    assert d.params["ROCE_CC_ALGORITHM_P1"][0].text == "ECN"


@check("mlxconfig-roce-cc-params-mstflint-db.txt")
def _(p: Path) -> None:
    # sqlite3 dump of mstflint's parameter DB: reference data for the knob table, not tool
    # output of a device; only check it is the table INDEX.md section 2 was built from.
    rows = [ln.split(" | ") for ln in body(p).split("\n")[1:] if ln.strip()]
    names = {r[1]: r for r in rows}
    assert names["RPG_TIME_RESET"][3] == "0x0.17" and names["CNP_DSCP"][3] == "0x0.6"


# ------------------------------------------------------------------------------ SONiC


@check("ecnconfig-l-show-ecn-single-profile.txt")
def _(p: Path) -> None:
    e = P.parse_ecnconfig(body(p))
    prof = e.profiles["AZURE_LOSSLESS"]
    assert prof["green_min_threshold"] == 1048576 and prof["green_max_threshold"] == 2097152
    assert prof["green_drop_probability"] == 5 and prof["ecn"] == "ecn_all" and len(prof) == 13
    assert e.total_profiles is None


@check("ecnconfig-set-and-queue-status-messages.txt")
def _(p: Path) -> None:
    text = body(p)
    one = P.parse_ecnconfig(between(text, "'ecn_show_config_verbose'", "--- testData"))
    assert (
        one.total_profiles == 1 and one.profiles["AZURE_LOSSLESS"]["red_max_threshold"] == 2097152
    )
    two = P.parse_ecnconfig(between(text, "'test_ecn_show_config_verbose_masic'", "--- testData"))
    assert two.total_profiles == 2 and two.profiles["AZURE_LOSSY"]["yellow_min_threshold"] == 4095
    assert len(two.profiles["AZURE_LOSSY"]) == 7
    q = P.parse_ecnconfig(between(text, "'ecn_q_all_get'", "--- testData"))
    assert [(s.queue, s.ecn_on) for s in q.queue_status] == [(3, True), (4, True)]
    ns = P.parse_ecnconfig(between(text, "'ecn_q_get_all_ns_verbose_masic'", "--- testData"))
    assert [(s.namespace, s.ports, s.queue, s.ecn_on) for s in ns.queue_status] == [
        ("asic0", ["Ethernet4"], 0, False),
        ("asic1", ["Ethernet0"], 0, True),
    ]
    # set messages and validation errors are not show output
    with pytest.raises(ParseError, match="Running command"):
        P.parse_ecnconfig(between(text, "'ecn_cfg_gmin_verbose'", "--- testData"))


@check("real-pfcstat-mellanox-sdk-dump-issue5540.txt")
def _(p: Path) -> None:
    r = P.parse_pfcstat(between(body(p), "# pfcstat"), allow_truncated=True)
    assert r.cached_at == "2020-10-01 13:15:55.420247"
    assert r.rx["Ethernet4"][3] == 0 and "Ethernet8" not in r.rx and r.tx == {}
    with pytest.raises(ParseError, match="line 6.*Ethernet8"):
        P.parse_pfcstat(between(body(p), "# pfcstat"))


@check("real-pfcwd-config-old-format-and-interface-counters-issue9193.txt")
def _(p: Path) -> None:
    c = P.parse_pfcwd_config(between(body(p), "# show pfcwd config", "root@sonic-10431:~#"))
    assert c.polling_interval_ms == 100 and set(c.ports) == {"Ethernet0", "Ethernet2"}
    assert c.ports["Ethernet2"].detection_time_ms == 200 and c.ports["Ethernet2"].history is None
    # `show interface counters` (the second command) is not a pfcwd table
    with pytest.raises(ParseError, match="line 1: not part of any table.*IFACE"):
        P.parse_pfcwd_config(between(body(p), "cat show_int_counter"), allow_truncated=True)


@check("show-pfc-counters-history.txt")
def _(p: Path) -> None:
    r = P.parse_pfcstat(body(p))
    h = r.history["Ethernet4"][3]
    assert (h.rx_pause_transitions, h.total_rx_pause_time_us, h.recent_rx_pause_time_us) == (
        43,
        40000003,
        4000003,
    )
    assert h.recent_rx_pause_timestamp == "10/02/2096, 07:06:40"
    assert len(r.history) == 3 and all(len(v) == 8 for v in r.history.values())


@check("show-pfc-counters.txt")
def _(p: Path) -> None:
    r = P.parse_pfcstat(body(p))
    assert r.rx["Ethernet0"][0] == 1200 and r.tx["Ethernet8"][0] == 1810
    assert r.tx["Ethernet4"][7] == 417
    assert r.to_counters()["Ethernet0"]["pfc3_rx_pkts"] == 203


@check("show-pfcwd-config.txt")
def _(p: Path) -> None:
    c = P.parse_pfcwd_config(body(p))
    assert c.polling_interval_ms == 600 and len(c.ports) == 3
    assert c.ports["Ethernet8"].history == "disable" and c.ports["Ethernet8"].action == "drop"


@check("show-pfcwd-stats-multi-asic-all.txt")
def _(p: Path) -> None:
    s = P.parse_pfcwd_stats(body(p))
    assert len(s.rows) == 96 and s.rows[0].status is None
    bp = [r for r in s.rows if r.port == "Ethernet-BP256" and r.queue == 10][0]
    assert (bp.storm_detected, bp.storm_restored, bp.tx_ok, bp.tx_drop) == (1, 0, 4559, 78)
    assert (bp.rx_last_ok, bp.rx_last_drop) == (9111, 92)


@check("show-pfcwd-stats.txt")
def _(p: Path) -> None:
    s = P.parse_pfcwd_stats(body(p))
    assert [(r.port, r.queue, r.status) for r in s.rows] == [
        ("Ethernet0", 3, "stormed"),
        ("Ethernet4", 3, "operational"),
        ("Ethernet8", 4, "stormed"),
    ]
    assert s.to_counters()["Ethernet8"] == {"pfcwd4_storm_detected": 3, "pfcwd4_storm_restored": 2}


@check("show-queue-counters.txt")
def _(p: Path) -> None:
    q = P.parse_queue_counters(body(p))
    assert len(q.rows) == 90
    assert q.get("Ethernet4", "UC3").values == {
        "Counter/pkts": 60,
        "Counter/bytes": 89,
        "Drop/pkts": 48,
        "Drop/bytes": 41,
    }
    assert q.get("Ethernet0", "ALL20").values["Drop/pkts"] is None
    assert q.to_counters()["Ethernet4"]["queue3_drop_pkts"] == 48


@check("show-queue-counters-json.txt")
def _(p: Path) -> None:
    q = P.parse_queue_counters(body(p))
    assert len(q.rows) == 90 and q.get("Ethernet4", "UC3").values["Drop/pkts"] == 48
    text_form = P.parse_queue_counters(body(p.with_name("show-queue-counters.txt")))
    assert {(r.port, r.queue): r.values for r in q.rows} == {
        (r.port, r.queue): r.values for r in text_form.rows
    }


@check("show-queue-wredcounters.txt")
def _(p: Path) -> None:
    w = P.parse_wredcounters(body(p))
    row = w.get("Ethernet0", "UC3")
    assert row.values == {
        "WredDrp/pkts": 52,
        "WredDrp/bytes": 70,
        "EcnMarked/pkts": 19,
        "EcnMarked/bytes": 76,
    }
    assert w.to_counters()["Ethernet8"]["queue9_ecn_marked_pkts"] == 91 and len(w.rows) == 90
    with pytest.raises(ParseError, match="not a wredstat table"):
        P.parse_wredcounters(body(p.with_name("show-queue-counters.txt")))


@check("command-reference-doc-examples.txt")
def _(p: Path) -> None:
    # hand-edited docs: Markdown bold around profile names, odd spacing; still readable
    text = body(p)
    e = P.parse_ecnconfig(between(text, "admin@sonic:~$ show ecn", "```"))
    assert set(e.profiles) == {"AZURE_LOSSLESS", "wredprofileabcd"}
    assert e.profiles["wredprofileabcd"] == {"red_max_threshold": 100}
    pfc = P.parse_pfcstat(between(text, "admin@sonic:~$ show pfc counters", "   ..."))
    assert set(pfc.rx) == set(pfc.tx) == {"Ethernet0", "Ethernet4", "Ethernet8", "Ethernet12"}
    w = P.parse_wredcounters(between(text, "admin@sonic:~$ show queue wredcounters"))
    assert len(w.rows) == 17 and w.get("Ethernet0", "MC6").values["EcnMarked/bytes"] == 0


@check("show-buffer_pool-watermark.txt")
def _(p: Path) -> None:
    w = P.parse_watermark(body(p))
    assert w.tables["Shared pool maximum occupancy:"]["egress_lossy_pool"] == {"Bytes": 2000}


@check("show-headroom-pool-watermark.txt")
def _(p: Path) -> None:
    assert P.parse_watermark(body(p)).merged()["ingress_lossless_pool"]["Bytes"] == 432640


@check("show-priority-group-watermark-headroom.txt")
def _(p: Path) -> None:
    assert P.parse_watermark(body(p)).merged()["Ethernet4"]["PG3"] == 403


@check("show-priority-group-watermark-shared.txt")
def _(p: Path) -> None:
    w = P.parse_watermark(body(p))
    assert w.merged()["Ethernet8"]["PG7"] == 807
    assert list(w.tables) == ["Ingress shared pool occupancy per PG:"] and len(w.merged()) == 3


@check("show-priority-group-watermark-shared-json.txt")
def _(p: Path) -> None:
    js = P.parse_watermark(body(p)).merged()
    assert (
        js
        == P.parse_watermark(
            body(p.with_name("show-priority-group-watermark-shared.txt"))
        ).merged()
    )


@check("show-priority-group-watermark-shared-multi-asic.txt")
def _(p: Path) -> None:
    w = P.parse_watermark(body(p))
    assert len(w.tables) == 2 and w.merged()["Ethernet-BP260"]["PG15"] == 215
    assert (
        w.tables["Ingress shared pool occupancy per PG: (Namespace asic0)"]["Ethernet4"]["PG10"]
        == 210
    )


@check("show-queue-watermark-all.txt")
def _(p: Path) -> None:
    assert P.parse_watermark(body(p)).merged()["Ethernet0"]["ALL21"] == 7654321


@check("show-queue-watermark-unicast.txt")
def _(p: Path) -> None:
    assert P.parse_watermark(body(p)).merged()["Ethernet0"]["UC0"] == 2057328


# ------------------------------------------------------------------------------ Cumulus NVUE


def nv_blocks(text: str) -> dict[str, str]:
    """``nv show`` command -> its output, from a docs page with prompts and annotations."""
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for ln in text.split("\n"):
        m = re.match(r"^cumulus@switch[^$]*\$ (.*?)\s*$", ln)
        if m:
            cur = out.setdefault(m.group(1), []) if m.group(1).startswith("nv show") else None
            continue
        if ln.startswith("## ["):
            cur = None
        elif cur is not None:
            cur.append(ln)
    return {k: "\n".join(v) for k, v in out.items()}


@check("nvue-ecn-pfc-pfcwd-set-and-show-cl512-doc.txt")
def _(p: Path) -> None:
    b = nv_blocks(body(p))
    assert len(b) == 5
    pfc = P.parse_nvue(b["nv show qos pfc default-global"])
    assert pfc.values["cable-length"].as_int() == 50
    assert pfc.values["xoff-threshold"].as_int() == 10000 and pfc.values["tx"].value == "enable"
    assert pfc.values["[switch-priority]"].applied == "0"
    cc = P.parse_nvue(b["nv show qos congestion-control default-global"])
    assert cc.ecn_profiles()[7] == {
        "ecn": True,
        "red": True,
        "min_threshold_bytes": 40000,
        "max_threshold_bytes": 200000,
        "probability": 100,
    }
    tc4 = P.parse_nvue(b["nv show qos congestion-control default-global traffic-class 4"])
    assert tc4.values["min-threshold"].as_int() == 40000
    wd = P.parse_nvue(b["nv show interface swp1 qos pfc-watchdog"])
    assert wd.tables["PFC WD Status"][7] == {
        "traffic-class": "7",
        "status": "DEADLOCK",
        "deadlock-count": "3",
    }
    assert wd.values["state"].operational == "enabled"


@check("nvue-roce-show-qos-roce-and-counters-cl512-doc.txt")
def _(p: Path) -> None:
    b = nv_blocks(body(p))
    roce = P.parse_nvue(b["nv show qos roce"])
    # 150000 B and 1501500 B printed as binary KB/MB (Cumulus defaults, INDEX.md 3.3)
    assert roce.values["congestion-control.min-threshold"].as_int() == 149996
    assert roce.values["congestion-control.max-threshold"].as_int() == round(1.43 * 1024**2)
    assert roce.values["lldp-app-tlv.protocol-id"].as_int() == 4791
    assert roce.values["enable"].operational is None and roce.values["enable"].applied == "on"
    assert roce.tables["RoCE SP->TC mapping and ETS configurations"][6]["scheduler-weight"] == (
        "strict-priority"
    )
    assert roce.tables["Exception List"] == []
    st = P.parse_nvue(b["nv show interface swp16 qos roce status"])
    assert st.values["congestion-control.congestion-mode"].value == "ecn, absolute"
    assert st.values["mode"].value == "lossless"
    assert st.tables["RoCE Pool Status"][1]["current-usage"] == "7.30 MB"
    cnt = P.parse_nvue(b["nv show interface swp16 qos roce counters"])
    assert cnt.to_counters()["ecn_marked_pkts"] == 693777677344
    n = cnt.numbers()
    assert n["tx-stats.tx-roce-stats.unicast-no-buffer-discard"] == 663060754115
    assert n["tx-stats.tx-roce-stats.roce-bytes"] == round(92824.38 * 1024**3)
    assert n["rx-stats.rx-non-roce-stats.no-buffer-discard"] == 55


@check("nvue-show-interface-counters-qos-doc.txt")
def _(p: Path) -> None:
    text = between(body(p), "nv show interface swp1 counters qos", "...")
    r = P.parse_nvue(text)
    assert len(r.tables) == 4 and len(r.tables["PFC Statistics"]) == 8
    c = r.to_counters()
    assert c["pfc3_rx_pkts"] == 0 and c["queue3_wred_drop_pkts"] == 0
    assert c["ecn_marked_pkts"] == 0
    assert r.tables["Qos Port Statistics"][2] == {
        "Counter": "pause-frames",
        "Receive": "0",
        "Transmit": "0",
    }
    with pytest.raises(ParseError, match="too few cells"):
        P.parse_nvue(between(body(p), "nv show interface swp1 counters qos"))


@check("netq-ethtool-stats-swp-pfc-counter-names-doc.txt")
def _(p: Path) -> None:
    # NetQ's table of Cumulus `ethtool -S swpN` names; the one complete record row
    text = between(body(p), "show ethtool-stats port swp50", "cumulus@switch")
    header, _, row = [ln for ln in text.split("\n") if ln.strip()][1:4]
    cols = dict(zip(header.split()[2:10], row.split()[2:10], strict=True))
    assert cols["HwIfInPfc3Pkt"] == "0" and len(cols) == 8


# ------------------------------------------------------------------------------ the walk


def test_every_reference_sample_has_a_parser_check() -> None:
    root = reference_dir()
    names = {p.name for p in sample_files(root)}
    assert names, "no samples found"
    missing = sorted(names - set(CHECKS))
    assert not missing, f"reference samples without a parser check: {missing}"
    stale = sorted(set(CHECKS) - names)
    assert not stale, f"checks for samples that no longer exist: {stale}"


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_reference_sample(name: str) -> None:
    root = reference_dir()
    matches = [p for p in sample_files(root) if p.name == name]
    assert matches, f"{name} not in the reference samples at {root}"
    path = matches[0]
    CHECKS[name](path)


def test_truncated_samples_need_allow_truncated() -> None:
    """Every sample whose excerpt was cut is refused by default where a parser applies."""
    root = reference_dir()
    strict = {
        "allreduce-tree-8gpu-pcie-nccl-issue1530.txt": P.parse_nccl_tests,
        "alltoall-8gpu-h20-issue314.txt": P.parse_nccl_tests,
        "reduce-scatter-zero-size-rows-issue128.txt": P.parse_nccl_tests,
        "very-old-format-no-group-issue107.txt": P.parse_nccl_tests,
        "markdown-stripped-hash-efa-issue249.txt": P.parse_nccl_tests,
        "ib_write_lat-roce-mlx4-sweep-rdma-tutorial-issue8.txt": P.parse_perftest,
    }
    for name, fn in strict.items():
        path = next(p for p in sample_files(root) if p.name == name)
        assert is_truncated(path), name
        with pytest.raises(ParseError, match=r"line \d+"):
            fn(body(path))
