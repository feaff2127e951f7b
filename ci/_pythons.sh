# Sourced by ci/build_wheels.sh and ci/test_wheel.sh (not a CI step itself):
# which CPython interpreters to build and test wheels for.
#
#   ci_pythons    prints one interpreter path a line, oldest first:
#                 $PYTHON alone if set (one interpreter, as before);
#                 else the words of $PYTHONS if set;
#                 else, from pyenv (`pyenv root`, or $PYENV_ROOT, or ~/.pyenv),
#                 the newest CPython 3.X.Y for each 3.X >= 3.9;
#                 else python3.
#   py_tag PY     prints PY's wheel tag, e.g. cp311.

ci_pythons() {
    if [ -n "${PYTHON:-}" ]; then
        echo "$PYTHON"
        return
    fi
    if [ -n "${PYTHONS:-}" ]; then
        printf '%s\n' $PYTHONS
        return
    fi
    local root=""
    if command -v pyenv >/dev/null 2>&1; then
        root="$(pyenv root)"
    elif [ -d "${PYENV_ROOT:-$HOME/.pyenv}/versions" ]; then
        root="${PYENV_ROOT:-$HOME/.pyenv}"
    fi
    local found=""
    if [ -n "$root" ] && [ -d "$root/versions" ]; then
        # Plain CPython releases only (3.X.Y: not pypy-*, not 3.13t, not venvs),
        # minor >= 9; the last of each minor in version order is the newest.
        found="$(
            for dir in "$root"/versions/3.*.*; do
                v="$(basename "$dir")"
                [[ "$v" =~ ^3\.([0-9]+)\.([0-9]+)$ ]] || continue
                minor="${BASH_REMATCH[1]}"
                [ "$minor" -ge 9 ] || continue
                py="$dir/bin/python3.$minor"
                [ -x "$py" ] || continue
                echo "$minor ${BASH_REMATCH[2]} $py"
            done | sort -k1,1n -k2,2n | awk '{last[$1] = $3} END {for (m in last) print m, last[m]}' \
                 | sort -k1,1n | cut -d' ' -f2-
        )"
    fi
    if [ -n "$found" ]; then
        echo "$found"
    else
        echo python3
    fi
}

py_tag() {
    "$1" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'
}
