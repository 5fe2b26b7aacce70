"""What perf bisect compiles per commit (mha_ci.bisect.code): every kernel spec of the shape's
pass, so a commit whose configs pick other kernels (Gluon, warp-specialized, a grid's form) is
still judged by all the code its shapes can run."""
from __future__ import annotations

import pytest

from mha_ci.bisect.code import CodeObjectsUnknown, code_objects_of, compile_items
from mha_ci.checksums.compile import EVERY_KERNEL_OF_THE_PASS
from mha_ci.perf.shapes import Shape

FWD = Shape("dense", 8, 48, 8, 2048, 2048, 64, 64, True)
BWD = Shape("dense", 8, 48, 8, 2048, 2048, 64, 64, True, pass_="bwd")


def test_an_item_per_pass_and_problem_asks_for_every_kernel_of_its_pass():
    items = compile_items([FWD, BWD, Shape("dense", 1, 4, 4, 4096, 4096, 64, 64, True)], "sm90")
    assert [(i["key"], i["pass"]) for i in items] == [("bwd-bf16-d64x64-causal", "backward"),
                                                      ("fwd-bf16-d64x64-causal", "forward")]
    assert all(i["kernels"] == EVERY_KERNEL_OF_THE_PASS and i["config"] == {} for i in items)


def test_the_code_objects_are_every_kernel_the_payload_compiled():
    items = compile_items([FWD], "sm90")
    compiled = {"results": {"fwd-bf16-d64x64-causal": {"error": None, "kernels": {
        "fwd": {"sha256": "a"}, "fwd_gluon": {"sha256": "b"}, "fwd_gluon_tile": {"sha256": "c"}}}}}
    assert code_objects_of(compiled, items) == {"fwd-bf16-d64x64-causal/fwd": "a",
                                                "fwd-bf16-d64x64-causal/fwd_gluon": "b",
                                                "fwd-bf16-d64x64-causal/fwd_gluon_tile": "c"}


@pytest.mark.parametrize("result, why", [
    ({"error": None, "kernels": {}}, "no kernel compiled"),
    ({"error": None, "kernels": {"fwd": {"sha256": "a"}, "fwd_gluon": {"error": "boom"}}}, "fwd_gluon: boom"),
    ({"error": "refused by the kernel: x", "kernels": {}}, "refused by the kernel"),
    (None, "no kernel compiled"),
])
def test_a_commit_whose_code_cannot_be_read_is_unknown(result, why):
    items = compile_items([FWD], "sm90")
    compiled = {"results": {} if result is None else {"fwd-bf16-d64x64-causal": result}}
    with pytest.raises(CodeObjectsUnknown, match=why):
        code_objects_of(compiled, items)
