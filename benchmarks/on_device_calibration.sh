#!/usr/bin/env bash
# The kernel model's calibration run on one lent GPU (docs/scaling.md, "The kernel model"):
# benchmarks.on_device for wmt17_ende and deepnet_3b, each row in its own process under its own
# time cap, its JSON line appended to $OUT/on_device.jsonl as soon as it is measured, the
# profiled rows' compiled HLO and jax.profiler trace packed as $OUT/<row>.tgz (the files
# benchmarks.device_profile reads back on any machine).
#
#   OUT=/tmp/out TARGET=h200-1 bash benchmarks/on_device_calibration.sh
#
# Rows run in order of what the calibration needs most; a row past its cap is recorded as
# missing in the log and the next one runs.
set -u
: "${OUT:?set OUT to the folder for the records}"
TARGET="${TARGET:-h200-1}"
CAP="${CAP:-90}"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
CUDNN=(--set=model.attention_impl=cudnn --set=model.attention_dropout=0.0)
ONE_GPU=(--set=data.max_tokens=8192)
BIG_REMAT=(--set=model.remat_policy=${BIG_REMAT_POLICY:-full})

row() {  # row NAME CONFIG PROFILE(0|1) ARGS...: one benchmarks.on_device process
  local name=$1 config=$2 profile=$3
  shift 3
  local extra=()
  if [ "$profile" = 1 ]; then extra=(--profile="/tmp/prof_$name" --profile_steps=3); fi
  echo "== $name: $config $* (cap ${CAP}s)"
  local start=$SECONDS
  timeout "$CAP" python3 -m benchmarks.on_device --target="$TARGET" --configs="$config" \
    --json="$OUT/on_device.jsonl" --warmup=3 --steps=20 "${extra[@]}" "$@" \
    2>"/tmp/err_$name" | grep -v '^{'
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  [ "$rc" = 0 ] || tail -n 5 "/tmp/err_$name"
  if [ "$profile" = 1 ] && [ -d "/tmp/prof_$name" ]; then
    tar -czf "$OUT/$name.tgz" -C "/tmp/prof_$name" . && ls -la "$OUT/$name.tgz"
  fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, \
'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
# 2026-11-28 (second run): the current step against the first run's rows, then the levers
row wmt_cudnn_dots wmt17_ende 1 "${CUDNN[@]}" --set=model.remat_policy=dots
CAP=120 row wmt_defaults wmt17_ende 0
CAP=150 row deepnet3b_dots deepnet_3b 1 "${ONE_GPU[@]}" --set=model.remat_policy=dots
row wmt_dots_fused_qkv wmt17_ende 0 "${CUDNN[@]}" --set=model.remat_policy=dots \
  --set=model.fused_qkv=True
row wmt_dots_no_dropout wmt17_ende 0 "${CUDNN[@]}" --set=model.remat_policy=dots \
  --set=model.dropout=0.0
row wmt_dots_loss_chunk wmt17_ende 0 "${CUDNN[@]}" --set=model.remat_policy=dots --set=loss_chunk=32
CAP=150 row deepnet3b_32k deepnet_3b 0 --set=data.max_tokens=32768 "${BIG_REMAT[@]}"
echo "== done"
