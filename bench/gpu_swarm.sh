#!/usr/bin/env bash
# A real swarm on a GPU machine, experiments confined by the full sandbox: one `swarm run` at
# tier 0, then `swarm start` for a few minutes, then what the ledger says ran where.
# Prints figures; asserts nothing (tests run on CPU, see tests/test_trainer_plan.py).
#
#   bash bench/gpu_swarm.sh [MINUTES] [AGENTS]      # DEVICE=cpu to rehearse it on a CPU machine
#
# Needs `swarm` on PATH (an installed research-swarm). Leaves the workspace in $WORKSPACE
# (default: a new temporary folder) and, where $OUT is set, a copy of the ledger there.
set -uo pipefail
MINUTES=${1:-3}
AGENTS=${2:-4}
DEVICE=${DEVICE:-cuda}
WORKSPACE=${WORKSPACE:-$(mktemp -d)/ws}
sql() { swarm --workspace "$WORKSPACE" sql "$1"; }

echo "== machine"
uname -srm
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null ||
    echo "no nvidia-smi"
python3 - <<'EOF'
import torch
from training import sandbox
print(f"torch {torch.__version__}, cuda available {torch.cuda.is_available()}, "
      f"GPUs {torch.cuda.device_count()}")
print(f"landlock abi {sandbox.landlock_abi()}; missing: {sandbox.missing_confinement() or 'none'}")
EOF

echo "== swarm run --tier 0 --device $DEVICE"
start=$(date +%s%N)
swarm --workspace "$WORKSPACE" run --tier 0 --device "$DEVICE"
echo "rc $? wall $((($(date +%s%N) - start) / 1000000)) ms"
log=$(ls -t "$WORKSPACE"/logs/runs/* 2>/dev/null | head -1)
[ -n "$log" ] && echo "its log's first line: $(head -1 "$log")"

echo "== swarm start --agents $AGENTS --minutes $MINUTES (trainers.device auto)"
start=$(date +%s%N)
swarm --workspace "$WORKSPACE" start \
    --agents "$AGENTS" --minutes "$MINUTES" </dev/null >"$WORKSPACE.start.log" 2>&1
echo "rc $? wall $((($(date +%s%N) - start) / 1000000)) ms"
tail -25 "$WORKSPACE.start.log"

echo "== what ran where"
sql "select tier, device, status, unconfined, count(*) runs,
            round(median(metric), 4) median_bpb, round(median(train_seconds), 2) train_s,
            round(median(startup_seconds), 2) startup_s, round(median(eval_seconds), 2) eval_s,
            round(median(peak_mem_mb)) peak_mb, median(tokens) tokens
     from runs group by all order by tier, status"
sql "select tier, verdict, count(*) n from decisions group by all order by tier, verdict"
sql "select version, kind, idea_id from champions order by version"
echo "sandbox lines in the run logs:"
head -qn1 "$WORKSPACE"/logs/runs/* 2>/dev/null | sort | uniq -c
swarm --workspace "$WORKSPACE" audit | tail -12
[ -n "${OUT:-}" ] && cp "$WORKSPACE/ledger.duckdb" "$OUT/" && cp "$WORKSPACE.start.log" "$OUT/"
echo "workspace: $WORKSPACE"
