"""persalign from Python (issue #54): run a config, open a finished run, read its cells, rows and verdict as
data, build its report, plan a study, generate with one of its deployments for one of its users. The CLI's run,
report, export, plan and generate go through these functions.

    python -c "import persalign; r = persalign.open_run('runs/demo'); print(r.cells().head())"
"""
