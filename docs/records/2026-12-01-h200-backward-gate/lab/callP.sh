# usage: bash .gitb/callP.sh triton-3.8 : a planted backward config change judged by --against
T=$1
source .gitb/prefix.sh
python3 - <<'PY'
import json
p = "src/mha/configs/sm90-MHA-DEFAULT.json"
d = json.load(open(p)); d["backward"]["default"]["BLOCK_N2"] = 32
open(p, "w").write(json.dumps(d, indent=2) + "\n")
PY
git diff --stat | tee -a $L
step agN2 ${PTIME:-200} $M --toolchain $T --subset pr --against HEAD --out /tmp/r/agN2
git checkout -q src/mha/configs/sm90-MHA-DEFAULT.json
