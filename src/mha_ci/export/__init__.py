"""Everything mha-ci writes for GitHub: the workflows (github.py; the approved GPU run of pull
requests in approved_gpu.py, images in images_workflow.py, shared steps in steps.py), the job
matrices a workflow builds at run time from a plan (matrix.py), the merge gate over all job
results (gate.py, standard library only: it runs on a bare runner) and the README's CI guide
(ci_guide.py).

All of it is generated from pipelines/, so the YAML there stays the one source of truth and
`mha-ci export github --check` catches a workflow edited by hand or left stale.
"""
