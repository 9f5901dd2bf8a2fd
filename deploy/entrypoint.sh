#!/usr/bin/env bash
# What each pod (or CI job) of a sharded grid runs; docs/scaling.md explains the whole flow.
#
#   deploy/entrypoint.sh shard    record one shard of the grid, then push it
#   deploy/entrypoint.sh finish   pull every shard, merge, score, report, push the merged archive
#
# Environment:
#   JOB_COMPLETION_INDEX, JOB_COMPLETION_COUNT   this shard and the number of shards (set by a
#                                   Kubernetes Indexed Job; a CI matrix sets them itself)
#   EVALB_GRID      the grid file (default /etc/evalb/grid.yaml)
#   EVALB_S3_URL    s3://bucket/prefix: shard I goes to PREFIX/shards/I, the merge to PREFIX/merged;
#                   unset: archives stay in EVALB_WORK (a CI matrix moves them as artifacts)
#   EVALB_WORK      local working folder (default /data)
#   EVALB_JOBS      reps in parallel per shard (default 2; see docs/scaling.md)
#   EVALB_RECORD_ARGS  extra evalb-record grid options (e.g. "--timeout 900")
#   EVALB_SHARDS    finish: the number of shards (default JOB_COMPLETION_COUNT)
#   the model's credential (ANTHROPIC_API_KEY, ...), AWS_* for S3, EVALB_S3_ENDPOINT for a
#   non-AWS store, ADR_EVAL_B_JUDGE_CMD for the judge (see docs/scoring.md)
set -euo pipefail

mode="${1:-}"
work="${EVALB_WORK:-/data}"
grid="${EVALB_GRID:-/etc/evalb/grid.yaml}"
s3="${EVALB_S3_URL:-}"
s3="${s3%/}"
push=(archive push) pull=(archive pull)

say() { printf 'entrypoint: %s\n' "$*" >&2; }

case "$mode" in
shard)
  index="${JOB_COMPLETION_INDEX:?set JOB_COMPLETION_INDEX (this shard, from 0)}"
  count="${JOB_COMPLETION_COUNT:?set JOB_COMPLETION_COUNT (the number of shards)}"
  archive="$work/shard-$index"
  mkdir -p "$work"
  if [ -n "$s3" ]; then
    # a pod replaced after a failure resumes from what its predecessor pushed
    evalb "${pull[@]}" --if-exists "$s3/shards/$index" "$archive"
  fi
  say "recording shard $index/$count of $grid into $archive"
  rc=0
  # shellcheck disable=SC2086  # EVALB_RECORD_ARGS is a list of options
  evalb-record grid "$grid" --archive "$archive" --shard "$index/$count" \
    --jobs "${EVALB_JOBS:-2}" ${EVALB_RECORD_ARGS:-} || rc=$?
  # push whatever was committed, even when the grid stopped early: a rerun resumes from it
  if [ -n "$s3" ] && [ -e "$archive/archive.json" ]; then
    evalb "${push[@]}" "$archive" "$s3/shards/$index"
  fi
  exit "$rc"
  ;;
finish)
  count="${EVALB_SHARDS:-${JOB_COMPLETION_COUNT:?set EVALB_SHARDS (the number of shards)}}"
  srcs=()
  for ((i = 0; i < count; i++)); do
    src="$work/shard-$i"
    if [ -n "$s3" ]; then evalb "${pull[@]}" "$s3/shards/$i" "$src"; fi
    [ -e "$src/archive.json" ] || { say "shard $i has no archive at $src"; exit 2; }
    srcs+=("$src")
  done
  merged="$work/merged"
  evalb archive merge "${srcs[@]}" "$merged"
  rc=0
  evalb-score --archive "$merged" --tsv >"$work/scores.tsv" || rc=$?
  [ "$rc" -le 1 ] || exit "$rc"  # 1 = some run failed its checks: a result, not an error
  evalb summary --archive "$merged" | tee "$work/summary.txt"
  evalb report --archive "$merged" --out "$work/report.html"
  if [ -n "$s3" ]; then evalb "${push[@]}" "$merged" "$s3/merged"; fi
  say "merged $count shard(s): $merged (report $work/report.html)"
  ;;
*)
  echo "usage: deploy/entrypoint.sh shard|finish (see docs/scaling.md)" >&2
  exit 2
  ;;
esac
