# On the H200: numerics (issue 35) through mha-ci, for one carried Triton.
# usage: STEPS="pr stages blockn acc" bash .lab/nm.sh 3.8     (the bundle in .b38/ or .b34/)
V=$1; TC=triton-$V; B=.b${V/./}; T0=$(date +%s)
rm -rf /tmp/tri; mkdir -p /tmp/tri /tmp/site && tar -C /tmp/tri -xJf $B/triton-$V.0.tar.xz || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 9
# A git checkout of this tree, so that --against HEAD has a base: the plants below are its only changes.
rm -rf /tmp/w && mkdir -p /tmp/w && tar -C . --exclude=./.b34 --exclude=./.b38 --exclude=./.whl -cf - . | tar -C /tmp/w -xf -
cd /tmp/w && git init -q && git add -A && git -c user.name=lab -c user.email=lab@invalid commit -qm run || exit 9
export PYTHONPATH=/tmp/tri:/tmp/site:/tmp/w/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)" | tee $OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $OUT/log.txt
L=$OUT/log.txt
step() {  # step NAME SECONDS command...: run, log, pack its results into $OUT at once
  local name=$1 secs=$2; shift 2; local t=$(date +%s)
  timeout "$secs" "$@" > /tmp/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
  grep -v "^\[#*\.*\]" /tmp/$name.log | tail -${TAIL:-6} | tee -a $L
  (cd /tmp && tar czf $OUT/$name-$V.tgz --exclude='*.dispatches.json' --exclude='base-checkout' --exclude='outputs' $name.log r/$name 2>/dev/null)
}
M="python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC"
# The plants' shapes: forward bucket pe (dqk192) of the PR subset, forward and backward, and
# shapes of other buckets (small_head, tiny head) that the config plants leave alone.
S="--shape dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b64_hq8_hk8_sq1_sk1024_dqk192_dv128_c1
   --shape varlen_b1_hq16_hk16_sq8192_sk8192_dqk192_dv128_c0 --shape varlen_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1
   --shape dense_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1_bwd --shape varlen_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1_bwd
   --shape dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1 --shape dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1_bwd
   --shape varlen_b4_hq16_hk16_sq2048_sk2048_dqk8_dv8_c1"
cfg() {  # cfg KEY VALUE: set forward.pe.KEY in the sm90 config (a plant of the working tree)
  python3 - "$1" "$2" <<'PY'
import json, sys
p = "src/mha/configs/sm90-MHA-DEFAULT.json"
d = json.load(open(p)); d["forward"]["pe"][sys.argv[1]] = int(sys.argv[2])
open(p, "w").write(json.dumps(d, indent=2) + "\n")
PY
  git diff --stat | tail -1 | tee -a $L
}
for s in ${STEPS:-pr stages blockn acc}; do case $s in
  pr)     step pr ${PR_S:-330} $M --subset pr --out /tmp/r/pr ;;
  aa)     step aa ${AA_S:-200} $M --subset pr --against HEAD $S --out /tmp/r/aa ;;
  stages) cfg num_stages 2; step stages ${PLANT_S:-200} $M --subset pr --against HEAD $S --out /tmp/r/stages; git checkout -q . ;;
  blockn) cfg BLOCK_N 32; step blockn ${PLANT_S:-200} $M --subset pr --against HEAD $S --out /tmp/r/blockn; git checkout -q . ;;
  acc)    # a planted accuracy loss: the forward's running output rounded to bf16 after every rescale
          sed -i 's/^        acc = acc \* alpha\[:, None\]$/        acc = (acc * alpha[:, None]).to(tl.bfloat16).to(tl.float32)/' src/mha/kernels/forward.py
          git diff --stat | tail -1 | tee -a $L
          step acc ${PLANT_S:-200} $M --subset pr --against HEAD $S --out /tmp/r/acc; git checkout -q . ;;
esac; done
