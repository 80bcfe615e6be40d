#!/usr/bin/env bash
# Build the tierwise ns-3 validation program against Debian's libns3-dev (ns-3
# 3.37) and run the issue-4 scenarios.  One JSON object per run on stdout;
# progress and compiler output on stderr.
#
#   bash benchmarks/ns3/run.sh            # build + every scenario set below
#   bash benchmarks/ns3/run.sh build      # build only; prints the binary path
#   bash benchmarks/ns3/run.sh matrix     # 3 CCs x {0, 1, 14 %} loss, queue 100000 p
#   bash benchmarks/ns3/run.sh bdp        # same matrix with a 1-BDP queue (205 p)
#   bash benchmarks/ns3/run.sh reqresp    # the reference's §12.3.2 request/response
#   bash benchmarks/ns3/run.sh one --cc=Cubic --loss=0.01 ...   # any flags
#
# Environment:
#   TIERWISE_NS3_BUILD_DIR  where the binary goes (default: benchmarks/ns3/build)
#   SEEDS                   RngRun values for the lossy runs (default: "1")
#   INSTRUMENT              1 (default) = per-packet stats; 0 = counters only
#   CXX                     compiler (default g++)
#
# Needs: apt-get update && apt-get install -y libns3-dev g++ pkg-config
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/tierwise_ns3.cc"
BUILD_DIR="${TIERWISE_NS3_BUILD_DIR:-$HERE/build}"
CXX="${CXX:-g++}"
MODULES="ns3-core ns3-network ns3-internet ns3-point-to-point ns3-applications ns3-traffic-control"
SEEDS="${SEEDS:-1}"
INSTRUMENT="${INSTRUMENT:-1}"

die() {
    echo "run.sh: $*" >&2
    exit 1
}

check_tools() {
    command -v "$CXX" >/dev/null 2>&1 || die "no C++ compiler ($CXX); apt-get install -y g++"
    command -v pkg-config >/dev/null 2>&1 || die "no pkg-config; apt-get install -y pkg-config"
    # shellcheck disable=SC2086
    pkg-config --exists $MODULES ||
        die "ns-3 pkg-config modules missing; apt-get update && apt-get install -y libns3-dev"
}

# Debian's ns3-*.pc files carry two blemishes: a stray "-I/usr;" in Cflags and
# absolute paths to libgsl.so / libgslcblas.so, which exist only with
# libgsl-dev.  Keep -I dirs that exist and absolute libraries that exist (the
# ns-3 shared libraries already link libgsl.so.27 themselves).
ns3_flags() {
    local tok out=() seen=" "
    # shellcheck disable=SC2086
    for tok in $(pkg-config --cflags --libs $MODULES); do
        case "$tok" in
        -I*) [ -d "${tok#-I}" ] || continue ;;
        /*) [ -e "$tok" ] || continue ;;
        esac
        case "$seen" in *" $tok "*) continue ;; esac
        seen="$seen$tok "
        out+=("$tok")
    done
    echo "${out[@]}"
}

build() {
    check_tools
    local flags key bin tmp
    flags="-std=c++17 -O2 $(ns3_flags)"
    key="$({
        cat "$SRC"
        echo "$CXX $flags"
        "$CXX" --version | head -n1
        pkg-config --modversion ns3-core
    } | sha256sum | cut -c1-16)"
    bin="$BUILD_DIR/tierwise_ns3-$key"
    if [ ! -x "$bin" ]; then
        mkdir -p "$BUILD_DIR"
        tmp="$bin.tmp.$$"
        echo "run.sh: compiling $SRC (ns-3 $(pkg-config --modversion ns3-core))" >&2
        # shellcheck disable=SC2086
        "$CXX" "$SRC" -o "$tmp" $flags >&2 || {
            rm -f "$tmp"
            die "compilation failed"
        }
        mv -f "$tmp" "$bin"
    fi
    echo "$bin"
}

run_one() {
    local bin="$1"
    shift
    echo "run.sh: ns-3 $*" >&2
    "$bin" --instrument="$INSTRUMENT" "$@"
}

matrix() {
    local bin="$1" queue="$2" cc loss seed
    for cc in NewReno Cubic Bbr; do
        for loss in 0 0.01 0.14; do
            if [ "$loss" = 0 ]; then
                run_one "$bin" --cc="$cc" --loss="$loss" --seed=1 --queue="$queue"
            else
                for seed in $SEEDS; do
                    run_one "$bin" --cc="$cc" --loss="$loss" --seed="$seed" --queue="$queue"
                done
            fi
        done
    done
}

reqresp() {
    local bin="$1"
    # ns-3 headers as they are (1222 B per data packet on the wire) ...
    run_one "$bin" --mode=reqresp --cc=NewReno --rate=20Mbps --rateDown=100Mbps \
        --size=30000000 --resp=5000000 --proc=0.3
    # ... and padded by 6 bytes of airtime per packet, so a data packet costs
    # the reference's 1168 + 60 = 1228 bytes.
    run_one "$bin" --mode=reqresp --cc=NewReno --rate=20Mbps --rateDown=100Mbps \
        --size=30000000 --resp=5000000 --proc=0.3 --padBytes=6
}

cmd="${1:-all}"
[ $# -gt 0 ] && shift
case "$cmd" in
build) build ;;
matrix) matrix "$(build)" 100000 ;;
bdp) matrix "$(build)" 205 ;;
reqresp) reqresp "$(build)" ;;
one) run_one "$(build)" "$@" ;;
all)
    bin="$(build)"
    matrix "$bin" 100000
    matrix "$bin" 205
    reqresp "$bin"
    ;;
*) die "unknown command '$cmd' (build | matrix | bdp | reqresp | one ARGS | all)" ;;
esac
