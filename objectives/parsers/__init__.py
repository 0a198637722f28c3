"""Parsers of real tool output: pure ``parse_<tool>(text) -> model`` functions.

Each raises :class:`tuner.errors.ParseError` quoting the offending line (and its number) on
input it cannot account for. Formats and their variants are described in docs/parsers.md;
fixtures are the real samples in ``shared/reference/``.
"""

from __future__ import annotations

from objectives.parsers._ethtool import (
    EthtoolInfo,
    EthtoolStats,
    parse_ethtool_info,
    parse_ethtool_stats,
)
from objectives.parsers._mlnx_qos import MlnxQos, TrafficClass, parse_mlnx_qos
from objectives.parsers._mlxconfig import (
    MlxconfigDevice,
    MlxconfigQuery,
    MlxconfigValue,
    parse_mlxconfig_query,
)
from objectives.parsers._nccl import (
    NcclDebugLog,
    NcclDevice,
    NcclHalf,
    NcclRow,
    NcclTestsResult,
    parse_nccl_debug,
    parse_nccl_tests,
)
from objectives.parsers._nvue import NvueShow, NvueValue, parse_nvue, to_number
from objectives.parsers._perftest import (
    BandwidthRow,
    LatencyRow,
    PerftestBanner,
    PerftestResult,
    PerftestRun,
    parse_perftest,
)
from objectives.parsers._rdma import HwCounters, parse_hw_counters
from objectives.parsers._sonic import (
    EcnConfig,
    PfcCounters,
    PfcwdConfig,
    PfcwdStats,
    QueueCounters,
    Watermarks,
    parse_ecnconfig,
    parse_pfcstat,
    parse_pfcwd_config,
    parse_pfcwd_stats,
    parse_queue_counters,
    parse_watermark,
    parse_wredcounters,
)

__all__ = [
    "BandwidthRow",
    "EcnConfig",
    "EthtoolInfo",
    "EthtoolStats",
    "HwCounters",
    "LatencyRow",
    "MlnxQos",
    "MlxconfigDevice",
    "MlxconfigQuery",
    "MlxconfigValue",
    "NcclDebugLog",
    "NcclDevice",
    "NcclHalf",
    "NcclRow",
    "NcclTestsResult",
    "NvueShow",
    "NvueValue",
    "PerftestBanner",
    "PerftestResult",
    "PerftestRun",
    "PfcCounters",
    "PfcwdConfig",
    "PfcwdStats",
    "QueueCounters",
    "TrafficClass",
    "Watermarks",
    "parse_ecnconfig",
    "parse_ethtool_info",
    "parse_ethtool_stats",
    "parse_hw_counters",
    "parse_mlnx_qos",
    "parse_mlxconfig_query",
    "parse_nccl_debug",
    "parse_nccl_tests",
    "parse_nvue",
    "parse_perftest",
    "parse_pfcstat",
    "parse_pfcwd_config",
    "parse_pfcwd_stats",
    "parse_queue_counters",
    "parse_watermark",
    "parse_wredcounters",
    "to_number",
]
