"""A toy stand-in for the kernel package with the same interface mha_ci.checksums uses
(launch.Problem, launch.kernel_specs, launch.aligned_specialization, config.config_path,
configs/<arch>-MHA-DEFAULT.json): small kernels that compile in a fraction of a second, so the
checksum machinery can be tested end to end on copies of it. Not collected by pytest."""
