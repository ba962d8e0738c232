#!/usr/bin/env bash
# Record the GPU results that ship in normlab/data/ (run from the repo root on a CUDA machine).
#   OUT=out bash benchmarks/record.sh [norms|narrow|losses|all]
# Writes $OUT/<card-slug>-<date>.jsonl (all records, one schema) and $OUT/record.log.
set -uo pipefail
OUT=${OUT:-out}
WHAT=${1:-all}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
slug=$(python3 -c "import torch,re; print(re.sub(r'[^a-z0-9]+','-',torch.cuda.get_device_name().lower()).strip('-'))")
records="$OUT/$slug-$(date -u +%F).jsonl"
log="$OUT/record.log"
bench() { python3 -m normlab bench --no-progress --out "$OUT/part.jsonl" "$@" 2>&1 | tee -a "$log"; cat "$OUT/part.jsonl" >> "$records"; rm -f "$OUT/part.jsonl"; }

python3 -m normlab info 2>&1 | tee -a "$log"
# Peers and normlab go in one bench invocation per direction: the sweep times every impl of one
# shape before the next, so the ratios compare measurements seconds apart. (The records shipped
# on 2026-11-29 ran the peers and normlab in separate invocations, minutes apart, as their logs
# show: normlab/data/README.md.)
if [[ $WHAT == all || $WHAT == norms ]]; then
  # Forward does not depend on the backward strategy: time it once per impl (and normlab's
  # one-row-per-program forward, layout=row, beside the default where the block-row kernel runs).
  bench --op rms_norm,layer_norm --shapes peers --direction fwd --impl eager,torch,compile,normlab \
        --layout auto,row
  bench --op rms_norm,layer_norm --shapes peers --direction bwd --impl eager,torch,compile,normlab \
        --strategy auto,atomic,two_stage,persistent
fi
if [[ $WHAT == all || $WHAT == narrow ]]; then
  bench --op rms_norm,layer_norm --shapes narrow --direction fwd,bwd,fwd+bwd \
        --impl torch,compile,normlab --layout auto,row,block_row --reps 10
fi
if [[ $WHAT == all || $WHAT == losses ]]; then
  bench --op reverse_kl,soft_cross_entropy --shapes losses --direction fwd+bwd \
        --impl eager,compile,normlab --form auto,split
  bench --op reverse_kl,soft_cross_entropy --shapes losses --direction fwd+bwd --impl normlab \
        --form fused --block-cap 2048,4096,8192,16384,32768
  bench --op reverse_kl,soft_cross_entropy,cross_entropy --shapes losses --direction fwd+bwd \
        --impl normlab --form chunked --block-cap 1024,2048,4096
  bench --op cross_entropy --shapes losses --direction fwd+bwd --impl eager,torch,compile,normlab \
        --form auto,split
  bench --op cross_entropy --shapes losses --direction fwd+bwd --impl normlab --form fused \
        --block-cap 2048,4096,8192,16384,32768
fi
echo "records: $records ($(wc -l < "$records") lines)"
