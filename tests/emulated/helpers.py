"""Run commands on emulated targets over real SSH (paramiko, host keys verified)."""

from __future__ import annotations

import paramiko

from tuner.emulated import EmulatedCluster


def connect(emu: EmulatedCluster, target: str, timeout: float = 5.0) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(emu.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(emu.targets[target].address, port=emu.port, username="root",
                   key_filename=str(emu.client_key), timeout=timeout, allow_agent=False,
                   look_for_keys=False)
    return client


def run(emu: EmulatedCluster, target: str, command: str, timeout: float = 180.0
        ) -> tuple[int, str, str]:
    client = connect(emu, target)
    try:
        _, stdout, stderr = client.exec_command(command, timeout=timeout)
        out = stdout.read().decode()
        err = stderr.read().decode()
        return stdout.channel.recv_exit_status(), out, err
    finally:
        client.close()
