# ecntune emulated cluster: sourced by every non-interactive bash of an SSH session (BASH_ENV).
# A sysfs/debugfs knob listed in $ECNTUNE_EMU_ROOT/$ECNTUNE_EMU_NAME/refused_writes rejects
# writes the way the firmware does: `echo 5 > knob` fails with "write error: <errno text>",
# exit status 1, and the file keeps its value. The redirection has already truncated the file
# when the builtin runs, so the hook writes the saved value back.
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
