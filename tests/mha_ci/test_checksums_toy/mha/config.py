"""Bucket rule and config files of the toy package (same shape as mha.config)."""
import json
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"


def config_path(arch):
    return CONFIG_DIR / f"{arch}-MHA-DEFAULT.json"


def select_bucket(pass_, dqk, dv, dtype, dropout):
    if dropout or dtype == "fp32":
        return "dropout_or_fp32"
    if dqk > dv:
        return "pe"
    if 16 < dv <= 64:
        return "small_head"
    return "default"


def resolve(pass_, arch, dqk, dv, dtype, dropout):
    bucket = select_bucket(pass_, dqk, dv, dtype, dropout)
    return bucket, json.loads(config_path(arch).read_text())[pass_][bucket]
