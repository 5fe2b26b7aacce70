# sourced on the device: pydantic wheels, the carried Triton bundle, main's history, env
set -e
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
rm -rf /tmp/tri; mkdir -p /tmp/tri && for b in .bundles3*/triton-*.tar.xz; do [ -f "$b" ] && tar -C /tmp/tri -xJf "$b"; done
git fetch -q -f .gitb/main.bundle main:refs/remotes/b/main && git reset -q refs/remotes/b/main
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import importlib.metadata as m, triton, torch; print('triton', triton.__version__, 'metadata', m.version('triton'), 'torch', torch.__version__)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
set +e
