"""Triton kernels. They only compute: shapes, strides and checks live in mha.launch."""
