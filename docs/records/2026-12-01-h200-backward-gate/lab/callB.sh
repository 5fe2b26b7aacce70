# refresh-sm90-triton-3.4, then the backward set planted 5 % (bwd calibration)
RTIME=400 bash .gitb/callR.sh triton-3.4
source .gitb/prefix.sh > /dev/null 2>&1
MHA_PERF_PLANT_SLOWDOWN=5 step pl5 ${PLTIME:-135} $M --toolchain triton-3.4 --subset full --shape '*_bwd' --out /tmp/r/pl5
