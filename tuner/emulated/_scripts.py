"""Shell scripts every emulated target runs: the sshd ForceCommand and the bash write hook."""

from __future__ import annotations

# ForceCommand of every target: sshd runs commands through the login shell, and bash run by
# sshd reads ~/.bashrc instead of $BASH_ENV; the nested bash started here is no longer "run by
# sshd" (SHLVL >= 2), so it sources $BASH_ENV (the refused-write hook below).
SESSION_SH = """#!/bin/sh
SHLVL=${SHLVL:-0}
[ "$SHLVL" -ge 1 ] 2>/dev/null || SHLVL=1
export SHLVL
if [ -n "$SSH_ORIGINAL_COMMAND" ]; then
    exec /bin/bash -c "$SSH_ORIGINAL_COMMAND"
fi
exec /bin/bash --rcfile "$BASH_ENV" -i
"""
# Sourced by every non-interactive bash of a session (BASH_ENV). A knob listed in
# <root>/<name>/refused_writes rejects writes the way the firmware does: `echo 5 > knob` (or
# printf) fails with "write error: <errno text>", exit status 1, and the file keeps its value.
# The redirection has already truncated the file when the builtin runs, so the hook writes the
# saved value back. Other writers (tee, dd, python) are not intercepted.
BASHENV_SH = r"""# ecntune emulated cluster: refused-write hook (see tuner/emulated/cluster.py)
__ecntune_refused_write() {
    local __builtin=$1 __pid=$2 __list __t __path __value __text
    __list="$ECNTUNE_EMU_ROOT/$ECNTUNE_EMU_NAME/refused_writes"
    [ -s "$__list" ] || return 1
    __t=$(readlink "/proc/$__pid/fd/1" 2>/dev/null) || return 1
    while read -r __path __value __text; do
        if [ "$__t" = "$__path" ]; then
            builtin printf '%s\n' "$__value" >"$__path"
            builtin printf 'bash: line %s: %s: write error: %s\n' \
                "${BASH_LINENO[1]:-1}" "$__builtin" "$__text" >&2
            return 0
        fi
    done <"$__list"
    return 1
}
echo() {
    if __ecntune_refused_write echo "$BASHPID"; then return 1; fi
    builtin echo "$@"
}
printf() {
    if __ecntune_refused_write printf "$BASHPID"; then return 1; fi
    builtin printf "$@"
}
"""
