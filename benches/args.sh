# Sourced by the shell benchmarks (benches/gpu/*.sh): their settings, paths
# first, as arguments. `--name VALUE` (or `--name=VALUE`) sets the variable
# NAME the script reads (`--segpredict target/release/segpredict` sets
# SEGPREDICT, `--out out/gap` OUT, `--work /tmp/gap` WORK, `--rows 200000`
# ROWS); the same variables from the environment still work. `--help` prints
# the script's header and the names it takes.
#
#   . "$(dirname "$0")/../args.sh"; bench_args "SEGPREDICT OUT WORK ROWS" "$@"
bench_args() {
    local allowed=" $1 " name value var
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            -h|--help)
                sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
                echo "arguments: $(for v in $allowed; do printf -- '--%s ' "$(echo "$v" | tr 'A-Z_' 'a-z-')"; done)"
                exit 0 ;;
            --*=*) name=${1%%=*}; value=${1#*=}; shift ;;
            --*)
                if [ $# -lt 2 ]; then echo "$0: $1 needs a value" >&2; exit 2; fi
                name=$1; value=$2; shift 2 ;;
            *) echo "$0: unexpected argument '$1' (--help lists the arguments)" >&2; exit 2 ;;
        esac
        var=$(echo "${name#--}" | tr 'a-z-' 'A-Z_')
        case $allowed in
            *" $var "*) export "$var=$value" ;;
            *) echo "$0: unknown argument $name (--help lists the arguments)" >&2; exit 2 ;;
        esac
    done
}
