"""One ``diagnose`` run: read, check bottom-up, save ``diagnosis.json``, log it to MLflow.

Layers in order: physical, host, IP, RDMA (the hosts, over SSH; with the single-QP
``ib_write_bw`` test, ``tuner.diagnose.bw``), fabric (``tuner.diagnose.fabric
.check(exp, cluster)`` when that module exists: the seam for the switch/simulator checks), and
collectives (versions per host; NCCL's algorithm choice against Ring and Tree measured apart,
``tuner.diagnose.nccl``). A host that cannot be read is a finding, not a crash; when no
host and no fabric could be read at all the run "could not check" (exit 3).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from safety.files import write_file
from tuner.diagnose import checks
from tuner.diagnose.finding import LAYERS, Diagnosis, Finding, NotChecked

if TYPE_CHECKING:
    from pathlib import Path

    from tuner.cluster.base import Cluster
    from tuner.diagnose.collect import HostRead
    from tuner.diagnose.switch import SwitchRead
    from tuner.experiment import Experiment

HOST_LAYERS = ("physical", "host", "ip", "rdma")


def unreachable(name: str, entry: Any, error: str, kind: str) -> Finding:
    return Finding(layer="physical", check="reachable", where=name,
                   evidence=f"ssh {entry.address}:{entry.port}: {error}",
                   cause=f"the {kind} did not answer over SSH: down, unreachable, or a wrong "
                         "address/key in the inventory",
                   action=f"bring the {kind} back or fix its inventory entry, then re-run")


def host_rows(reads: list[HostRead], roce_dscp: int) -> tuple[list[Finding | NotChecked],
                                                              dict[str, dict[str, str]]]:
    """Every host check on what the hosts answered (pure)."""
    rows: list[Finding | NotChecked] = []
    live = [r for r in reads if r.error is None]
    rows += [unreachable(r.name, r.entry, r.error, "host") for r in reads if r.error is not None]
    mtus = {r.name: r.facts.get("mtu") for r in live}
    if any(r.load_error for r in live):
        rows.append(NotChecked(layer="physical", check="crc_under_load", where="canary",
                               reason=next(r.load_error for r in live if r.load_error)))
    for r in live:
        for _, check in checks.PER_HOST:
            rows += check(r)
        rows += checks.mtu_path(r, mtus)
        rows += checks.cma_tos(r, roce_dscp)
    table, drift = checks.versions(live)
    rows += drift
    rows.append(NotChecked(layer="collectives", check="nccl_version", where="canary",
                           reason="not read per host: nccl-tests prints rank 0's library "
                                  "only (the NCCL table)"))
    return rows, table


def fabric_rows(exp: Experiment, cluster: Cluster) -> list[Finding | NotChecked]:
    """The fabric layer's rows (``tuner.diagnose.fabric``)."""
    from tuner.diagnose.fabric import check

    findings, not_checked = check(cluster, exp)
    return [*findings, *not_checked]


def switch_rows(reads: list[SwitchRead], inv: Any
                ) -> tuple[list[Finding | NotChecked], dict[str, dict[str, str]]]:
    """The switch side of the physical layer and the switch OS (``tuner.diagnose.switch``);
    a canary port should run at the slowest canary host's NIC speed at least."""
    from tuner.diagnose import switch

    want = int(min((r.nic_gbps for h in inv.hosts for r in h.rail_entries()), default=0) * 1000)
    rows: list[Finding | NotChecked] = []
    for r in reads:
        if r.error is not None:
            rows.append(unreachable(r.name, r.entry, r.error, "switch"))
            continue
        rows += switch.port_rows(r, want)
    found, table = switch.os_rows(reads)
    return rows + found, table


def bw_rows(cluster: Any, reads: list[HostRead], bw_s: int) -> list[Finding | NotChecked]:
    """The single-QP bandwidth test among the hosts that answered (``tuner.diagnose.bw``)."""
    from tuner.diagnose import bw

    live = [r.name for r in reads if r.error is None]
    if bw_s <= 0 or len(live) < 2:
        why = "skipped (--bw-s 0)" if bw_s <= 0 else "needs two reachable hosts"
        return [NotChecked(layer="rdma", check=bw.CHECK, where="canary", reason=why)]
    return bw.rows(bw.measure(cluster, live, bw_s))


def nccl_rows(cluster: Any, exp: Experiment, reads: list[HostRead], collectives: bool
              ) -> tuple[list[Finding | NotChecked], dict[str, dict[str, str]]]:
    """NCCL's algorithm choice against Ring and Tree measured apart (``tuner.diagnose.nccl``)."""
    from tuner.diagnose import nccl

    live = [r for r in reads if r.error is None]
    if not collectives or len(live) < len(reads) or len(live) < 2:
        why = ("skipped (--no-collectives)" if not collectives
               else "needs every canary host reachable")
        return [NotChecked(layer="collectives", check=nccl.CHECK, where="canary",
                           reason=why)], {}
    runs = nccl.measure(cluster, exp.workload)
    return nccl.rows(runs), nccl.table(runs)


def diagnose(exp: Experiment, cluster: Cluster, sample_s: float = 2.0, load: bool = False,
             bw_s: int = 2, collectives: bool = True) -> tuple[Diagnosis, bool]:
    """Run every check; returns the diagnosis and whether anything could be checked at all."""
    from tuner.cli.preflight import spec_of

    backend = cluster.describe().backend
    rows: list[Finding | NotChecked] = []
    table: dict[str, dict[str, str]] = {}
    switch_table: dict[str, dict[str, str]] = {}
    nccl_table: dict[str, dict[str, str]] = {}
    checked = False
    if backend == "ssh":
        from tuner.diagnose.collect import read_hosts

        inner: Any = getattr(cluster, "inner", cluster)  # tuner.cluster.ssh.SshCluster
        reads, sreads = read_hosts(inner, sample_s, load=load)
        checked = any(r.error is None for r in reads)
        found, table = host_rows(reads, spec_of(exp).roce_dscp)
        rows += found
        rows += bw_rows(inner, reads, bw_s)
        sw_found, switch_table = switch_rows(sreads, inner.inventory)
        rows += sw_found
        found, nccl_table = nccl_rows(inner, exp, reads, collectives)
        rows += found
    else:
        rows += [NotChecked(layer=layer, check="hosts", where=backend,  # type: ignore[arg-type]
                            reason=f"the {backend} backend has no hosts to read over SSH")
                 for layer in HOST_LAYERS]
        rows.append(NotChecked(layer="collectives", check="nccl_algo", where=backend,
                               reason=f"the {backend} backend runs the algorithm the workload "
                                      "names (algo); NCCL's own choice is not modelled"))
    rows += fabric_rows(exp, cluster)
    checked = checked or backend == "sim"  # the fabric stress ran on the simulated canary
    order = {layer: i for i, layer in enumerate(LAYERS)}
    rows.sort(key=lambda x: order[x.layer])  # stable: bottom-up, hosts in inventory order
    ran = sorted({x.check for x in rows})
    return Diagnosis(backend=backend, findings=[x for x in rows if isinstance(x, Finding)],
                     not_checked=[x for x in rows if isinstance(x, NotChecked)],
                     checks_run=ran, versions=table, switch_versions=switch_table,
                     nccl=nccl_table), checked


def save(exp: Experiment, diag: Diagnosis) -> Path:
    """``<results_dir>/diagnosis.json``; logged to MLflow as a ``diagnose`` run when tracking is
    on (a tracking failure is a warning, never the command's failure)."""
    from tuner.tracking import Tracker

    out = write_file(exp.results_path / "diagnosis.json",
                     json.dumps(diag.model_dump(), indent=2) + "\n")
    if exp.tracking.enabled:
        tracker = Tracker(exp.tracking_uri, exp.tracking_experiment,
                          exp.results_path / "mlartifacts")
        tags = {"ecntune.backend": diag.backend,
                "ecntune.diagnose.checks": ",".join(sorted({f.check for f in diag.findings}))}
        tracker.log_run("diagnose", "diagnose", tags, metrics_of(diag), [out])
    return out


def metrics_of(diag: Diagnosis) -> dict[str, float]:
    m: dict[str, Any] = {"diagnose_findings": len(diag.findings),
                         "diagnose_dominant": len(diag.dominant),
                         "diagnose_not_checked": len(diag.not_checked)}
    for layer in LAYERS:
        m[f"diagnose_findings_{layer}"] = sum(f.layer == layer for f in diag.findings)
    return {k: float(v) for k, v in m.items()}
