# refresh-sm90-triton-3.8, then the planted backward config change (sm90 default BLOCK_N2 32) by --against
RTIME=360 bash .gitb/callR.sh triton-3.8
PTIME=140 bash .gitb/callP.sh triton-3.8
