# Fresh engines in process at 16, rotating: none / base (the checkout) / var (PYTHONPATH=$VAR, a worktree
# with a patch applied), ROUNDS rounds per dataset; one JSON line per run. Needs ../../../../../shared/data.
D=$(cd "$(dirname "$0")" && pwd); cd /tmp  # not the checkout: PYTHONPATH decides which entmtp_vllm runs
export OMP_NUM_THREADS=2 ENTMTP_SHARED_DATA=${ENTMTP_SHARED_DATA:-$D/../../../../../shared/data}
PY=${PY:-$D/../../../../.venv/bin/python}
run() {  # arm dataset n
  case $1 in
    none) DATASET=$2 $PY $D/in_process_ab.py none $3 16 ;;
    base) DATASET=$2 $PY $D/in_process_ab.py entmtp $3 16 ;;
    var) DATASET=$2 PYTHONPATH=$VAR $PY $D/in_process_ab.py entmtp $3 16 ;;
  esac 2>/dev/null | grep '^RESULT' | sed "s/^RESULT /{\"arm\": \"$1\", \"ds\": \"$2\", \"r\": $r, \"res\": /; s/\$/}/"
}
VAR=${VAR:-/tmp/wt2}
for r in $(seq 1 ${ROUNDS:-5}); do
  for ds in ${DATASETS:-mt_bench:46 spec_bench:64}; do
    d=${ds%%:*}; n=${ds##*:}
    case $((r % 3)) in
      1) order="none base var" ;; 2) order="base var none" ;; 0) order="var none base" ;;
    esac
    for a in $order; do run $a $d $n; done
  done
done
