"""Garbage and truncated inputs are refused with a ParseError naming and quoting the line."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from objectives import parsers as P
from tuner.errors import ParseError

NCCL_HEAD = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501 (real nccl-tests header lines)
NCCL_ROW8 = (
    "           8             2     float     sum      -1    135.8    0.00    0.00      0"
    "    123.5    0.00    0.00      0\n"
)
NCCL_FOOT = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00 \n"

PERF_LAT = """\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]
 2       1000          1.24           5.19         1.27     \t       1.27        \t0.00   \t\t1.37    \t\t5.19
---------------------------------------------------------------------------------------
"""  # noqa: E501 (real perftest lines)

PFC_HEAD = """\
  Port Rx    PFC0    PFC1    PFC2    PFC3    PFC4    PFC5    PFC6    PFC7
---------  ------  ------  ------  ------  ------  ------  ------  ------
"""

CASES: list[tuple[str, Callable[..., Any], str, int, str]] = [
    # (id, parser, input, line number, quoted text)
    ("nccl-prose", P.parse_nccl_tests, "hello world\nthis is not nccl\n", 1, "hello world"),
    ("nccl-empty", P.parse_nccl_tests, "", 1, "input is empty"),
    (
        "nccl-row-cut-mid-table",
        P.parse_nccl_tests,
        NCCL_HEAD + "           8             2     float     sum\n" + NCCL_ROW8 + NCCL_FOOT,
        6,
        "8             2     float     sum",
    ),
    (
        "nccl-letters-in-busbw",
        P.parse_nccl_tests,
        NCCL_HEAD + NCCL_ROW8.replace("0.00      0\n", "abc      0\n") + NCCL_FOOT,
        6,
        "abc",
    ),
    (
        "nccl-no-footer",
        P.parse_nccl_tests,
        NCCL_HEAD + NCCL_ROW8,
        6,
        "135.8",
    ),
    (
        "nccl-junk-inside-table",
        P.parse_nccl_tests,
        NCCL_HEAD + NCCL_ROW8 + "Segmentation fault (core dumped)\n" + NCCL_FOOT,
        7,
        "Segmentation fault",
    ),
    (
        "nccl-fractional-wrong",
        P.parse_nccl_tests,
        NCCL_HEAD + NCCL_ROW8.replace("0.00      0\n", "0.00    0.5\n") + NCCL_FOOT,
        6,
        "0.5",
    ),
    (
        "nccl-row-before-header",
        P.parse_nccl_tests,
        NCCL_ROW8 + NCCL_FOOT,
        1,
        "135.8",
    ),
    ("perftest-prose", P.parse_perftest, "Segmentation fault\n", 1, "Segmentation fault"),
    (
        "perftest-lat-row-cut",
        P.parse_perftest,
        PERF_LAT.replace("\t\t5.19\n", "\n"),
        2,
        "1.24",
    ),
    (
        "perftest-junk-in-table",
        P.parse_perftest,
        PERF_LAT.replace(" 2       1000", "ibv_post_send failed\n 2       1000"),
        2,
        "ibv_post_send failed",
    ),
    (
        "perftest-header-without-row",
        P.parse_perftest,
        PERF_LAT.split("\n")[0] + "\n" + "-" * 87 + "\n",
        1,
        "#bytes",
    ),
    (
        "perftest-unknown-unit",
        P.parse_perftest,
        " #bytes     #iterations    BW peak[KB/sec]    BW average[KB/sec]   MsgRate[Mpps]\n",
        1,
        "KB/sec",
    ),
    (
        "ethtool-value-not-int",
        P.parse_ethtool_stats,
        "NIC statistics:\n     rx_packets: 12\n     tx_packets: lots\n",
        3,
        "tx_packets: lots",
    ),
    ("ethtool-cut-last-line", P.parse_ethtool_stats, "     rx_packets: 12\n     tx\n", 2, "tx"),
    ("ethtool-only-header", P.parse_ethtool_stats, "NIC statistics:\n", 1, "NIC statistics"),
    ("ethtool-info-prose", P.parse_ethtool_info, "Cannot get driver information\n", 1, "Cannot"),
    (
        "hwcounters-value-missing",
        P.parse_hw_counters,
        "link mlx5_0/1 rx_write_requests 0 np_cnp_sent\n",
        1,
        "np_cnp_sent",
    ),
    (
        "hwcounters-value-not-int",
        P.parse_hw_counters,
        "link mlx5_0/1 rx_write_requests 0\nnp_cnp_sent x12\n",
        2,
        "x12",
    ),
    ("hwcounters-ls-listing", P.parse_hw_counters, "np_cnp_sent\nrp_cnp_handled\n", 1, "np_cnp"),
    ("hwcounters-bad-json", P.parse_hw_counters, '[{"ifname": "mlx5_0",\n  oops}]', 2, "oops"),
    (
        "mlnx-qos-pfc-seven-prios",
        P.parse_mlnx_qos,
        "PFC configuration:\n\tpriority    0   1   2   3   4   5   6\n",
        2,
        "priority",
    ),
    ("mlnx-qos-prose", P.parse_mlnx_qos, "DCBX mode: OS controlled\nfoo bar\n", 2, "foo bar"),
    ("mlxconfig-prose", P.parse_mlxconfig_query, "-E- Failed to open device\n", 1, "-E-"),
    (
        "pfcstat-row-cut",
        P.parse_pfcstat,
        PFC_HEAD + "Ethernet0       0       0\nEthernet4       0       0       0       0       0"
        "       0       0       0\n",
        3,
        "Ethernet0       0       0",
    ),
    (
        "pfcstat-letters",
        P.parse_pfcstat,
        PFC_HEAD + "Ethernet0       0       x       0       0       0       0       0       0\n",
        3,
        "x",
    ),
    ("pfcstat-prose", P.parse_pfcstat, "Error: counters DB not ready\n", 1, "counters DB"),
    (
        "ecnconfig-unclosed-profile",
        P.parse_ecnconfig,
        "Profile: AZURE_LOSSLESS\n-----------------------  -------\n"
        "red_max_threshold        2097152\n",
        3,
        "red_max_threshold        2097152",
    ),
    (
        "ecnconfig-three-cells",
        P.parse_ecnconfig,
        "Profile: P\n------  --\nred_max_threshold 1 2\n------  --\n",
        3,
        "red_max_threshold 1 2",
    ),
    (
        "ecnconfig-total-mismatch",
        P.parse_ecnconfig,
        "Profile: P\n------  --\necn  ecn_all\n------  --\n\nTotal profiles: 2\n",
        6,
        "Total profiles: 2",
    ),
    (
        "queuecounters-bad-queue",
        P.parse_queue_counters,
        "     Port    TxQ    Counter/pkts    Counter/bytes    Drop/pkts    Drop/bytes\n"
        "---------  -----  --------------  ---------------  -----------  ------------\n"
        "Ethernet0    XX0               0                0            0             0\n",
        3,
        "XX0",
    ),
    ("queuecounters-bad-json", P.parse_queue_counters, '{\n  "Ethernet0": [1, 2]\n}', 1, "{"),
    (
        "pfcwd-stats-not-a-pair",
        P.parse_pfcwd_stats,
        "      QUEUE       STATUS    STORM DETECTED/RESTORED    TX OK/DROP    RX OK/DROP"
        "    TX LAST OK/DROP    RX LAST OK/DROP\n"
        "-----------  -----------  -------------------------  ------------  ------------"
        "  -----------------  -----------------\n"
        "Ethernet0:3      stormed                        1/0       100/300       100/300"
        "              0/200                200\n",
        3,
        "Ethernet0:3",
    ),
    (
        "pfcwd-config-bad-time",
        P.parse_pfcwd_config,
        "     PORT    ACTION    DETECTION TIME    RESTORATION TIME\n"
        "---------  --------  ----------------  ------------------\n"
        "Ethernet0      drop              fast                 200\n",
        3,
        "fast",
    ),
    ("watermark-prose", P.parse_watermark, "Object map is empty!\n", 1, "Object map"),
    ("watermark-json-row-without-port", P.parse_watermark, '[{"PG0": "1"}]', 1, "PG0"),
    ("nvue-json-null", P.parse_nvue, "null\n", 1, "null"),
    ("nvue-prose", P.parse_nvue, "Error: Invalid command\n", 1, "Invalid command"),
    (
        "nvue-title-without-table",
        P.parse_nvue,
        "PFC Statistics\n=================\nsomething else\n",
        3,
        "something else",
    ),
]


@pytest.mark.parametrize(
    ("parser", "text", "lineno", "quoted"),
    [pytest.param(c[1], c[2], c[3], c[4], id=c[0]) for c in CASES],
)
def test_refused_with_line(
    parser: Callable[..., Any], text: str, lineno: int, quoted: str
) -> None:
    with pytest.raises(ParseError) as info:
        parser(text)
    msg = str(info.value)
    assert f"line {lineno}:" in msg, msg
    assert quoted in msg, msg


def test_nonzero_wrong_is_visible() -> None:
    """A run with wrong elements must not look like a good measurement."""
    text = NCCL_HEAD + NCCL_ROW8.replace("0.00      0\n", "0.00     17\n") + NCCL_FOOT
    r = P.parse_nccl_tests(text)
    assert r.wrong_total == 17 and r.failed
    assert r.rows[0].in_place is not None and r.rows[0].in_place.wrong == 17
    results = r.collective_results(name="all_reduce", ranks=2, in_place=True)
    assert results[0].wrong == 17


def test_collective_results_need_a_name_and_ranks() -> None:
    r = P.parse_nccl_tests(NCCL_HEAD + NCCL_ROW8 + NCCL_FOOT)
    with pytest.raises(ParseError, match="name="):
        r.collective_results(ranks=2)
    with pytest.raises(ParseError, match="ranks="):
        r.collective_results(name="all_reduce")
    assert r.collective_results(name="all_reduce", ranks=2)[0].time_us == 135.8


def test_error_message_shape() -> None:
    with pytest.raises(ParseError) as info:
        P.parse_ethtool_stats("     rx_packets: 1\n     tx_packets: many\n")
    assert re.fullmatch(
        r"ethtool -S: line 2: expected 'name: integer': 'tx_packets: many'", str(info.value)
    )
