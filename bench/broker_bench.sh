#!/usr/bin/env bash
# tidelog beside its peers, through ../shared/bench (the same confluent-kafka client for tidelog and Tansu).
#
#   bash bench/broker_bench.sh [--size 100] [--n 1000000] [--runs 2] [--peers tansu-mem,redis-aof]
#
# Runs tidelog four ways (acks=1 / acks=all, 1 / 8 partitions) plus the named peers in one harness run,
# so ratios come from one run. Needs ../shared/bench (the peer harness); results land in
# /tmp/peerbench/results (see that harness's README), with a table printed at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
harness="${PEERBENCH_HARNESS:-$here/../shared/bench}"
[ -d "$harness" ] || { echo "broker_bench: no peer harness at $harness (set PEERBENCH_HARNESS)" >&2; exit 2; }
"$here/scripts/setup.sh" run >/dev/null

size=100 n=1000000 runs=2 peers=tansu-mem
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --n) n="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    *) echo "broker_bench: unknown option $1" >&2; exit 2 ;;
  esac
done

cmd="$here/.venv/bin/tidelog broker --set listeners=PLAINTEXT://127.0.0.1:{port} --set log.dirs={datadir}"
adapter() {  # name acks partitions port
  echo "$harness/kafka_adapter.py:KafkaAdapter:name=$1,bootstrap=127.0.0.1:$4,acks=$2,partitions=$3,durability=page cache (fsync per flush.ms/messages; kill -9 safe),cmd=$cmd"
}
cd "$harness/.."
exec bash "$harness/run-peers.sh" --runs "$runs" --n "$n" --size "$size" --peers "$peers" \
  --adapter "$(adapter tidelog-acks1-p1 1 1 19092)" \
  --adapter "$(adapter tidelog-acksall-p1 all 1 19093)" \
  --adapter "$(adapter tidelog-acks1-p8 1 8 19094)" \
  --adapter "$(adapter tidelog-acksall-p8 all 8 19095)"
