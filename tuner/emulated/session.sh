#!/bin/sh
# ForceCommand of every emulated target. sshd runs commands through the login shell, and bash
# run by sshd reads ~/.bashrc instead of $BASH_ENV; the nested bash started here is no longer
# "run by sshd" (SHLVL >= 2), so it sources $BASH_ENV (bashenv.sh: the refused-write hook).
SHLVL=${SHLVL:-0}
[ "$SHLVL" -ge 1 ] 2>/dev/null || SHLVL=1
export SHLVL
if [ -n "$SSH_ORIGINAL_COMMAND" ]; then
    exec /bin/bash -c "$SSH_ORIGINAL_COMMAND"
fi
exec /bin/bash --rcfile "$BASH_ENV" -i
